package stoptest

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// orphanEnv tells TestCommand_childDiesWithItsParent's processes apart:
// "parent" starts the child, stops it and dies; "child" is stopped.
const orphanEnv = "QUORUMLOCK_STOPTEST_ORPHAN"

// A parent killed while its child is stopped (a test's timeout, a crash,
// kill -9: no clean-up runs) takes the child with it. The test starts a
// parent process, which starts the child as Run does, stops it, prints
// its pid and kills itself; the child must then be gone. Without
// Pdeathsig (childAttr returning nil) the child was still stopped, state
// "T", 10 s later.
func TestCommand_childDiesWithItsParent(t *testing.T) {
	switch os.Getenv(orphanEnv) {
	case "child":
		// Stopped before it gets here; killed, not woken.
		time.Sleep(time.Minute) // the subject: a child that lives on unless killed
		return
	case "parent":
		child := command(Child{Test: "TestCommand_childDiesWithItsParent", Env: orphanEnv + "=child"}, nil)
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("CHILD %d\n", child.Process.Pid)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL) // dies here: nothing of the test's runs after
		select {}
	}
	parent := exec.Command(os.Args[0], "-test.run=^TestCommand_childDiesWithItsParent$", "-test.count=1")
	parent.Env = append(os.Environ(), orphanEnv+"=parent")
	var out bytes.Buffer
	parent.Stdout, parent.Stderr = &out, &out
	err := parent.Run()
	if ws, ok := parent.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("the parent ended with %v, want killed by SIGKILL:\n%s", err, out.String())
	}
	var pid int
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, "CHILD "); ok {
			pid, _ = strconv.Atoi(rest)
		}
	}
	if pid <= 0 {
		t.Fatalf("the parent named no child:\n%s", out.String())
	}
	// The kernel sends SIGKILL as the parent exits; the bound is only for
	// a machine too busy to run the child's exit, not a measure of it.
	deadline := time.Now().Add(10 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			st := state(pid)
			_ = syscall.Kill(pid, syscall.SIGKILL) // seen alive a moment ago: it is ours
			t.Fatalf("the child %d outlived its killed parent by 10 s (state %q)", pid, st)
		}
		time.Sleep(10 * time.Millisecond) // polls, bounded by the deadline above
	}
}

// alive reports whether process pid runs or is stopped: not gone, nor a
// zombie (its new parent, init or a subreaper, may not have reaped it).
func alive(pid int) bool {
	s := state(pid)
	return s != "" && s != "Z" && s != "X"
}

// state is process pid's state letter in /proc ("" when it is gone).
func state(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	// pid (comm) state ...: comm may hold spaces and parentheses.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+2 >= len(b) {
		return ""
	}
	return string(b[i+2])
}

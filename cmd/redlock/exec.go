package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// exitNoCommand is the shell's code for a command that cannot be run.
const exitNoCommand = 127

// cmdExec runs a command while holding the lock.
func cmdExec(ctx context.Context, e *env, args []string) int {
	fs := flag.NewFlagSet("exec", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	ttl := fs.Duration("ttl", 30*time.Second, "the lock's time to live; it is extended every ttl/3 while the command runs")
	wait := fs.Duration("wait", 0, "how long to wait for the lock (0: fail at once when it is held)")
	grace := fs.Duration("grace", 10*time.Second, "after SIGTERM, how long the command has before SIGKILL")
	fence := fs.Bool("fence", false, "take a fencing token and export it as QUORUMLOCK_FENCE")
	fs.Usage = func() {
		fmt.Fprintln(e.stderr, "usage: redlock exec [--ttl D] [--wait D] [--grace D] [--fence] KEY -- COMMAND [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	rest := fs.Args()
	if len(rest) > 0 && rest[0] == "--" { // "--" before KEY
		rest = rest[1:]
	}
	if len(rest) < 2 {
		fs.Usage()
		return exitUsage
	}
	key, command := rest[0], rest[1:]
	if command[0] == "--" {
		command = command[1:]
	}
	if len(command) == 0 {
		fs.Usage()
		return exitUsage
	}
	if *grace < 0 {
		fmt.Fprintln(e.stderr, "redlock: --grace must not be negative")
		return exitUsage
	}

	opts := []redlock.LockOption{redlock.WithTTL(*ttl), redlock.WithWait(*wait), redlock.WithAutoExtend(0)}
	if *fence {
		opts = append(opts, redlock.WithFencing())
	}
	l, err := e.client.Acquire(ctx, key, opts...)
	if err != nil {
		fmt.Fprintf(e.stderr, "redlock: lock %q not acquired: %v\n", key, err)
		return failCode(err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second+2*e.timeout)
		defer cancel()
		if err := l.Release(rctx); err != nil && !errors.Is(err, redlock.ErrNotHeld) {
			fmt.Fprintf(e.stderr, "redlock: releasing %q: %v\n", key, err)
		}
	}()

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
	cmd.Env = append(os.Environ(), "QUORUMLOCK_KEY="+key)
	if *fence {
		cmd.Env = append(cmd.Env, "QUORUMLOCK_FENCE="+strconv.FormatUint(l.Fence(), 10))
	}
	// Its own process group, so that a kill reaches what it started too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(e.stderr, "redlock: %v\n", err)
		return exitNoCommand
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()

	// stop sends SIGTERM to the command's group, and SIGKILL after the
	// grace period; it returns the command's end.
	stop := func() error {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(*grace)
		defer t.Stop()
		select {
		case err := <-done:
			return err
		case <-t.C:
			fmt.Fprintf(e.stderr, "redlock: the command did not stop within %v: SIGKILL\n", *grace)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			return <-done
		}
	}
	select {
	case err := <-done:
		return exitCode(err)
	case <-l.Lost():
		fmt.Fprintf(e.stderr, "redlock: lock %q lost while the command ran (%v): stopping it\n", key, l.Err())
		stop()
		return exitLost
	case <-ctx.Done():
		// redlock itself was interrupted: pass it on, then release.
		return exitCode(stop())
	}
}

// exitCode is the command's exit code: its own, or 128+n when signal n
// ended it.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return exitFailure
}

package redlock_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// stoppedChildEnv carries the path and the masters' addresses to the
// child of TestValidity_processStoppedLongerThanTheTTL.
const stoppedChildEnv = "QUORUMLOCK_STOPPED_CHILD"

// stoppedHold is one lock a client got: when TryAcquire was called, when it
// returned, and the lock's Until, in ns since the Unix epoch.
type stoppedHold struct {
	Who              string
	Call, Ret, Until int64
	Rel              int64 // when Release was called: the holder stopped using it
	ReleaseOK        bool
}

const (
	stoppedTTL     = 500 * time.Millisecond
	stoppedTimeout = 50 * time.Millisecond
	stoppedKey     = "validity:stopped"
)

// stoppedRuns bounds how often TestValidity_processStoppedLongerThanTheTTL runs
// its scenario until a round of the child is in flight across the stop:
// about one run in ten, on either path, has none.
const stoppedRuns = 5

// TestValidity_processStoppedLongerThanTheTTL: the client runs in a child
// process, eight goroutines contending for one key with TryAcquire (TTL
// 500 ms, timeout 50 ms, N=3), so that some round is always in flight;
// the test stops the child (SIGSTOP) for 1.5 s, three TTLs, and meanwhile
// acquires the key from this process. No lock may come back whose Until
// is not its round's start (within the call) + TTL - drift; no two locks (the
// child's among themselves and this process's) may be valid at once,
// counting a lock held from when TryAcquire returned to its Until or
// its Release call; a
// lock that came back already spent is counted (it can only be one whose
// process stopped between the validity check and the return). The key is
// gone at the end.
//
// What it is for is a round of the child begun before the stop and ended
// after it: a stop does not always catch one, so the test runs again, at
// most stoppedRuns times, until one did, and fails if none ever did.
func TestValidity_processStoppedLongerThanTheTTL(t *testing.T) {
	if spec := os.Getenv(stoppedChildEnv); spec != "" {
		stoppedChild(t, spec)
		return
	}
	redistest.SkipShort(t)
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	forEachPath(t, func(t *testing.T, path connPath) {
		c := addrClient(t, path, addrs, redlock.WithTimeout(stoppedTimeout))
		for run := 1; ; run++ {
			if stoppedRun(t, path, c, servers, addrs) > 0 || t.Failed() {
				return
			}
			if run == stoppedRuns {
				t.Fatalf("in %d runs no round of the child was in flight across the stop: the test never saw what it is for", run)
			}
			t.Logf("run %d: no round of the child was in flight across the stop; running again", run)
		}
	})
}

// stoppedRun is one run of TestValidity_processStoppedLongerThanTheTTL: it
// starts the child on the masters (servers, at addrs), stops it for 1.5 s
// while c takes the key, checks what both got, and returns how many of the child's rounds were in flight
// across the stop.
func stoppedRun(t *testing.T, path connPath, c *redlock.Client, servers []*redistest.Server, addrs []string) (inFlight int) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestValidity_processStoppedLongerThanTheTTL$", "-test.short", "-test.count=1")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s;%s", stoppedChildEnv, path.name, strings.Join(addrs, ",")))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		holds  []stoppedHold
		failed []stoppedHold
		other  []string
	)
	read := make(chan struct{})
	running := make(chan struct{}) // the child has reported a round
	go func() {
		defer close(read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			var h stoppedHold
			if rest, ok := strings.CutPrefix(line, "HOLD "); ok && json.Unmarshal([]byte(rest), &h) == nil {
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
			} else if rest, ok := strings.CutPrefix(line, "FAIL "); ok && json.Unmarshal([]byte(rest), &h) == nil {
				mu.Lock()
				failed = append(failed, h)
				mu.Unlock()
			} else {
				other = append(other, line)
				continue
			}
			select {
			case <-running:
			default:
				close(running)
			}
		}
	}()
	// Let the child run (its rounds going, not its start-up), then stop
	// it for 1.5 s while this process takes the key.
	select {
	case <-running:
	case <-read:
	}
	time.Sleep(100 * time.Millisecond) // the subject: the child runs its rounds a while before the stop
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	var mine []stoppedHold
	ctx := context.Background()
	for time.Since(stopped) < 1500*time.Millisecond {
		call := time.Now()
		l, err := c.TryAcquire(ctx, stoppedKey, redlock.WithTTL(stoppedTTL))
		if err != nil {
			time.Sleep(5 * time.Millisecond) // the subject: this process's pace between tries
			continue
		}
		h := stoppedHold{Who: "parent", Call: call.UnixNano(), Ret: time.Now().UnixNano(), Until: l.Until().UnixNano()}
		time.Sleep(20 * time.Millisecond) // the subject: a hold
		h.Rel = time.Now().UnixNano()
		h.ReleaseOK = l.Release(ctx) == nil
		mine = append(mine, h)
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	resumed := time.Now()
	<-read
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v; %q", err, other)
	}
	all := append(slices.Clone(holds), mine...)
	drift := time.Duration(float64(stoppedTTL)*0.01) + 2*time.Millisecond
	spent := 0
	afterStop := 0
	for _, h := range all {
		// Until is the round's start + TTL - drift: that start lies
		// within the call.
		if start := h.Until - int64(stoppedTTL-drift); start < h.Call || start > h.Ret {
			t.Errorf("%s: a lock valid until %v after its call began (returned after %v): not its start + TTL - drift",
				h.Who, time.Duration(h.Until-h.Call), time.Duration(h.Ret-h.Call))
		}
		if h.Ret >= h.Until {
			spent++
		}
		if h.Who == "child" && h.Call < stopped.UnixNano() && h.Ret > resumed.UnixNano() {
			afterStop++
		}
	}
	slices.SortFunc(all, func(a, b stoppedHold) int { return int(a.Ret - b.Ret) })
	var live []stoppedHold
	for _, h := range all {
		if h.Ret >= h.Until {
			continue
		}
		for _, o := range live {
			if end := min(o.Until, o.Rel); end > h.Ret {
				t.Errorf("two locks valid at once: %s's held %v past %s's return (%s called %v before the stop)",
					o.Who, time.Duration(end-h.Ret), h.Who, h.Who, time.Duration(stopped.UnixNano()-h.Call))
			}
		}
		live = append(live, h)
	}
	across := 0
	for _, h := range failed {
		if h.Call < stopped.UnixNano() && h.Ret > resumed.UnixNano() {
			across++
		}
	}
	t.Logf("%s: child held %d locks (%d failed attempts, %d of them begun before the stop and failed after it), parent %d during the 1.5 s stop; %d came back spent; %d child locks begun before and returned after the stop",
		path, len(holds), len(failed), across, len(mine), spent, afterStop)
	if len(mine) == 0 {
		t.Errorf("this process never got the key while the child was stopped for 3 TTLs")
	}
	if len(holds) == 0 {
		t.Errorf("the child never got the key: %q", other)
	}
	leftover.None(t, servers, stoppedKey)
	return across + afterStop
}

// stoppedChild runs in the child: eight goroutines TryAcquire one key
// for 2.1 s (wall time, stops included), hold what they get 20 ms and
// release it; each lock is printed as it is released.
func stoppedChild(t *testing.T, spec string) {
	path, list, _ := strings.Cut(spec, ";")
	c, err := redigo.NewFromAddrs(strings.Split(list, ","), redlock.WithTimeout(stoppedTimeout),
		redigo.WithPipelining(path == "pipelined"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	print := func(s string) {
		mu.Lock()
		fmt.Println(s)
		mu.Unlock()
	}
	ctx := context.Background()
	end := time.Now().Add(2100 * time.Millisecond)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				call := time.Now()
				l, err := c.TryAcquire(ctx, stoppedKey, redlock.WithTTL(stoppedTTL))
				ret := time.Now()
				if err != nil {
					b, _ := json.Marshal(stoppedHold{Who: "child", Call: call.UnixNano(), Ret: ret.UnixNano()})
					print("FAIL " + string(b))
					continue
				}
				h := stoppedHold{Who: "child", Call: call.UnixNano(), Ret: ret.UnixNano(), Until: l.Until().UnixNano()}
				time.Sleep(20 * time.Millisecond) // the subject: a hold
				h.Rel = time.Now().UnixNano()
				h.ReleaseOK = l.Release(ctx) == nil
				b, _ := json.Marshal(h)
				print("HOLD " + string(b))
			}
		}()
	}
	wg.Wait()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

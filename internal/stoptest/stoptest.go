// Package stoptest makes a busy process exact for the stopped-client tests
// of every module: the test runs itself again as a child process, which
// works the masters through its client, and stops that child (SIGSTOP)
// again and again, for longer than its per-master timeout, then lets it
// go on (SIGCONT). A stopped process reads no reply and fires no timer;
// when it runs again the replies are waiting in its sockets, and its
// timers and readers race.
//
// The parent calls Run; the child, told apart by the variable Run adds to
// its environment, does its work (Churn) and ends with Report, whose line
// Run reads back as a Result.
package stoptest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// Result is what the child reports: how many lock-and-release cycles it
// completed and what failed.
type Result struct {
	Cycles, FailedAcquire, UnconfirmedRelease int
	Errors                                    []string // the first few errors
}

// resultPrefix starts the line of the child's Result in its output.
const resultPrefix = "RESULT "

// Churn is the child's work: 16 goroutines lock and unlock keys of their
// own through c (TryAcquire, TTL 10 s, then Release) for d, and it
// returns what completed and what failed. A key whose acquisition or
// release failed is not used again: what the failure left does not fail
// the next cycle.
//
// First each goroutine takes and releases a key of its own with Acquire,
// waiting up to 30 s, and none of that is counted: a fresh client's first
// contact (its dials, the masters' identity probe, the script loads) is
// not what a run measures, and the 16 at once leave the client with a
// connection for each on every master.
func Churn(c *redlock.Client, d time.Duration) Result {
	var (
		cycles, failedAcq, unconfirmed atomic.Int64
		mu                             sync.Mutex
		errs                           []string
	)
	note := func(err error) {
		mu.Lock()
		if len(errs) < 3 {
			errs = append(errs, err.Error())
		}
		mu.Unlock()
	}
	ctx := context.Background()
	var warm sync.WaitGroup
	for g := range 16 {
		warm.Add(1)
		go func() {
			defer warm.Done()
			// A TTL of a second: a release that fails leaves nothing
			// for the parent's count of keys after the run.
			l, err := c.Acquire(ctx, fmt.Sprintf("stopped:warm:%d", g), redlock.WithTTL(time.Second),
				redlock.WithWait(30*time.Second))
			if err == nil {
				_ = l.Release(ctx)
			}
		}()
	}
	warm.Wait()
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("stopped:%d", g)
			for time.Now().Before(end) {
				l, err := c.TryAcquire(ctx, key, redlock.WithTTL(10*time.Second))
				if err != nil {
					failedAcq.Add(1)
					note(err)
					key += "+"
					continue
				}
				if err := l.Release(ctx); err != nil {
					unconfirmed.Add(1)
					note(err)
					key += "+"
					continue
				}
				cycles.Add(1)
			}
		}()
	}
	wg.Wait()
	return Result{Cycles: int(cycles.Load()), FailedAcquire: int(failedAcq.Load()),
		UnconfirmedRelease: int(unconfirmed.Load()), Errors: errs}
}

// command is the child of c, its output going to out (nil: nowhere), not
// yet started.
func command(c Child, out io.Writer) *exec.Cmd {
	args := append([]string{"-test.run=^" + c.Test + "$", "-test.count=1"}, c.Args...)
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), c.Env)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = childAttr()
	return cmd
}

// Report prints r as the child's Result, for Run to read. It is called in
// the child, once, at the end.
func Report(r Result) {
	b, err := json.Marshal(r)
	if err != nil {
		panic(err) // a struct of ints and strings always marshals
	}
	fmt.Printf("%s%s\n", resultPrefix, b)
}

// Child is the child process Run starts: the test binary again, running
// only Test.
type Child struct {
	Test string   // the name of the test the child runs: the one calling Run
	Args []string // more flags for the child, such as -test.short
	Env  string   // "NAME=value", added to the child's environment: how the test knows it is the child

	Every    time.Duration // how long the child runs between two stops
	Stop     time.Duration // how long each stop lasts
	MinStops int           // how often, at least, the child must have been stopped for the run to count
}

// Run starts the child and, until it exits, stops it for c.Stop after
// every c.Every it ran. It returns the Result the child reported and how
// often it was stopped. It fails t, with the child's output, when the
// child cannot start, fails, reports no Result, completed no cycle or was
// stopped fewer than c.MinStops times: the run then showed nothing.
//
// The child never outlives the test stopped: t's clean-up kills it (a
// stopped process too) and waits for it, whatever way Run or the test
// ends, and on Linux the kernel kills it when this process dies, between
// a stop and its SIGCONT too (Pdeathsig, childAttr).
func Run(t testing.TB, c Child) (Result, int) {
	t.Helper()
	// Pdeathsig follows the thread that started the child, not the
	// process: this goroutine keeps that thread until the child is gone,
	// so that the runtime cannot end it under a live child.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var out strings.Builder // one writer for both: exec copies them in one goroutine
	cmd := command(c, &out)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var err error // Wait's, once exited is closed
	go func() {
		err = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error: it has exited already
		<-exited
	})
	stops := 0
loop:
	for {
		select {
		case <-exited:
			break loop
		case <-time.After(c.Every):
		}
		if cmd.Process.Signal(syscall.SIGSTOP) != nil {
			continue // it is exiting: Wait says how
		}
		stops++
		time.Sleep(c.Stop)
		_ = cmd.Process.Signal(syscall.SIGCONT)
	}
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out.String())
	}
	var res Result
	found := false
	for _, line := range strings.Split(out.String(), "\n") {
		if rest, ok := strings.CutPrefix(line, resultPrefix); ok {
			if err := json.Unmarshal([]byte(rest), &res); err != nil {
				t.Fatalf("child's result %q: %v", rest, err)
			}
			found = true
		}
	}
	if !found || res.Cycles == 0 || stops < c.MinStops {
		t.Fatalf("the child ran %d cycles under %d stops (reported: %v):\n%s", res.Cycles, stops, found, out.String())
	}
	return res, stops
}

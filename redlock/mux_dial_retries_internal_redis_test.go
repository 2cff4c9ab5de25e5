package redlock

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// A dial that timed out while this process stalled is dialed
// again at once, up to redigot.DialTries. With the master truly
// stopped and the process stalling all the while, the dials must still
// end and count the master down; Close during them must not hang or
// leak; and the backlog must reach the master once, in order.

// countingDialer is a master's pool whose dials are counted.
type countingDialer struct {
	p     *pool.RedisPool
	dials atomic.Int64
}

func (d *countingDialer) GetContext(ctx context.Context) (redis.Conn, error) {
	return d.p.GetContext(ctx)
}

func (d *countingDialer) Dial(ctx context.Context) (redis.Conn, error) {
	d.dials.Add(1)
	return d.p.Dial(ctx)
}

// fakeStalling makes this process stall as far as the mux can tell,
// for the rest of the test: goroutines that spin on every CPU (timers
// fire late), and a stall recorded every 10 ms as a late timer would.
func fakeStalling(t *testing.T, st *stall.Stalls) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < 2*runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				default:
				}
				for j := 0; j < 1e5; j++ {
					n ^= j
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
				now := time.Now()
				st.Note(now.Add(-20*time.Millisecond), now)
			}
		}
	}()
	t.Cleanup(func() { close(stop); wg.Wait() })
}

// A stopped master (SIGSTOP: the TCP connect succeeds, the SCRIPT LOADs
// are never answered) on a process that stalls all the while: each
// dialer dials at most redigot.DialTries times, the acquisition fails within a
// bound, and the master is then counted down (the next acquisition fails
// at once, "its last dial failed", without a dial).
func TestMuxDial_stoppedMasterOnAStallingProcessIsCountedDown(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	d := &countingDialer{p: s.Pool()}
	const timeout = 100 * time.Millisecond
	c, err := newRedigo([]pool.Pool{d}, WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	fakeStalling(t, c.stalls)
	ctx := context.Background()
	start := time.Now()
	_, err = c.TryAcquire(ctx, "hung:stopped")
	el := time.Since(start)
	if err == nil {
		t.Fatal("acquired on a stopped master")
	}
	// The dialer ends after redigot.DialTries dials at most.
	ok := redistest.WaitFor(context.Background(), func() bool {
		return !c.masters[0].t.(redigot.MuxState).Dialing()
	})
	if !ok {
		t.Fatal("the dialer still dials")
	}
	if n := d.dials.Load(); n < 1 || n > redigot.DialTries {
		t.Fatalf("%d dials, want 1 to %d", n, redigot.DialTries)
	}
	if el > 10*time.Second {
		t.Errorf("the acquisition failed after %v (timeout %v)", el, timeout)
	}
	before := d.dials.Load()
	start = time.Now()
	_, err = c.TryAcquire(ctx, "hung:stopped:2")
	if err == nil || !strings.Contains(err.Error(), "its last dial failed") {
		t.Fatalf("after the dials failed: %v, want the master counted down", err)
	}
	if n := d.dials.Load(); n != before {
		t.Fatalf("a counted-down master was dialed again (%d dials, %d before)", n, before)
	}
	t.Logf("dials %d; first acquisition failed after %v, the next after %v", before, el, time.Since(start))
}

// Close while the dialer retries on a stopped master, the process
// stalling: it returns within about one dial's timeout and leaves no
// goroutine behind.
func TestMuxDial_closeDuringTheDialRetries(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	d := &countingDialer{p: s.Pool()}
	const timeout = 200 * time.Millisecond
	ignore := goleak.IgnoreCurrent()
	c, err := newRedigo([]pool.Pool{d}, WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	fakeStalling(t, c.stalls)
	done := make(chan error, 1)
	go func() {
		_, err := c.TryAcquire(context.Background(), "hung:close")
		done <- err
	}()
	// Into the second dial or later.
	if !redistest.WaitFor(context.Background(), func() bool { return d.dials.Load() >= 2 }) {
		t.Fatalf("%d dials: the dialer did not dial again in the stall", d.dials.Load())
	}
	start := time.Now()
	closed := make(chan struct{})
	go func() { c.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waits 10 s into the dial retries")
	}
	if el := time.Since(start); el > timeout+2*time.Second {
		t.Errorf("Close took %v during the dial retries (timeout %v)", el, timeout)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("acquired on a stopped master")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the acquisition did not end after Close")
	}
	if n := d.dials.Load(); n > redigot.DialTries {
		t.Fatalf("%d dials, at most %d", n, redigot.DialTries)
	}
	_ = s.Resume()
	d.p.Close()
	goleak.VerifyNone(t, ignore, goleak.IgnoreTopFunction("github.com/quorumlock/quorumlock/redlock.fakeStalling.func1"),
		goleak.IgnoreTopFunction("github.com/quorumlock/quorumlock/redlock.fakeStalling.func2"))
}

// The commands that waited in the backlog through two dials that timed
// out in a stall reach the master once each, in the order submitted,
// on the third.
func TestMuxDial_backlogOnceInOrderAcrossTheDialRetries(t *testing.T) {
	redistest.SkipShort(t)
	s := redistest.StartOne(t)
	st := stall.New(clock.Real())
	d := &flakyDialer{p: s.Pool(), stall: true, fails: redigot.DialTries - 1, pause: 30 * time.Millisecond, stalls: st} // commands pile up in the backlog
	t.Cleanup(func() { d.p.Close() })
	mx := redigot.New(s.Addr(), d, true, time.Second, st)
	defer mx.Close()
	const n = 200
	var wg sync.WaitGroup
	errs := make([]error, n)
	wg.Add(n)
	for i := 0; i < n; i++ {
		i := i
		mx.Send(&Command{Name: "EVAL", Args: []any{"redis.call('RPUSH', KEYS[1], ARGV[1]) return 1", 1, "hung:list", i}, Reply: transport.ReplyFlag,
			Done: func(_ any, err error, _ SendInfo) { errs[i] = err; wg.Done() }})
		if i%20 == 0 {
			time.Sleep(5 * time.Millisecond) // the subject: the sends' pace, spread across the dials
		}
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
	}
	if got := d.dials.Load(); got != redigot.DialTries {
		t.Fatalf("%d dials, want %d", got, redigot.DialTries)
	}
	v, err := redis.Strings(s.Do("LRANGE", "hung:list", 0, -1))
	if err != nil {
		t.Fatal(err)
	}
	if len(v) != n {
		t.Fatalf("the master holds %d elements, want %d", len(v), n)
	}
	for i, e := range v {
		if e != fmt.Sprint(i) {
			t.Fatalf("element %d is %s: not in the order submitted", i, e)
		}
	}
}

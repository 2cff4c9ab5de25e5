package redlock

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/leftover"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
)

// infoLate is a master's transport that hands its INFO answers to the
// Client delay after they came, while its lock commands are answered at
// once: a busy process whose probe is read late (its reader, or the
// probe's goroutine, ran long after the master answered), or a pool
// whose INFO connection is slow. Close hands over what it still holds at
// once. shape, when not nil, changes each answer it hands over: what a
// busy process reads late is untrusted bytes too.
type infoLate struct {
	Transport
	delay time.Duration
	shape func(reply any, err error) (any, error)
	// abandon: Close returns without waiting for the answers it hands
	// over (a transport that breaks its contract).
	abandon bool
	quit    chan struct{}
	once    sync.Once
	wg      sync.WaitGroup
}

func newInfoLate(t Transport, delay time.Duration) *infoLate {
	return &infoLate{Transport: t, delay: delay, quit: make(chan struct{})}
}

func (s *infoLate) Send(cmd *Command) {
	if cmd.Name != "INFO" {
		s.Transport.Send(cmd)
		return
	}
	s.wg.Add(1)
	late := *cmd
	late.To, late.Done = nil, func(reply any, err error, info SendInfo) {
		go func() {
			defer s.wg.Done()
			t := time.NewTimer(s.delay)
			defer t.Stop()
			select {
			case <-t.C:
			case <-s.quit:
			}
			if s.shape != nil {
				reply, err = s.shape(reply, err)
			}
			cmd.Complete(reply, err, info)
		}()
	}
	s.Transport.Send(&late)
}

func (s *infoLate) Close() error {
	s.once.Do(func() { close(s.quit) })
	err := s.Transport.Close()
	if !s.abandon {
		s.wg.Wait()
	}
	return err
}

// lateProbeClient is a fresh Client of servers on one path, closed with
// the test, whose masters late hand their INFO answers over delay late.
func lateProbeClient(t *testing.T, servers []*redistest.Server, pipelined bool, timeout, delay time.Duration, late ...int) *Client {
	t.Helper()
	pools := make([]pool.Pool, len(servers))
	for i, s := range servers {
		pools[i] = s.Pool() // closed with the test
	}
	c, err := newRedigo(pools, withPipelining(pipelined), WithTimeout(timeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	for _, i := range late {
		c.masters[i].t = newInfoLate(c.masters[i].t, delay) // before any call
	}
	return c
}

// A fresh Client's first acquisition is granted by every master, whose
// run_id probes are answered too but read 300 ms late, past the probe's
// wait (the per-master timeout and ident.ProbeGrace, 200 ms): the masters that
// granted answer, so the round waits for their probes on its own budget,
// and the grants count once the masters are identified. Before, the
// round gave up with the probe and failed, its grants "not counted".
func TestIdentity_grantCountsOnceItsLateProbeAnswers(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			c := lateProbeClient(t, servers, p.pipelined, 100*time.Millisecond, 300*time.Millisecond, 0, 1, 2)
			key := "lateprobe:" + p.name
			l, err := c.TryAcquire(context.Background(), key, WithTTL(time.Minute))
			if err != nil {
				t.Fatalf("first call, every master granting and answering its probe late: %v", err)
			}
			if err := l.Release(context.Background()); err != nil {
				t.Fatal(err)
			}
			leftover.None(t, servers, key)
		})
	}
}

// A master that granted but whose probe is not answered is waited for no
// longer than the round's budget: never past the lock's validity (a grant
// of a lock with no validity left is worth nothing), and never past the
// round's deadline and stall.LateBound more (a master that granted and
// then hung). Masters 1 and 2 grant and answer their probes only after 5 s;
// master 0 is identified at once, so the attempt waits for one more.
// It fails, rolled back, at the bound.
func TestIdentity_lateProbeWaitIsBounded(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 100 * time.Millisecond
	cases := []struct {
		name  string
		ttl   time.Duration
		bound time.Duration // the wait's end, from the call's start
	}{
		{"validity", 400 * time.Millisecond, 400 * time.Millisecond},
		{"lateBound", time.Minute, timeout + time.Second},
	}
	for _, p := range leadPaths {
		for _, tc := range cases {
			t.Run(p.name+"/"+tc.name, func(t *testing.T) {
				c := lateProbeClient(t, servers, p.pipelined, timeout, 5*time.Second, 1, 2)
				key := "lateprobe:bound:" + p.name + ":" + tc.name
				failsUncountedWithin(t, c, key, tc.ttl, tc.bound)
				leftover.None(t, servers, key)
			})
		}
	}
}

// infoAfterGrant is a master's transport that holds its INFO back until
// the master has granted a lock command, then stops the master (stop:
// SIGSTOP) and sends the INFO on: a master that granted and hung before
// it answered the run_id probe.
type infoAfterGrant struct {
	Transport
	stop func()

	mu      sync.Mutex
	held    []*Command
	granted bool
	wg      sync.WaitGroup
}

func (s *infoAfterGrant) Send(cmd *Command) {
	if cmd.Name == "INFO" {
		s.mu.Lock()
		if !s.granted {
			s.held = append(s.held, cmd)
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		s.Transport.Send(cmd)
		return
	}
	wrapped := *cmd
	wrapped.To, wrapped.Done = nil, func(reply any, err error, info SendInfo) {
		cmd.Complete(reply, err, info)
		if err == nil && reply != nil {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.release(true) }()
		}
	}
	s.Transport.Send(&wrapped)
}

// release sends the INFO held back on, after stopping the master if stop.
func (s *infoAfterGrant) release(stop bool) {
	s.mu.Lock()
	if s.granted {
		s.mu.Unlock()
		return
	}
	s.granted = true
	held := s.held
	s.held = nil
	s.mu.Unlock()
	if stop {
		s.stop()
	}
	for _, cmd := range held {
		s.Transport.Send(cmd)
	}
}

func (s *infoAfterGrant) Close() error {
	s.wg.Wait()
	s.release(false)
	return s.Transport.Close()
}

// A master that granted the first acquisition and was then stopped
// (SIGSTOP), its run_id probe unanswered, is waited for no longer than
// the round waits for a stalled reply: the per-master timeout and
// stall.LateBound (a second) more. Master 1 refuses (another holder has
// the key), so the attempt needs master 2's grant; it fails, and waits
// for its rollback on the masters that granted as any failed attempt
// does (one round trip; on the stopped master, two timeouts at most on
// the pooled path, one on the pipelined). Once master 2 runs again
// nothing of the attempt is left.
func TestIdentity_masterStoppedAfterItGrantedBoundsTheFirstCall_pausedMaster(t *testing.T) {
	servers := redistest.Start(t, 3)
	const timeout = 200 * time.Millisecond
	// stall.LateBound(timeout), then the rollback; and a busy host's
	// scheduling (a call that waited for the stopped master past these
	// would take a minute, its wait).
	const bound = timeout + time.Second + 2*timeout + 400*time.Millisecond
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lateprobe:stopped:" + p.name
			if _, err := servers[1].Do("SET", key, "another-holder", "PX", 600000); err != nil {
				t.Fatal(err)
			}
			defer servers[1].Do("DEL", key)
			defer servers[2].Resume()
			c := lateProbeClient(t, servers, p.pipelined, timeout, 0)
			c.masters[2].t = &infoAfterGrant{Transport: c.masters[2].t, stop: func() {
				if err := servers[2].Pause(); err != nil {
					t.Error(err)
				}
			}}
			failsUncountedWithin(t, c, key, time.Minute, bound)
			if err := servers[2].Resume(); err != nil {
				t.Fatal(err)
			}
			leftover.None(t, []*redistest.Server{servers[0], servers[2]}, key)
		})
	}
}

// failsUncountedWithin makes c's first attempt on key with ttl, which must
// fail with grants not counted, within bound and a loaded machine's
// lateness.
func failsUncountedWithin(t *testing.T, c *Client, key string, ttl, bound time.Duration) {
	t.Helper()
	const slack = 800 * time.Millisecond
	start := time.Now()
	l, err := c.TryAcquire(context.Background(), key, WithTTL(ttl))
	took := time.Since(start)
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatal("acquired on grants of masters not identified")
	}
	if !errors.Is(err, ErrNotAcquired) || !strings.Contains(err.Error(), "granted but not counted") {
		t.Errorf("%v, want ErrNotAcquired naming grants not counted", err)
	}
	t.Logf("the first call took %v (bound %v)", took, bound)
	if took > bound+slack {
		t.Errorf("the first call took %v, want at most %v (with %v of slack)", took, bound, slack)
	}
}

package redlock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redlock"
)

// A holder with a short TTL (1.2 s, extended every 400 ms) makes every
// hinted retry of its waiters come too early: the key is never free when
// the hint said, and the hint (under 1.2 s) is sooner than the waiters'
// fallback poll (1–2 s for an 8 s TTL). Each refusal doubles the least
// delay a hint may give, up to the maximum backoff, so the waiters never
// spin: over four seconds, four waiters of a key held so make hardly more
// attempts than the same waiters on a key held for a minute (which gives
// no hint: they poll).
func TestExpiry_extendingHolderDoesNotSpinItsWaiters(t *testing.T) {
	servers := redistest.Start(t, 3)
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr()
	}
	const waiters, wait = 4, 4 * time.Second
	refused := func() int {
		n := 0
		for _, s := range servers {
			n += s.Calls("pttl")
		}
		return n
	}
	run := func(t *testing.T, key string) int {
		clients := make([]*redlock.Client, waiters)
		for i := range clients {
			clients[i] = addrClient(t, pipelinedPath, addrs)
		}
		before := refused()
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				defer cancel()
				l, err := c.Acquire(ctx, key, redlock.WithTTL(8*time.Second))
				if err == nil {
					l.Release(context.Background())
					t.Errorf("a waiter took %s while it was held", key)
				} else if !errors.Is(err, redlock.ErrNotAcquired) {
					t.Errorf("Acquire: %v", err)
				}
			}()
		}
		wg.Wait()
		return refused() - before
	}
	holder := addrClient(t, pipelinedPath, addrs)
	ctx := context.Background()
	l, err := holder.Acquire(ctx, "extending-holder", redlock.WithTTL(1200*time.Millisecond), redlock.WithAutoExtend(400*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	extending := run(t, "extending-holder")
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range servers {
		if _, err := s.Do("SET", "long-holder", "theirs", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	long := run(t, "long-holder")
	t.Logf("refused waiting attempts (summed over 3 masters) in %v by %d waiters: %d behind an extending 1.2 s holder, %d behind a 60 s one", wait, waiters, extending, long)
	if extending > 4*long+waiters*3*4 {
		t.Errorf("%d refused waiting attempts behind an extending holder, against %d behind one holding for a minute", extending, long)
	}
}

package redlock

import (
	"context"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// The lead of a single key changes between a woken waiter's attempt and
// the lead's notice: the attempt asked the lead, which had not yet run
// the release and refused; then a command of the waiter's client to that
// master failed (the master stalled a moment), so that leadFor passes it
// over for leadQuiet. Its notice of the release, coming last, is then
// judged with another master as the key's lead: neither the first, nor
// the lead's, nor the quorum's, it wakes nobody, and the waiter sleeps
// although every master is free.
func TestWake_leadPassedOverBeforeItsNotice(t *testing.T) {
	redistest.SkipShort(t)
	for _, p := range leadPaths {
		t.Run(p.name, func(t *testing.T) {
			key := "lead:quiet:" + p.name
			a := awaitHeld(t, p.pipelined, key)
			s, l := a.servers, a.held
			lead := a.w.leadFor(key)
			before := setCalls(t, s[lead])
			for i := range s {
				if i != lead {
					a27Release(t, s[i], key, l.Token())
				}
			}
			// The first notice's and the quorum's attempts ask the lead,
			// which refuses.
			if !redistest.WaitFor(ctx5s(t), func() bool { return setCalls(t, s[lead]) > before && a.fake.Pending() >= 1 }) {
				t.Fatal("the woken waiter did not ask the lead")
			}
			time.Sleep(100 * time.Millisecond)
			// A command of the waiter's client to the lead fails: the
			// master stalls while the client takes another lock.
			paused(t, s[lead])
			other, err := a.w.TryAcquire(context.Background(), key+":other", WithTTL(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			// On the pipelined path the command fails as its connection
			// breaks, at the stall bound (10 per-master timeouts: 5 s for
			// awaitHeld's waiter); the lead is then passed over for 20
			// timeouts (10 s), long enough for what follows.
			pctx, pcancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer pcancel()
			passed := redistest.WaitFor(pctx, func() bool { return a.w.leadFor(key) != lead })
			if err := s[lead].Resume(); err != nil {
				t.Fatal(err)
			}
			if !passed {
				t.Fatalf("the lead %d did not fail the command", lead)
			}
			_ = other.Release(context.Background())
			// The lead runs the release last.
			a27Release(t, s[lead], key, l.Token())
			select {
			case err := <-a.got:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the waiter sleeps: the lead that refused its attempt was passed over before its notice came, which woke nobody")
			}
		})
	}
}

package redlock_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
)

// A rollback that meets a lock of another kind (WRONGTYPE) proves nothing
// about the acquisition it undoes when that acquisition went unanswered:
// it may still wait in the master's buffers, and run once the other
// kind's key is gone. A reentrant owner's acquisition is held in a proxy
// while the master's key is a plain lock's string; the attempt fails, its
// rollback runs and meets the string; the string goes and the held
// acquisition runs, granting the owner a hold nobody asked for. The
// rollback must be confirmed as one that found nothing is (or retried),
// so that this hold goes; taken for a final refusal, it stayed until its
// TTL. The proxy lets a second rollback run only after the held
// acquisition ran, so the order does not depend on timing.
func TestWrongKind_rollbackThatMeetsAnotherKindIsConfirmed(t *testing.T) {
	redistest.SkipShort(t)
	forEachPath(t, func(t *testing.T, path connPath) {
		s := redistest.StartOne(t)
		key := "wrongkind:late:" + path.name
		if _, err := s.Do("SET", key, "plain-token", "PX", 60000); err != nil {
			t.Fatal(err)
		}
		var acquires, rollbacks atomic.Int32
		rolledBack, acquired := make(chan struct{}), make(chan struct{})
		var rolledOnce, acquiredOnce sync.Once
		hook := func(c *hostile.Conn, cmd []string) hostile.Verdict {
			op, ok := scriptOfCommand(cmd, key)
			if !ok {
				return hostile.Forward
			}
			switch {
			case op == "acquire" && acquires.Add(1) == 1:
				// Held until the rollback ran; then the string goes
				// and the acquisition runs, late.
				select {
				case <-rolledBack:
				case <-c.Quit():
					return hostile.HangUp
				}
				if _, err := s.Do("DEL", key); err != nil {
					t.Error(err)
				}
				before := scriptsRun(s)
				afterScriptRuns(s, before, c.Quit(), func() { acquiredOnce.Do(func() { close(acquired) }) })
			case op == "release" && len(cmd) > 7 && cmd[6] == "0" && cmd[7] == "":
				if rollbacks.Add(1) == 1 {
					before := scriptsRun(s)
					afterScriptRuns(s, before, c.Quit(), func() { rolledOnce.Do(func() { close(rolledBack) }) })
					break
				}
				// A confirmation or retry: after the late acquisition.
				select {
				case <-acquired:
				case <-c.Quit():
					return hostile.HangUp
				}
			}
			return hostile.Forward
		}
		failedFirstHold(t, hostile.NewProxy(t, s.Addr(), hook).Addr(), key, "owner-late", path)
		select {
		case <-acquired:
		case <-time.After(10 * time.Second):
			t.Fatalf("the held acquisition never ran (rollbacks seen: %d)", rollbacks.Load())
		}
		if !s.WaitAbsent(key, 5*time.Second) {
			t.Fatalf("the late acquisition's hold stays (rollbacks sent: %d): a rollback that met another kind was taken for final",
				rollbacks.Load())
		}
	})
}

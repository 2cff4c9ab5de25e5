package goredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// A master whose copy of the key is a lock of another kind (a plain
// lock's string where a reentrant lock's hash is expected) refuses the
// acquisition, by its kind, and is sent nothing more for the attempt: no
// rollback, which the go-redis client's hook would count. N=1, 3, 5: the
// masters of another kind and one more holder of the same kind are just
// enough refusals for the last of them to decide, so that every one is
// awaited; the rest grant and are rolled back.
func TestWrongKind_isARefusalWithNoRollback(t *testing.T) {
	for _, n := range []int{1, 3, 5} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			ms := startMasters(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			key := "wrongkind"
			wrong := n - (n/2 + 1) + 1
			if n > 1 {
				wrong--
			}
			for i := 0; i < wrong; i++ {
				if err := ms.admin[i].Set(ctx, key, "plain-token", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			if n > 1 {
				if err := ms.admin[wrong].HSet(ctx, key, "owner-b", 1).Err(); err != nil {
					t.Fatal(err)
				}
				if err := ms.admin[wrong].PExpire(ctx, key, time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
			}
			c := ms.lockClient(t)
			// The masters identified and the scripts loaded first: what
			// follows is the attempt's alone.
			if _, err := c.Inspect(ctx, "warm-up"); err != nil {
				t.Fatal(err)
			}
			before := make([]int, n)
			for i := range before {
				before[i] = ms.hooks[i].get("evalsha") + ms.hooks[i].get("eval")
			}
			r, err := c.NewReentrant(key, "owner-a")
			if err != nil {
				t.Fatal(err)
			}
			err = r.TryAcquire(ctx)
			var qe *redlock.QuorumError
			if !errors.Is(err, redlock.ErrNotAcquired) || !errors.Is(err, redlock.ErrWrongKind) || !errors.As(err, &qe) {
				t.Fatalf("err = %v, want a QuorumError matching ErrNotAcquired and ErrWrongKind", err)
			}
			if !strings.Contains(err.Error(), "not by a reentrant lock") {
				t.Errorf("the error does not name the kind: %v", err)
			}
			for i := 0; i < wrong; i++ {
				if !slices.Contains(qe.Refused, i) {
					t.Errorf("master %d (another kind) is not among the refusals %v", i, qe.Refused)
				}
			}
			if qe.Failed != nil || qe.WrongKind == nil || len(qe.WrongKind.Errors) != wrong {
				t.Errorf("Failed = %v, WrongKind = %v: want no failure and %d of another kind", qe.Failed, qe.WrongKind, wrong)
			}
			// Close waits for the commands in flight: the rollbacks of the
			// grants, and any sent to the masters of another kind.
			c.Close()
			for i := 0; i < n; i++ {
				got := ms.hooks[i].get("evalsha") + ms.hooks[i].get("eval") - before[i]
				want := 1 // the acquisition
				if i > wrong {
					want = 2 // and the rollback of its grant
				}
				if got != want {
					t.Errorf("master %d: %d scripts sent for the attempt, want %d", i, got, want)
				}
			}
			for i := 0; i < wrong; i++ {
				if v, err := ms.admin[i].Get(ctx, key).Result(); err != nil || v != "plain-token" {
					t.Errorf("master %d: the plain lock's string is %q, %v", i, v, err)
				}
			}
		})
	}
}

package redlock_test

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

// holderAll is inspectAll with InspectHolder.
func holderAll(t *testing.T, c *redlock.Client, key string) []layout.State {
	t.Helper()
	return statesOf(t, c, key, c.InspectHolder)
}

// WithHolderFence records a fenced lock's token beside its holder, and
// InspectHolder reads the holder, its TTL, that token and its metadata
// together; a lock without the option records none, and a key that holds
// no plain lock reads as free.
func TestInspectHolder_readsTheHolderFenceWithTheHolder(t *testing.T) {
	forEachPath(t, func(t *testing.T, path connPath) {
		rs := startReal(t, 1)
		c := rs.client(t, path)
		ctx := ctxT(t)
		for _, st := range holderAll(t, c, "free") {
			if st.Kind != layout.KindFree || len(st.Holders) != 0 {
				t.Fatalf("free key: %+v", st)
			}
		}
		for _, meta := range []string{"me", ""} {
			key := "rec" + meta
			l, err := c.TryAcquire(ctx, key, redlock.WithTTL(time.Minute), redlock.WithFencing(), redlock.WithHolderFence(), redlock.WithMetadata(meta))
			if err != nil {
				t.Fatal(err)
			}
			st := holderAll(t, c, key)[0]
			if st.Kind != layout.KindLock || len(st.Holders) != 1 {
				t.Fatalf("held key: %+v", st)
			}
			if h := st.Holders[0]; h.Token == "" || h.Fence != l.Fence() || h.Meta != meta || h.TTL <= 0 || h.TTL > time.Minute || st.TTL != h.TTL {
				t.Fatalf("holder %+v, lock's fence %d; want the fence and %q", h, l.Fence(), meta)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if st := holderAll(t, c, key)[0]; st.Kind != layout.KindFree {
				t.Fatalf("released key: %+v", st)
			}
		}
		plain, err := c.TryAcquire(ctx, "plain", redlock.WithFencing(), redlock.WithMetadata("m"))
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Release(ctx)
		if st := holderAll(t, c, "plain")[0]; len(st.Holders) != 1 || st.Holders[0].Fence != 0 || st.Holders[0].Meta != "m" {
			t.Fatalf("a lock without WithHolderFence: %+v", st)
		}
		rw, err := c.TryAcquireRead(ctx, "rw")
		if err != nil {
			t.Fatal(err)
		}
		defer rw.Release(ctx)
		if st := holderAll(t, c, "rw")[0]; st.Kind != layout.KindFree {
			t.Fatalf("a read lock's key: %+v", st)
		}
	})
}

// WithHolderFence records a fencing token: without WithFencing, and on
// the kinds that have none, it is refused.
func TestWithHolderFence_needsFencing(t *testing.T) {
	rs := startReal(t, 1)
	c := rs.client(t, pipelinedPath)
	ctx := ctxT(t)
	if _, err := c.TryAcquire(ctx, "k", redlock.WithHolderFence()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("without WithFencing: %v", err)
	}
	if _, err := c.TryAcquireWrite(ctx, "k", redlock.WithFencing(), redlock.WithHolderFence()); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("a write lock: %v", err)
	}
	if _, err := c.InspectHolder(ctx, ""); !errors.Is(err, redlock.ErrInvalid) {
		t.Errorf("empty key: %v", err)
	}
}

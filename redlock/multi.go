package redlock

import (
	"context"
	"fmt"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Multi-key locks: one script sets every key or none on each master
// (internal/scripts/multi.lua).

// AcquireMulti takes keys all at once: on each master every key is set or
// none is, so clients locking overlapping sets never deadlock, and the
// lock is held with a quorum of masters that set every key. With
// WithClusterSlots the keys must share a hash slot (a common hash tag such
// as {order:7}). Lock.Keys returns them, Lock.Key the first. It waits like
// Acquire, until it gets every key or ctx ends, or for the WithWait bound;
// TryAcquireMulti tries once. On failure the error matches ErrNotAcquired.
func (c *Client) AcquireMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquireMulti(ctx, keys, opts, false)
}

// TryAcquireMulti makes exactly one attempt to take keys all at once (see
// AcquireMulti). On failure the error matches ErrNotAcquired.
func (c *Client) TryAcquireMulti(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.acquireMulti(ctx, keys, opts, true)
}

func (c *Client) acquireMulti(ctx context.Context, keys []string, opts []LockOption, once bool) (*Lock, error) {
	called := c.callStart()
	if err := c.valid(); err != nil {
		return nil, err
	}
	if err := c.checkMultiKeys(keys); err != nil {
		return nil, err
	}
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("multi-key", keys[0], opts)
	if err != nil {
		return nil, err
	}
	if once {
		lc.once()
	}
	return c.acquire(ctx, called, keys[0], &lc, &multiKind{ks: append([]string(nil), keys...)})
}

func (c *Client) checkMultiKeys(ks []string) error {
	if len(ks) == 0 {
		return fmt.Errorf("%w: no keys", ErrInvalid)
	}
	seen := make(map[string]bool, len(ks))
	slot := keys.Slot(ks[0])
	for i, k := range ks {
		if k == "" {
			return fmt.Errorf("%w: key %d is empty", ErrInvalid, i)
		}
		if seen[k] {
			return fmt.Errorf("%w: key %q appears twice", ErrInvalid, k)
		}
		seen[k] = true
		if c.clusterSlots {
			if b := keys.Slot(k); b != slot {
				return fmt.Errorf("%w: keys %q (hash slot %d) and %q (hash slot %d) are in different Redis Cluster slots, "+
					"and one script cannot touch both: give them a common hash tag, such as {order:7}:items and {order:7}:payment",
					ErrInvalid, ks[0], slot, k, b)
			}
		}
	}
	return nil
}

// multiKind is a lock on several keys at once (AcquireMulti); its script
// takes a variable number of keys, all of them.
type multiKind struct {
	baseKind
	ks []string
}

var _ kind = (*multiKind)(nil)

func (m *multiKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	tok := r.token
	for _, k := range m.ks {
		dst = append(dst, k)
	}
	switch op {
	case opAcquire:
		return scripts.Multi, "", append(dst, "acquire", tok, r.ttlMS)
	case opExtend:
		return scripts.Multi, "", append(dst, "extend", tok, r.ttlMS)
	case opRelease:
		return scripts.Multi, "", append(dst, "release", tok, wakePrefix)
	default: // opRollback
		return scripts.Multi, "", append(dst, "release", tok, "")
	}
}

func (m *multiKind) keys(string) []string { return m.ks }

package redlock

import (
	"context"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Read-write locks: one Redis hash per key (internal/scripts/rw.lua), an
// entry per holder with its own expiry, and a waiting writer's intent that
// turns new readers away for a bounded time.

// AcquireRead takes a read hold on key: any number of readers may hold it
// at once, but no writer, and while a writer waits new readers wait too.
// Each reader's entry has its own expiry and only that reader can extend
// or release it (docs/kinds.md). The returned Lock behaves like any other;
// use the key only for read-write locks. It waits like Acquire, until it
// gets the hold or ctx ends, or for the WithWait bound; TryAcquireRead
// tries once. On failure the error matches ErrNotAcquired.
func (c *Client) AcquireRead(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquireRW(ctx, key, opts, false, false)
}

// TryAcquireRead makes exactly one attempt to take a read hold on key
// (see AcquireRead), as sync.RWMutex.TryRLock does. On failure the error
// matches ErrNotAcquired; it matches ErrWriterWaiting too when a waiting
// writer's intent turned it away.
func (c *Client) TryAcquireRead(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquireRW(ctx, key, opts, false, true)
}

// AcquireWrite takes the write hold on key: no reader and no other writer
// holds it meanwhile. While readers keep it, the writer leaves an intent
// that holds new readers back; a writer that gives up withdraws it. It
// waits like AcquireRead; TryAcquireWrite tries once.
func (c *Client) AcquireWrite(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquireRW(ctx, key, opts, true, false)
}

// TryAcquireWrite makes exactly one attempt to take the write hold on key
// (see AcquireWrite), as sync.RWMutex.TryLock does. On failure the error
// matches ErrNotAcquired, and the intent the attempt left for readers to
// see is withdrawn again at once.
func (c *Client) TryAcquireWrite(ctx context.Context, key string, opts ...LockOption) (*Lock, error) {
	return c.acquireRW(ctx, key, opts, true, true)
}

func (c *Client) acquireRW(ctx context.Context, key string, opts []LockOption, write, once bool) (*Lock, error) {
	called := c.callStart()
	if err := c.check(ctx); err != nil {
		return nil, err
	}
	lc, err := c.kindConfig("read-write", key, opts)
	if err != nil {
		return nil, err
	}
	if once {
		lc.once()
	}
	if !write {
		return c.acquire(ctx, called, key, &lc, readKind{})
	}
	return c.acquire(ctx, called, key, &lc, &writeKind{writer: c.jit.UUID(), intentMS: c.entryTTL(&lc).Milliseconds()})
}

// readKind is a read hold (AcquireRead): shared with other readers.
type readKind struct{ baseKind }

var _ kind = readKind{}

func (readKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, tok := r.key, r.token
	switch op {
	case opAcquire:
		return scripts.RW, "", append(dst, key, "read", tok, r.ttlMS, int64(0), "")
	case opExtend:
		return scripts.RW, "", append(dst, key, "extend-read", tok, r.ttlMS)
	case opRelease:
		return scripts.RW, "", append(dst, key, "release-read", tok, wakeChannel(key))
	default: // opRollback
		return scripts.RW, "", append(dst, key, "release-read", tok, "")
	}
}

func (readKind) shared() bool { return true }
func (readKind) renews() bool { return true }

// writeKind is the write hold (AcquireWrite). A writer that readers turn
// away leaves an intent, stable across its attempts (writer), that holds
// new readers back; one that gives up withdraws it (opLeave).
type writeKind struct {
	baseKind
	writer   string // the waiter's id, stable across its attempts
	intentMS int64  // how long a waiting writer's intent lasts
}

var _ kind = (*writeKind)(nil)

func (w *writeKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, tok := r.key, r.token
	switch op {
	case opAcquire:
		return scripts.RW, "", append(dst, key, "write", tok, r.ttlMS, w.intentMS, w.writer)
	case opExtend:
		return scripts.RW, "", append(dst, key, "extend-write", tok, r.ttlMS)
	case opRelease:
		// With the writer's id: its intent, left on a master that did not
		// grant it the lock, goes too (rw.lua).
		return scripts.RW, "", append(dst, key, "release-write", tok, wakeChannel(key), w.writer)
	case opRollback:
		return scripts.RW, "", append(dst, key, "release-write", tok, "")
	default: // opLeave, announced: readers the intent held back may enter
		return scripts.RW, "", append(dst, key, "leave", w.writer, wakeChannel(key))
	}
}

func (w *writeKind) holder() string { return "w:" + w.writer }
func (w *writeKind) leaves() bool   { return true }
func (w *writeKind) renews() bool   { return true }

package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/waker"
)

// BackoffFloor is the shortest delay bound WithBackoff accepts.
const BackoffFloor = minBackoff

// ErrParserPanic is matched by the error of a master whose reply made the
// reply parser panic.
var ErrParserPanic = errPanic

// WithClock replaces the real clock (the option is unexported: a test hook).
var WithClock = withClock

// Backoff exposes the retry delay for tests.
func Backoff(floor, ceiling time.Duration, attempt int) time.Duration {
	return jitter.Backoff(nil, floor, ceiling, attempt)
}

// Sizes reports the client's per-key and per-connection bookkeeping, for
// tests that check it stays bounded: in-flight releases and leaves and
// chained rounds tracked, keys
// with waiters (not those lingering), live pipelined connections.
func (c *Client) Sizes() (releasing, waitedKeys, muxConns int) {
	c.mu.Lock()
	releasing = len(c.releasing) + len(c.leaving) + len(c.chains)
	c.mu.Unlock()
	for _, m := range c.masters {
		if mx, ok := m.t.(redigot.MuxState); ok {
			muxConns += mx.LiveConns()
		}
	}
	waitedKeys, _ = c.waker.Counts()
	return releasing, waitedKeys, muxConns
}

// Finishing reports how many retries of releases and rollbacks that a
// master missed are pending.
func Finishing(c *Client) int {
	return c.fin.Outstanding()
}

// ReleaseWait is how long c's releases wait for a master.
func ReleaseWait(c *Client) time.Duration { return c.bound.ReleaseWait() }

// SetFinishBackoff sets the backoff between such retries.
func SetFinishBackoff(c *Client, min, max time.Duration) {
	c.fin.SetBackoff(min, max)
}

// SetFinishLimit sets how many such retries may be pending.
func SetFinishLimit(c *Client, n int) {
	c.fin.SetLimit(n)
}

// FinishOwners reports how many reentrant owners' newest rounds the
// finisher keeps.
func FinishOwners(c *Client) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fin.Owners()
}

// SetSettled sets a hook that runs as a waiter of c begins a pause with
// no re-check pending: its latest attempt is over, and its backoff timer
// is set. Set it while no waiter of c runs.
func SetSettled(c *Client, f func()) { c.waker.SetSettled(f) }

// SetBeforeWait sets a hook that runs in Acquire after an attempt failed
// and before the waiter registers for release notices (the window a
// release must not be lost in).
func SetBeforeWait(c *Client, f func()) { c.beforeWait = f }

// Lingering reports how many keys without waiters stay subscribed.
func Lingering(c *Client) int {
	_, lingering := c.waker.Counts()
	return lingering
}

// MaxLinger is how many keys may linger per client.
const MaxLinger = waker.MaxLinger

// IdentityProbed reports when the identity probe of master i last
// started (zero: never).
func IdentityProbed(c *Client, i int) time.Time {
	return c.ident.Tried(i)
}

// LeadFor returns the master a woken waiter of key asks first (lead.go),
// or -1.
func LeadFor(c *Client, key string) int { return c.leadFor(key) }

// Identify starts c's run_id probe and waits for it to end: a test on
// fake masters (which answer INFO at once) whose round must count every
// grant from its start, not wait on the probe beside it.
func Identify(c *Client) error {
	if err := c.identify(); err != nil {
		return err
	}
	return c.identified(context.Background())
}

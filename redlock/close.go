package redlock

import (
	"context"
	"fmt"
	"time"
)

// Close stops new work and ends all the client runs: the commands in
// flight get at most one per-master timeout to be answered, then what is
// left fails with ErrClosed; waiting Acquire calls return ErrClosed,
// auto-extended locks count as lost (ErrClosed), Done is closed (package
// election's Observe loops end on it), the pools NewFromAddrs made are
// closed, and Close waits for every goroutine the client started. Locks
// not released, and retries of releases a master missed, are dropped:
// their keys expire at their TTL. Close is idempotent; on a Client New did
// not make it returns ErrInvalid. Its bounds on each path: docs/design.md, "Closing a client".
func (c *Client) Close() error {
	if err := c.valid(); err != nil {
		return err
	}
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		c.end()
	}
	c.mu.Unlock()
	c.waker.Close()
	idle := make(chan struct{})
	go func() {
		c.workers.Wait()
		close(idle)
	}()
	within(idle, c.timeout)
	for _, m := range c.masters {
		m.t.Close()
	}
	// A transport's Close completes what it still held. One that breaks
	// that contract gets one more per-master timeout; then the client
	// completes what is still unanswered itself (a late completion from
	// the transport is ignored).
	if !within(idle, c.timeout) {
		c.abandon()
		<-idle
	}
	if c.closeMade != nil {
		c.closeMade()
	}
	c.stalls.Stop()
	return nil
}

// Done returns a channel that is closed when Close is called, before
// Close waits for the commands in flight: from then on the client starts
// nothing, and every call that would talk to the masters fails with an
// error matching ErrClosed. Like context.Context's Done, it lets what
// lives as long as the client stop with it (package election's Observe ends on it).
// Successive calls return the same channel; on a Client New did not make,
// which can never be closed, it returns nil.
func (c *Client) Done() <-chan struct{} {
	if c == nil {
		return nil
	}
	return c.closing
}

// closedErr returns an error matching ErrClosed, naming what and key,
// once Close was called; else nil.
func (c *Client) closedErr(what, key string) error {
	select {
	case <-c.closing:
		return fmt.Errorf("%w: %s %q", ErrClosed, what, key)
	default:
		return nil
	}
}

// untilClosed returns a context that ends with ctx, or when Close is
// called (its cause then ErrClosed): for the reads that Close cuts short.
func (c *Client) untilClosed(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(c.life, func() { cancel(ErrClosed) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// within waits for ch to close, at most d; it reports whether it did.
func within(ch <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// errAbandoned fails what Close completes itself: a command a transport
// did not complete one per-master timeout after its Close, and any
// command sent after that (Client.abandon).
var errAbandoned = fmt.Errorf("%w: the transport did not answer by its Close and one per-master timeout", ErrClosed)

// abandon completes, with errAbandoned, every command the transports
// still hold unanswered — a transport that breaks its contract by not
// completing even at Close — and makes every later send fail unsent, so
// that Close is bounded. A late completion from the transport is then
// ignored (complete-once). Completing a leg may end it and so let a leg
// chained after it go on: that one then fails unsent.
func (c *Client) abandon() {
	c.abandoned.Store(true)
	c.mu.Lock()
	var rounds []*round
	for r := c.live; r != nil; r = r.liveNext {
		rounds = append(rounds, r)
	}
	c.mu.Unlock()
	var pending []completer
	for _, r := range rounds {
		r.mu.Lock()
		for i := range r.legs {
			if l := &r.legs[i]; l.state.SentOnce() && !l.completed.Load() {
				pending = append(pending, l)
			}
			if r.rbq != nil {
				if q := r.rbq[i]; q != nil && !q.completed.Load() {
					pending = append(pending, q)
				}
			}
		}
		r.mu.Unlock()
	}
	retries := c.fin.Unanswered()
	for _, p := range pending {
		p.complete(nil, errAbandoned, SendInfo{Sent: true})
	}
	for _, q := range retries {
		q.Complete(nil, errAbandoned, SendInfo{Sent: true})
	}
}

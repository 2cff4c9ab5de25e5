package redlock

import (
	"context"
	"errors"
	"fmt"
)

// Do acquires the lock on key (as Acquire does, with opts), runs fn while
// holding it, and releases it when fn returns or panics. fn's context
// carries the lock (LockFromContext) and is cancelled, with the loss as its
// cause, as soon as the lock is lost: fn must stop writing then. The lock
// is extended automatically (WithAutoExtend; WithMaxHold caps a stuck fn).
// Do returns the acquisition error, or fn's error joined with the loss
// when the lock was lost while fn ran. Nothing of Do outlives it.
func (c *Client) Do(ctx context.Context, key string, fn func(ctx context.Context) error, opts ...LockOption) error {
	if err := c.check(ctx); err != nil {
		return err
	}
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	opts = append([]LockOption{WithAutoExtend(0)}, opts...)
	l, err := c.Acquire(ctx, key, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(ctx, lockKey{}, l))
	l.mu.Lock()
	l.onLost = cancel
	lostAlready := l.lostErr
	l.mu.Unlock()
	if lostAlready != nil {
		cancel(lostAlready)
	}
	defer func() {
		// Also on panic: free the lock for the next holder.
		relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 2*c.timeout)
		_ = l.Release(relCtx)
		relCancel()
		cancel(nil)
	}()
	fnErr := fn(fnCtx)
	return errors.Join(fnErr, l.Err())
}

type lockKey struct{}

// LockFromContext returns the lock that Client.Do holds while it runs fn,
// from fn's context (or one derived from it).
func LockFromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}

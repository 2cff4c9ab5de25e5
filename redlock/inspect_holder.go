package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/inspect"
	"github.com/quorumlock/quorumlock/layout"
)

// InspectHolder reads who holds a plain lock's key on every master, each
// master in one script step (so of one moment of it): the holder's token,
// the key's TTL, the fencing token recorded beside the holder
// (WithHolderFence) and the holder's metadata. Inspect reads more, in
// several round trips, and cannot pair them so. Each master's State has
// only Kind, TTL and Holders set: KindLock with the one holder, or
// KindFree when the key holds no plain lock's token (it is missing, of
// another type, or holds a token longer than 256 bytes; the library's are
// 36). Package election finds its leader with it. Everything else is as
// Inspect: all masters at once, each within the per-master timeout and
// ctx; a master's failure is in its MasterState; its own error is
// ErrInvalid or ErrClosed.
func (c *Client) InspectHolder(ctx context.Context, key string) (Inspection, error) {
	return c.inspectEach(ctx, key, c.inspectHolder)
}

// inspectHolder reads one master in one round trip (internal/inspect's
// ReadHolder), within the per-master timeout and ctx.
func (c *Client) inspectHolder(ctx context.Context, m *master, key string) MasterState {
	return c.inspectOn(m, func(in Inspector) (layout.State, time.Duration, error) {
		return inspect.ReadHolder(ctx, in, key, c.timeout, maxFence)
	})
}

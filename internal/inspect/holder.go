package inspect

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/resp"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
)

// ReadHolder reads who holds a plain lock's key on the master behind in,
// in one round trip (scripts.LeaderRead, one script step), within timeout
// and ctx. The state has only Kind, TTL and Holders set: KindLock with
// the one holder (its token, TTL, fencing token and metadata), or
// KindFree when the key holds no plain lock's token. A fencing token must
// be below maxFence (the core's bound). It returns the state, how long
// the round trip took, and ctx's, the transport's or a malformed reply's
// error (layout.ErrMalformed), with the zero State.
func ReadHolder(ctx context.Context, in transport.Inspector, key string, timeout time.Duration, maxFence uint64) (layout.State, time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return layout.State{}, 0, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	start := time.Now()
	replies, err := in.Inspect(rctx, []layout.Command{{Name: "EVAL",
		Args: []any{scripts.LeaderRead.Source(), 2, key, layout.MetaKey(key), maxToken, layout.MaxMeta}}})
	rtt := time.Since(start)
	if err == nil && len(replies) != 1 {
		err = fmt.Errorf("holder read: %d replies to 1 command", len(replies))
	}
	if err != nil {
		return layout.State{}, rtt, err
	}
	st, err := parseHolderRead(replies[0], maxFence)
	return st, rtt, err
}

// maxToken bounds the token a holder read sends back: the library's
// tokens are 36 bytes.
const maxToken = 256

// parseHolderRead checks a holder read's reply, untrusted: {} or {token,
// PTTL, fencing token or nil, metadata or nil} within the bounds the
// script was given, and a fencing token below maxFence.
func parseHolderRead(v any, maxFence uint64) (layout.State, error) {
	free := layout.State{Kind: layout.KindFree}
	if err, ok := v.(error); ok {
		return layout.State{}, fmt.Errorf("holder read: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 0 && len(a) != 4 {
		return layout.State{}, fmt.Errorf("%w: holder read replied %s", layout.ErrMalformed, resp.Shape(v))
	}
	if len(a) == 0 {
		return free, nil
	}
	bad := func(what string) (layout.State, error) {
		return layout.State{}, fmt.Errorf("%w: holder read: bad %s", layout.ErrMalformed, what)
	}
	tok, ok := resp.Bulk(a[0])
	if !ok || tok == "" || len(tok) > maxToken {
		return bad("token")
	}
	pttl, ok := a[1].(int64)
	if !ok || pttl < -2 {
		return bad("TTL")
	}
	if pttl == -2 { // gone since it was read: cannot happen in one script step
		return free, nil
	}
	h := layout.Holder{Mode: layout.ModeExclusive, Token: tok, TTL: layout.NoExpiry}
	if pttl >= 0 {
		h.TTL = time.Duration(pttl) * time.Millisecond
	}
	if a[2] != nil {
		t, ok := resp.Bulk(a[2])
		if !ok {
			return bad("fencing token")
		}
		n, err := strconv.ParseUint(t, 10, 64)
		if err != nil || n == 0 || n >= maxFence || t[0] == '0' {
			return bad("fencing token")
		}
		h.Fence = n
	}
	if a[3] != nil {
		m, ok := resp.Bulk(a[3])
		if !ok || len(m) > layout.MaxMeta {
			return bad("metadata")
		}
		h.Meta = m
	}
	return layout.State{Kind: layout.KindLock, TTL: h.TTL, Holders: []layout.Holder{h}}, nil
}

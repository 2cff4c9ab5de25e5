package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
)

// Inspection (transport.Inspector): Client.Inspect's read-only commands run
// as one go-redis pipeline on the client (its hooks see them), not on the
// lane, and their replies are handed back in the RESP2 shapes
// layout.Reader reads. Over RESP3 (go-redis's default) a hash comes as a
// map, a sorted set's WITHSCORES as pairs with a double: both are turned
// back into RESP2's flat arrays of strings. Anything else a read command
// cannot answer (a boolean, a big number, a deeper nesting) fails the
// round trip. layout.Reader checks every reply's shape and bounds again.

var _ transport.Inspector = (*Transport)(nil)

// Inspect runs cmds on the master as one pipeline and returns one reply
// per command, in order: nil, int64, a string (status and bulk strings
// alike, which layout.Reader accepts), []any, or an error reply as an
// error value in its place (transport.Inspector). It returns when ctx ends
// even if go-redis does not honour ctx (without
// Options.ContextTimeoutEnabled); the abandoned round trip ends at the
// client's ReadTimeout, and Close waits for it.
func (t *Transport) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	t.wg.Add(1)
	t.mu.Unlock()
	type result struct {
		replies []any
		err     error
	}
	done := make(chan result, 1)
	go func() {
		defer t.wg.Done()
		v, err := t.inspect(ctx, cmds)
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		return r.replies, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// inspect runs cmds as one pipeline and converts the replies.
func (t *Transport) inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	rcs := make([]*redis.Cmd, len(cmds))
	_, _ = t.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range cmds {
			args := make([]any, 0, 1+len(c.Args))
			args = append(append(args, c.Name), c.Args...)
			rcs[i] = redis.NewCmd(ctx, args...)
			_ = p.Process(ctx, rcs[i])
		}
		return nil
	})
	replies := make([]any, len(cmds))
	for i, rc := range rcs {
		v, err := rc.Result()
		switch {
		case errors.Is(err, redis.Nil):
			v = nil
		case err != nil:
			var re redis.Error
			if !errors.As(err, &re) {
				return nil, t.RedactError(err) // the round trip failed
			}
			replies[i] = transport.ReplyError(t.RedactError(err).Error())
			continue
		}
		r, err := resp2(cmds[i], v)
		if err != nil {
			return nil, &desyncError{err: fmt.Errorf("%s: %w", cmds[i].Name, err)}
		}
		replies[i] = r
	}
	return replies, nil
}

// resp2 returns cmd's reply v, as go-redis decoded it, in RESP2's shape:
// a map (a hash over RESP3) as a flat array of its keys and values, a
// sorted set's members WITHSCORES as a flat array of member, score, and a
// double as its decimal string.
func resp2(cmd layout.Command, v any) (any, error) {
	switch v := v.(type) {
	case nil, int64, string:
		return v, nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case map[any]any:
		if len(v) > layout.MaxEntries {
			return nil, fmt.Errorf("map reply of %d entries", len(v))
		}
		out := make([]any, 0, 2*len(v))
		for k, e := range v {
			ks, ok1 := k.(string)
			es, err := resp2(cmd, e)
			if _, ok2 := es.(string); !ok1 || !ok2 || err != nil {
				return nil, errors.New("map reply with an entry that is not two strings")
			}
			out = append(out, ks, es)
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(v))
		for _, e := range v {
			if pair, ok := e.([]any); ok && adapter.WithScores(cmd.Args) {
				// RESP3: [member, score] per element.
				if len(pair) != 2 {
					return nil, fmt.Errorf("WITHSCORES element of %d parts", len(pair))
				}
				for _, x := range pair {
					s, err := resp2(cmd, x)
					if _, ok := s.(string); !ok || err != nil {
						return nil, errors.New("WITHSCORES element that is not a member and a score")
					}
					out = append(out, s)
				}
				continue
			}
			if nested, ok := e.([]any); ok {
				// HSCAN: the cursor and an array of strings.
				inner := make([]any, len(nested))
				for j, x := range nested {
					s, err := resp2(cmd, x)
					if err != nil {
						return nil, err
					}
					if _, ok := s.([]any); ok {
						return nil, errors.New("array reply nested too deep")
					}
					inner[j] = s
				}
				out = append(out, inner)
				continue
			}
			s, err := resp2(cmd, e)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("reply of type %s", typeName(v))
	}
}

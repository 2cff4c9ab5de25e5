package rueidis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/layout"
)

// Inspection (transport.Inspector): Client.Inspect's read-only commands run
// as one DoMulti on the client (its hooks see them), not on the lane,
// and their replies are handed back in the RESP2 shapes layout.Reader
// reads. Over RESP3 (rueidis speaks it to every server that does) a hash
// comes as a map, a sorted set's WITHSCORES as pairs with a double: both
// are turned back into RESP2's flat arrays of strings. Anything else a
// read command cannot answer (a boolean, a deeper nesting) fails the
// round trip. layout.Reader checks every reply's shape and bounds again.

// Inspect runs cmds on the master as one pipeline and returns one reply
// per command, in order: nil, int64, a string (status and bulk strings
// alike, which layout.Reader accepts), []any, or an error reply as a
// transport.ReplyError in its place (transport.Inspector). rueidis bounds it
// by ctx.
func (t *Transport) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	t.wg.Add(1)
	t.mu.Unlock()
	defer t.wg.Done()
	if len(cmds) == 0 {
		return nil, nil
	}
	cs := make([]lib.Completed, len(cmds))
	for i, c := range cmds {
		head, keys, rest := split(c)
		cs[i] = t.client.B().Arbitrary(head...).Keys(strs(keys)...).Args(strs(rest)...).Build()
	}
	res := t.client.DoMulti(ctx, cs...)
	replies := make([]any, len(cmds))
	for i, rr := range res {
		msg, err := rr.ToMessage()
		switch {
		case lib.IsRedisNil(err):
			continue
		case err != nil:
			re, ok := lib.IsRedisErr(err)
			if !ok {
				return nil, err // the round trip failed
			}
			replies[i] = replyError(&msg, re)
			continue
		}
		v, err := resp2(cmds[i], &msg, 0)
		if err != nil {
			return nil, &desyncError{err: fmt.Errorf("%s: %w", cmds[i].Name, err)}
		}
		replies[i] = v
	}
	return replies, nil
}

// resp2 returns cmd's reply msg in RESP2's shape: a map (a hash over
// RESP3) as a flat array of its keys and values, a sorted set's members
// WITHSCORES as a flat array of member, score, and a double as its
// decimal string. depth is the nesting: an array in an array is read (a
// SCAN's cursor and page, WITHSCORES's pairs), no deeper.
func resp2(cmd layout.Command, msg *lib.RedisMessage, depth int) (any, error) {
	if err := msg.Error(); err != nil {
		if lib.IsRedisNil(err) {
			return nil, nil
		}
		return nil, errors.New("error reply inside an array")
	}
	switch {
	case msg.IsInt64():
		n, _ := msg.ToInt64()
		return n, nil
	case msg.IsString():
		s, _ := msg.ToString()
		return s, nil
	case msg.IsFloat64():
		f, _ := msg.ToFloat64()
		return strconv.FormatFloat(f, 'f', -1, 64), nil
	case msg.IsMap() && depth == 0:
		m, _ := msg.ToMap()
		if len(m) > layout.MaxEntries {
			return nil, fmt.Errorf("map reply of %d entries", len(m))
		}
		out := make([]any, 0, 2*len(m))
		for k, e := range m {
			v, err := resp2(cmd, &e, depth+1)
			if _, ok := v.(string); !ok || err != nil {
				return nil, errors.New("map reply with an entry that is not two strings")
			}
			out = append(out, k, v)
		}
		return out, nil
	case msg.IsArray() && depth < 2:
		a, _ := msg.ToArray()
		if len(a) > 2*layout.MaxEntries+2 {
			return nil, fmt.Errorf("array reply of %d elements", len(a))
		}
		out := make([]any, 0, len(a))
		for _, e := range a {
			v, err := resp2(cmd, &e, depth+1)
			if err != nil {
				return nil, err
			}
			if pair, ok := v.([]any); ok && depth == 0 && adapter.WithScores(cmd.Args) {
				// RESP3: [member, score] per element.
				if len(pair) != 2 {
					return nil, fmt.Errorf("WITHSCORES element of %d parts", len(pair))
				}
				out = append(out, pair...)
				continue
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("reply of type %s", typeName(msg))
}

// split returns an inspection command's name (with EVAL's script and key
// count), its keys and its other arguments: a cluster client routes it by
// its keys. The reading commands take their key first; TIME takes none.
func split(c layout.Command) (head []string, keys, rest []any) {
	switch strings.ToUpper(c.Name) {
	case "TIME", "INFO", "PING":
		return []string{c.Name}, nil, c.Args
	case "EVAL", "EVALSHA":
		if len(c.Args) >= 2 {
			if n, err := strconv.Atoi(fmt.Sprint(c.Args[1])); err == nil && n >= 0 && n <= len(c.Args)-2 {
				head = append(head, c.Name)
				head = append(head, strs(c.Args[:2])...)
				return head, c.Args[2 : 2+n], c.Args[2+n:]
			}
		}
		return []string{c.Name}, nil, c.Args
	}
	if len(c.Args) == 0 {
		return []string{c.Name}, nil, nil
	}
	return []string{c.Name}, c.Args[:1], c.Args[1:]
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/pool"
)

// Keys of the results store (a Redis of its own, not a lock master).
const (
	resultsKey = "examples:schedule:results" // hash: slot → "replica fence"
	seenKey    = "examples:schedule:seen"    // the highest fencing token that committed
	logKey     = "examples:schedule:log"     // list: every commit, "slot replica fence"
	staleKey   = "examples:schedule:stale"   // count of writes refused for a stale token
)

// commitScript commits a slot's result at most once, and only for a
// writer whose fencing token is at least the highest one that committed:
// a replica that was paused past its lock is refused even when the slot's
// result is not there yet, and a result already committed is never
// replaced. It answers 1 committed, 0 stale, 2 done already.
var commitScript = redis.NewScript(4, `
local seen = tonumber(redis.call("GET", KEYS[2]) or "0")
if tonumber(ARGV[2]) < seen then
	redis.call("INCR", KEYS[4])
	return 0
end
redis.call("SET", KEYS[2], ARGV[2])
if redis.call("HSETNX", KEYS[1], ARGV[1], ARGV[3] .. " " .. ARGV[2]) == 0 then
	return 2
end
redis.call("RPUSH", KEYS[3], ARGV[1] .. " " .. ARGV[3] .. " " .. ARGV[2])
return 1
`)

// Commit outcomes.
const (
	stale       = 0
	committed   = 1
	doneAlready = 2
)

// store is where the job's results go.
type store struct{ p *pool.RedisPool }

func newStore(addr string) (*store, error) {
	p, err := pool.New(addr)
	if err != nil {
		return nil, err
	}
	return &store{p: p}, nil
}

func (s *store) Close() error { return s.p.Close() }

func (s *store) conn(ctx context.Context) (redis.Conn, error) {
	return s.p.GetContext(ctx)
}

// done reports whether slot's result was committed.
func (s *store) done(ctx context.Context, slot int64) (bool, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return false, err
	}
	defer c.Close()
	return redis.Bool(redis.DoContext(c, ctx, "HEXISTS", resultsKey, slot))
}

// commit writes slot's result for replica, fenced by token.
func (s *store) commit(ctx context.Context, slot int64, replica string, token uint64) (int, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	return redis.Int(commitScript.DoContext(ctx, c, resultsKey, seenKey, logKey, staleKey,
		slot, strconv.FormatUint(token, 10), replica))
}

// commits returns every commit in order: slot, replica, token.
func (s *store) commits(ctx context.Context) ([][3]string, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	lines, err := redis.Strings(redis.DoContext(c, ctx, "LRANGE", logKey, 0, -1))
	if err != nil {
		return nil, err
	}
	out := make([][3]string, 0, len(lines))
	for _, l := range lines {
		var e [3]string
		if _, err := fmt.Sscan(l, &e[0], &e[1], &e[2]); err != nil {
			return nil, fmt.Errorf("bad log entry %q: %w", l, err)
		}
		out = append(out, e)
	}
	return out, nil
}

// staleRefused returns how many writes were refused for a stale token.
func (s *store) staleRefused(ctx context.Context) (int, error) {
	c, err := s.conn(ctx)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	n, err := redis.Int(redis.DoContext(c, ctx, "GET", staleKey))
	if errors.Is(err, redis.ErrNil) {
		return 0, nil
	}
	return n, err
}

// timeout bounds one call to the store.
const timeout = 2 * time.Second

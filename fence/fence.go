// Package fence checks fencing tokens where the protected data is written.
//
// A lock from redlock with WithFencing carries a token (Lock.Fence) that is
// greater than the token of every earlier holder of the key. A holder that
// was paused past its lock's validity still has its old, smaller token:
// a resource that refuses any write whose token is below the highest it
// has seen turns that stale holder away, even though it believes it still
// holds the lock. That check must happen where the data is written,
// atomically with the write; this package provides it for data kept in
// Redis (Store) and for data kept in the process (Guard).
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
)

// ErrStale is matched (errors.Is) by every refusal of a stale token.
var ErrStale = errors.New("fence: stale fencing token")

// StaleError reports a write refused because its token is lower than the
// highest token the resource has seen.
type StaleError struct {
	Resource string
	Token    uint64 // the token presented
	Highest  uint64 // the highest token seen for the resource
}

func (e *StaleError) Error() string {
	return fmt.Sprintf("fence: stale fencing token %d for %q: a holder with token %d has written", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ErrInvalid is matched by errors about bad arguments.
var ErrInvalid = errors.New("fence: invalid argument")

// SeenKey returns the key in which Store keeps the highest token seen for
// the data key key: in key's Redis Cluster hash slot, so that the check
// and the write are one script.
func SeenKey(key string) string { return layout.FenceSeenKey(key) }

// Store keeps values in one Redis and writes a value only for a token at
// least the highest token seen for its key (equal tokens pass, so one
// holder may write many times). A Store is safe for concurrent use.
type Store struct {
	p pool.Pool
}

// NewStore returns a Store on the Redis behind p.
func NewStore(p pool.Pool) (*Store, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalid)
	}
	return &Store{p: p}, nil
}

// Set stores value at key if token is at least the highest token seen for
// key, and records token as the highest. ttl 0 keeps the value without
// expiry. A refused write returns a *StaleError (matching ErrStale) and
// changes nothing.
func (s *Store) Set(ctx context.Context, key string, token uint64, value []byte, ttl time.Duration) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case token == 0:
		return fmt.Errorf("%w: token 0 (the lock was acquired without WithFencing?)", ErrInvalid)
	case ttl < 0 || (ttl > 0 && ttl < time.Millisecond):
		return fmt.Errorf("%w: TTL must be 0 or at least 1ms, got %v", ErrInvalid, ttl)
	}
	res, err := s.do(ctx, func(c redis.Conn, timeout time.Duration) (any, error) {
		return redigot.Do(scripts.FencedWrite, c, timeout, key, SeenKey(key), strconv.FormatUint(token, 10), value, ttl.Milliseconds())
	})
	if err != nil {
		return fmt.Errorf("fence: set %q: %w", key, err)
	}
	vals, err := redis.Values(res, nil)
	if err != nil || len(vals) != 2 {
		return fmt.Errorf("fence: set %q: unexpected reply %v", key, res)
	}
	ok, err1 := redis.Int(vals[0], nil)
	seen, err2 := redis.Uint64(vals[1], nil)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("fence: set %q: unexpected reply %v", key, res)
	}
	if ok != 1 {
		return &StaleError{Resource: key, Token: token, Highest: seen}
	}
	return nil
}

// Get returns the value at key and whether there is one.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	res, err := s.do(ctx, func(c redis.Conn, timeout time.Duration) (any, error) {
		return redis.DoWithTimeout(c, timeout, "GET", key)
	})
	v, err := redis.Bytes(res, err)
	if errors.Is(err, redis.ErrNil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("fence: get %q: %w", key, err)
	}
	return v, true, nil
}

// Highest returns the highest token seen for key (0 when none).
func (s *Store) Highest(ctx context.Context, key string) (uint64, error) {
	res, err := s.do(ctx, func(c redis.Conn, timeout time.Duration) (any, error) {
		return redis.DoWithTimeout(c, timeout, "GET", SeenKey(key))
	})
	n, err := redis.Uint64(res, err)
	if errors.Is(err, redis.ErrNil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fence: highest %q: %w", key, err)
	}
	return n, nil
}

// do runs f on a connection, bounded by ctx's deadline (the connection's
// own read timeout when ctx has none).
func (s *Store) do(ctx context.Context, f func(c redis.Conn, timeout time.Duration) (any, error)) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := s.p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok {
		if timeout = time.Until(dl); timeout <= 0 {
			return nil, context.DeadlineExceeded
		}
	}
	return f(c, timeout)
}

// Guard is the same check for a resource kept in the process: it runs a
// write only for a token at least the highest seen for that resource, and
// holds the resource's turn while the write runs, so that a stale writer
// cannot slip in between the check and the write. The zero value is ready
// to use; a Guard must not be copied after first use.
type Guard struct {
	mu      sync.Mutex
	highest map[string]*guarded
}

type guarded struct {
	mu      sync.Mutex
	highest uint64
}

// Write runs write if token is at least the highest token seen for
// resource, and then records token as the highest when write succeeded.
// Otherwise it returns a *StaleError and does not run write. Writes to one
// resource are serialised.
func (g *Guard) Write(resource string, token uint64, write func() error) error {
	if token == 0 {
		return fmt.Errorf("%w: token 0 (the lock was acquired without WithFencing?)", ErrInvalid)
	}
	g.mu.Lock()
	if g.highest == nil {
		g.highest = map[string]*guarded{}
	}
	r := g.highest[resource]
	if r == nil {
		r = &guarded{}
		g.highest[resource] = r
	}
	g.mu.Unlock()
	r.mu.Lock()
	defer r.mu.Unlock()
	if token < r.highest {
		return &StaleError{Resource: resource, Token: token, Highest: r.highest}
	}
	if err := write(); err != nil {
		return err
	}
	r.highest = token
	return nil
}

// Highest returns the highest token recorded for resource.
func (g *Guard) Highest(resource string) uint64 {
	g.mu.Lock()
	r := g.highest[resource]
	g.mu.Unlock()
	if r == nil {
		return 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.highest
}

// Package fence checks fencing tokens where the protected data is written.
//
// A lock from redlock with WithFencing carries a token (Lock.Fence) that is
// greater than the token of every earlier holder of the key. A holder that
// was paused past its lock's validity still has its old, smaller token:
// a resource that refuses any write whose token is below the highest it
// has seen turns that stale holder away, even though it believes it still
// holds the lock. That check must happen where the data is written,
// atomically with the write; this package provides it for data kept in
// Redis (Store, on a redigo pool or any lock transport) and for data kept in
// the process (Guard). Store.Read and Store.Update also record a reader's
// token, so that a fenced read-modify-write loses no update.
package fence

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
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
	return fmt.Sprintf("fence: stale fencing token %d for %q: a holder with token %d has read or written", e.Token, e.Resource, e.Highest)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// ErrInvalid is matched by errors about bad arguments.
var ErrInvalid = errors.New("fence: invalid argument")

// SeenKey returns the key in which Store keeps the highest token seen for
// the data key key: in key's Redis Cluster hash slot, so that the check
// and the write are one script.
func SeenKey(key string) string { return layout.FenceSeenKey(key) }

// Store keeps values in one Redis and checks a fencing token with every
// call, atomically with it on the Redis (one script per call). A Store is
// safe for concurrent use. What each call guarantees:
//
//   - Set writes only for a token at least the highest seen for the key
//     (equal tokens pass, so one holder may write many times), and records
//     it as the highest: a holder with a lower token can write nothing
//     after it.
//   - Read returns the value only for a token at least the highest seen,
//     and records it as the highest, just as Set does: once a holder has
//     read, a holder with a lower token can neither write nor read.
//   - Update is Read, then the caller's function, then Set, all for one
//     token: when it returns nil, no write of another token was accepted
//     between its read and its write (a later token's read or write refuses
//     this Set; an earlier token's is refused after this Read), so the
//     read-modify-write loses no update — provided every writer of the key
//     goes through Read/Update/Set with tokens of one lock (unique per
//     holder; a semaphore's are unique per slot, so use one resource per
//     slot, or a lock).
//   - Get and Highest only read; they check and record nothing.
//
// A Set, Read or Update whose error is not a *StaleError may have been
// applied or not (a timeout leaves it unknown; a pipelined transport may run
// it late): retry it with the same token, or read to find out.
type Store struct {
	b backend
}

// backend runs a Store's scripts on its Redis: through a redigo pool, or
// through a lock transport.
type backend interface {
	// eval runs script with keysAndArgs; shape is what its reply may be.
	eval(ctx context.Context, script *scripts.Script, shape transport.ReplyShape, keysAndArgs ...any) (any, error)
}

// NewStore returns a Store on the Redis behind p.
func NewStore(p pool.Pool) (*Store, error) {
	if p == nil {
		return nil, fmt.Errorf("%w: nil pool", ErrInvalid)
	}
	return &Store{b: poolBackend{p}}, nil
}

// NewTransportStore returns a Store on the Redis behind t, a transport of
// the kind redlock.NewWithTransports takes (the go-redis adapter of module
// goredis, say): each call is one command through t.Send, waiting at most
// until ctx's deadline (a second when ctx has none). The Store does not
// close t. t may be a transport a Client uses for a lock master, but the
// data belongs on a Redis of its own (docs/safety.md).
func NewTransportStore(t transport.Transport) (*Store, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: nil transport", ErrInvalid)
	}
	return &Store{b: transportBackend{t}}, nil
}

// Set stores value at key if token is at least the highest token seen for
// key, and records token as the highest. ttl 0 keeps the value without
// expiry. A refused write returns a *StaleError (matching ErrStale) and
// changes nothing.
func (s *Store) Set(ctx context.Context, key string, token uint64, value []byte, ttl time.Duration) error {
	if err := checkArgs(key, token); err != nil {
		return err
	}
	if ttl < 0 || (ttl > 0 && ttl < time.Millisecond) {
		return fmt.Errorf("%w: TTL must be 0 or at least 1ms, got %v", ErrInvalid, ttl)
	}
	res, err := s.b.eval(ctx, scripts.FencedWrite, transport.ReplyCounter, key, SeenKey(key), strconv.FormatUint(token, 10), value, ttl.Milliseconds())
	if err != nil {
		return fmt.Errorf("fence: set %q: %w", key, err)
	}
	if res == int64(0) {
		return nil
	}
	seen, err := strconv.ParseUint(bulk(res), 10, 64)
	if err != nil {
		return fmt.Errorf("fence: set %q: unexpected reply", key)
	}
	return &StaleError{Resource: key, Token: token, Highest: seen}
}

// Read returns the value at key (and whether there is one) if token is at
// least the highest token seen for key, and records token as the highest:
// from then on every holder with a lower token is refused, its writes and
// reads (see Store). A refused read returns a *StaleError and changes
// nothing.
func (s *Store) Read(ctx context.Context, key string, token uint64) ([]byte, bool, error) {
	if err := checkArgs(key, token); err != nil {
		return nil, false, err
	}
	res, err := s.b.eval(ctx, scripts.FencedRead, transport.ReplyInfo, key, SeenKey(key), strconv.FormatUint(token, 10))
	if err != nil {
		return nil, false, fmt.Errorf("fence: read %q: %w", key, err)
	}
	r := bulk(res)
	switch {
	case r == "n":
		return nil, false, nil
	case strings.HasPrefix(r, "v"):
		return []byte(r[1:]), true, nil
	case strings.HasPrefix(r, "s"):
		if seen, err := strconv.ParseUint(r[1:], 10, 64); err == nil {
			return nil, false, &StaleError{Resource: key, Token: token, Highest: seen}
		}
	}
	return nil, false, fmt.Errorf("fence: read %q: unexpected reply", key)
}

// Update reads key for token (Read), calls fn with the value and whether
// there is one, and stores fn's result for token (Set, with ttl). Either
// step refused returns a *StaleError: a holder with a later token read or
// wrote the key, and nothing of this call was stored. When Update returns
// nil, no write of another token was accepted between its read and its
// write (see Store). fn's error is returned as is, and nothing is written.
func (s *Store) Update(ctx context.Context, key string, token uint64, ttl time.Duration,
	fn func(old []byte, ok bool) ([]byte, error)) error {
	if fn == nil {
		return fmt.Errorf("%w: nil function", ErrInvalid)
	}
	old, ok, err := s.Read(ctx, key, token)
	if err != nil {
		return err
	}
	v, err := fn(old, ok)
	if err != nil {
		return err
	}
	return s.Set(ctx, key, token, v, ttl)
}

// Get returns the value at key and whether there is one. It checks and
// records no token: a value read this way must not be written back.
func (s *Store) Get(ctx context.Context, key string) ([]byte, bool, error) {
	if key == "" {
		return nil, false, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	res, err := s.b.eval(ctx, scripts.FencedGet, transport.ReplyInfo, key)
	if err != nil {
		return nil, false, fmt.Errorf("fence: get %q: %w", key, err)
	}
	switch r := bulk(res); {
	case r == "n":
		return nil, false, nil
	case strings.HasPrefix(r, "v"):
		return []byte(r[1:]), true, nil
	}
	return nil, false, fmt.Errorf("fence: get %q: unexpected reply", key)
}

// Highest returns the highest token seen for key (0 when none).
func (s *Store) Highest(ctx context.Context, key string) (uint64, error) {
	v, ok, err := s.Get(ctx, SeenKey(key))
	if err != nil || !ok {
		return 0, err
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("fence: highest %q: not a token: %w", key, err)
	}
	return n, nil
}

func checkArgs(key string, token uint64) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalid)
	case token == 0:
		return fmt.Errorf("%w: token 0 (the lock was acquired without WithFencing?)", ErrInvalid)
	}
	return nil
}

// bulk is a bulk string reply as a string ("" for any other reply).
func bulk(v any) string {
	switch v := v.(type) {
	case []byte:
		return string(v)
	case string:
		return v
	}
	return ""
}

// poolBackend runs scripts on connections of a redigo pool.
type poolBackend struct{ p pool.Pool }

// eval runs script on a connection, bounded by ctx's deadline (the
// connection's own read timeout when ctx has none).
func (b poolBackend) eval(ctx context.Context, script *scripts.Script, shape transport.ReplyShape, keysAndArgs ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c, err := b.p.GetContext(ctx)
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
	res, err := redigot.Do(script, c, timeout, keysAndArgs...)
	if err == nil && !shape.Fits(res) {
		return nil, fmt.Errorf("reply of the wrong shape")
	}
	return res, err
}

// transportBackend runs scripts through a lock transport's Send, as plain
// EVAL commands.
type transportBackend struct{ t transport.Transport }

// defaultWait bounds a transport call when ctx has no deadline.
const defaultWait = time.Second

func (b transportBackend) eval(ctx context.Context, script *scripts.Script, shape transport.ReplyShape, keysAndArgs ...any) (any, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultWait)
	}
	type outcome struct {
		reply any
		err   error
	}
	done := make(chan outcome, 1)
	args := append([]any{script.Source(), int64(script.KeyCount())}, keysAndArgs...)
	b.t.Send(&transport.Command{Name: "EVAL", Args: args, Deadline: deadline, Reply: shape,
		Done: func(reply any, err error, _ transport.SendInfo) { done <- outcome{reply, err} }})
	select {
	case o := <-done:
		return o.reply, o.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
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

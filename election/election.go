package election

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// Election is a leader election on one key. Candidates Campaign with a
// value (their address, say); one at a time is elected, for a term that
// is greater than every earlier leader's. Anyone may ask for the Leader
// or Observe the changes. The zero Election is not usable: make one with
// New. An Election is safe for concurrent use and holds no state of a
// campaign: each Campaign returns its own Leadership.
type Election struct {
	c    *redlock.Client
	key  string
	opts []redlock.LockOption // every campaign's, but its value
	poll time.Duration        // Observe's reading interval
}

// New returns an election on key, run through the client c. It
// sends nothing. Every campaign is a fenced, auto-extended plain lock on
// key (WithTTL, WithExtendPeriod, WithBackoff, WithFair and WithMaxHold
// set it up), whose holder metadata is the campaign's value and which
// records its term beside its holder (redlock.WithHolderFence). Keep the
// key for the election alone. New checks its arguments; a setting the
// client refuses (a TTL that leaves no validity after its per-master
// timeout, say) is Campaign's error, matching redlock.ErrInvalid.
func New(c *redlock.Client, key string, opts ...Option) (*Election, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: election: nil client", redlock.ErrInvalid)
	}
	if key == "" {
		return nil, fmt.Errorf("%w: election: empty key", redlock.ErrInvalid)
	}
	cfg := config{ttl: redlock.DefaultTTL}
	for _, o := range opts {
		o(&cfg)
	}
	poll := min(max(cfg.ttl/10, 50*time.Millisecond), time.Second)
	return &Election{c: c, key: key, opts: cfg.lockOptions(), poll: poll}, nil
}

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// Campaign waits until this candidate is elected or ctx ends, and returns
// its Leadership. value is what Leader tells everyone about the leader
// (at most layout.MaxMeta bytes; "" tells nothing). Candidates wait as the
// waiters of a lock do: woken by the leader's Resign, and polling for a
// leader that vanished without resigning (its key expires at its TTL).
// On failure the error matches ctx.Err() when ctx ended, redlock.ErrInvalid
// for a bad value or setting, redlock.ErrClosed when the client was
// closed.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	opts := append(append([]redlock.LockOption(nil), e.opts...), redlock.WithMetadata(value))
	for {
		l, err := e.c.Acquire(ctx, e.key, opts...)
		if err == nil {
			return &Leadership{l: l}, nil
		}
		// Acquire gave up before ctx ended: campaign on until it does.
		if ctx.Err() != nil || !errors.Is(err, redlock.ErrNotAcquired) || errors.Is(err, redlock.ErrClosed) {
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = errors.Join(err, ctx.Err())
			}
			return nil, err
		}
	}
}

// check refuses an Election New did not make, a nil ctx and a closed
// client.
func (e *Election) check(ctx context.Context) error {
	if e == nil || e.c == nil {
		return fmt.Errorf("%w: this Election was not made by election.New", redlock.ErrInvalid)
	}
	if ctx == nil {
		return fmt.Errorf("%w: nil context", redlock.ErrInvalid)
	}
	return e.closed()
}

// closed returns an error matching redlock.ErrClosed once the client was
// closed; else nil.
func (e *Election) closed() error {
	select {
	case <-e.c.Done():
		return fmt.Errorf("%w: election %q", redlock.ErrClosed, e.key)
	default:
		return nil
	}
}

// Leadership is one term of leadership, won by Campaign. It lasts until
// Resign, or until it is lost (Lost, Err): then the leader must stop
// acting as one. A Leadership is safe for concurrent use.
type Leadership struct {
	l *redlock.Lock
}

// Term returns the leader's term: its lock's fencing token, greater than
// every earlier leader's. Present it with every write to a resource that
// checks it (package fence), which then refuses a deposed leader's.
func (ld *Leadership) Term() uint64 { return ld.l.Fence() }

// Value returns the value the leader campaigned with.
func (ld *Leadership) Value() string { return ld.l.Metadata() }

// Lost returns a channel closed as soon as the leadership can no longer be
// trusted (see redlock.Lock.Lost): the leader was deposed or resigned.
func (ld *Leadership) Lost() <-chan struct{} { return ld.l.Lost() }

// Err returns nil while the leadership is trusted, then why it ended
// (redlock.Lock.Err).
func (ld *Leadership) Err() error { return ld.l.Err() }

// Lock returns the lock that makes the leadership (for Until, say).
func (ld *Leadership) Lock() *redlock.Lock { return ld.l }

// Resign ends the leadership at once: the key is released and the
// waiting candidates are woken. The release is sent even when ctx has
// ended (redlock.Lock.Release). It returns an error matching
// redlock.ErrNotHeld when the leadership was lost already or resigned
// before.
func (ld *Leadership) Resign(ctx context.Context) error { return ld.l.Release(ctx) }

// maxObserved bounds the leaders Observe keeps for a receiver that does
// not receive.
const maxObserved = 64

// Observe reads the leader again and again until ctx ends or the client
// closes, and sends each new one on the returned channel, in the order of
// their terms, each once. It reads every tenth of the TTL (50 ms to 1 s
// apart), keeping the latest 64 leaders for a slow receiver; a leader
// that came and went between readings is not sent (its term is missing).
// The channel is closed when ctx ends or the client is closed
// (redlock.Client.Done), at once on a closed client or a nil ctx: the
// goroutine that reads ends with it.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if e.check(ctx) != nil {
		close(ch)
		return ch
	}
	go func() {
		defer close(ch)
		var last uint64
		var queue []Leader
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			var out chan Leader // nil: nothing to send
			var head Leader
			if len(queue) > 0 {
				out, head = ch, queue[0]
			}
			select {
			case <-ctx.Done():
				return
			case <-e.c.Done():
				return
			case out <- head:
				queue = queue[1:]
			case <-t.C:
				ld, err := e.Leader(ctx)
				if errors.Is(err, redlock.ErrClosed) {
					return
				}
				if err == nil && ld.Term > last {
					last = ld.Term
					if len(queue) == maxObserved {
						queue = queue[1:]
					}
					queue = append(queue, ld)
				}
				t.Reset(e.poll)
			}
		}
	}()
	return ch
}

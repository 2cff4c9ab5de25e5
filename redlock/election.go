package redlock

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/quorumlock/quorumlock/layout"
)

// Leader election.
//
// An Election is a fenced, auto-extended plain lock on one key, nothing
// beside it: to campaign is to wait for the lock (woken by the release,
// as every waiter is); the leader is its holder, and the leader's value is
// the lock's holder metadata (WithMetadata). The leader's term is the
// lock's fencing token (WithFencing): it grows with every grant across the
// quorum, so a storage that refuses a term lower than the highest it has
// seen refuses the writes of a deposed leader, even one that was paused
// and does not know it was deposed. Leadership ends when the lock is
// released (Resign: the next candidate is woken at once) or lost (Lost:
// its watchdog could not extend it; a leader that froze or exited loses
// the key at its TTL and a candidate takes it then).
//
// Leader reads the masters (Client.Inspect): the leader is the token that
// a quorum of masters holds, its value that token's metadata, its term
// the fencing counter of the masters that hold it (the commit of the
// term reached a quorum of them, and no later term can be committed where
// the token is still held). Observe reads it again and again.
//
// Election lives in package redlock, not a package of its own, because it
// is one more way to use the lock: it takes the same LockOptions and its
// Leadership is a Lock.

// ErrNoLeader is matched by the error of Election.Leader when no quorum of
// masters holds the election's key: nobody leads at the moment.
var ErrNoLeader = errors.New("redlock: no leader")

// Election is a leader election on one key. Candidates Campaign with a
// value (their address, say); one at a time is elected, for a term that
// is greater than every earlier leader's. Anyone may ask for the Leader
// or Observe the changes. The zero Election is not usable: make one with
// Client.NewElection. An Election is safe for concurrent use and holds no
// state of a campaign: each Campaign returns its own Leadership.
type Election struct {
	c    *Client
	key  string
	opts []LockOption
	poll time.Duration // Observe's reading interval
}

// NewElection returns an election on key. It sends nothing. opts are lock
// options for every campaign (WithTTL: how long a frozen leader keeps
// the key, default DefaultTTL; WithAutoExtend's period; WithBackoff;
// WithFair to elect candidates in the order they came; WithMaxHold to cap
// a term); WithFencing and auto-extension are always on, and each
// Campaign's value is its WithMetadata (so WithMetadata is refused, and
// so is WithWait: a campaign waits until its ctx ends). Keep the key for
// the election alone.
func (c *Client) NewElection(key string, opts ...LockOption) (*Election, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	all := append(append([]LockOption{WithAutoExtend(0)}, opts...), WithFencing())
	lc, err := c.lockConfig(key, all)
	if err != nil {
		return nil, err
	}
	if lc.meta != "" {
		return nil, fmt.Errorf("%w: an election's metadata is each campaign's value; do not pass WithMetadata", ErrInvalid)
	}
	if lc.waitSet {
		// WithWait(0) would make Campaign retry without a pause, and a
		// bounded fair Acquire leaves its place in the queue at the bound.
		return nil, fmt.Errorf("%w: a campaign waits until its ctx ends; do not pass WithWait (give ctx a deadline)", ErrInvalid)
	}
	poll := min(max(lc.ttl/10, 50*time.Millisecond), time.Second)
	return &Election{c: c, key: key, opts: all, poll: poll}, nil
}

// Key returns the election's key.
func (e *Election) Key() string { return e.key }

// Campaign waits until this candidate is elected or ctx ends, and returns
// its Leadership. value is what Leader tells everyone about the leader
// (at most layout.MaxMeta bytes; "" tells nothing). Candidates wait as the
// waiters of a lock do: woken by the leader's Resign, and polling for a
// leader that vanished without resigning (its key expires at its TTL).
// On failure the error matches ctx.Err() when ctx ended, ErrInvalid for a
// bad value, ErrClosed when the client was closed.
func (e *Election) Campaign(ctx context.Context, value string) (*Leadership, error) {
	if err := e.check(ctx); err != nil {
		return nil, err
	}
	opts := append(append([]LockOption(nil), e.opts...), WithMetadata(value))
	for {
		l, err := e.c.Acquire(ctx, e.key, opts...)
		if err == nil {
			return &Leadership{e: e, l: l}, nil
		}
		// Acquire gave up at its wait bound: campaign on until ctx ends.
		if ctx.Err() != nil || !errors.Is(err, ErrNotAcquired) || errors.Is(err, ErrClosed) {
			if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
				err = errors.Join(err, ctx.Err())
			}
			return nil, err
		}
	}
}

func (e *Election) check(ctx context.Context) error {
	if e == nil || e.c == nil {
		return fmt.Errorf("%w: this Election was not made by Client.NewElection", ErrInvalid)
	}
	return e.c.check(ctx)
}

// Leadership is one term of leadership, won by Campaign. It lasts until
// Resign, or until it is lost (Lost, Err): then the leader must stop
// acting as one. A Leadership is safe for concurrent use.
type Leadership struct {
	e *Election
	l *Lock
}

// Term returns the leader's term: its lock's fencing token, greater than
// every earlier leader's. Present it with every write to a resource that
// checks it (package fence), which then refuses a deposed leader's.
func (ld *Leadership) Term() uint64 { return ld.l.Fence() }

// Value returns the value the leader campaigned with.
func (ld *Leadership) Value() string { return ld.l.Metadata() }

// Lost returns a channel closed as soon as the leadership can no longer be
// trusted (see Lock.Lost): the leader was deposed or resigned.
func (ld *Leadership) Lost() <-chan struct{} { return ld.l.Lost() }

// Err returns nil while the leadership is trusted, then why it ended
// (Lock.Err).
func (ld *Leadership) Err() error { return ld.l.Err() }

// Lock returns the lock that makes the leadership (for Until, say).
func (ld *Leadership) Lock() *Lock { return ld.l }

// Resign ends the leadership at once: the key is released and the
// waiting candidates are woken. The release is sent even when ctx has
// ended (Lock.Release). It returns an error matching ErrNotHeld when the
// leadership was lost already or resigned before.
func (ld *Leadership) Resign(ctx context.Context) error { return ld.l.Release(ctx) }

// Leader is an election's leader as the masters hold it.
type Leader struct {
	// Value is what the leader campaigned with.
	Value string
	// Term is the leader's term (its fencing token).
	Term uint64
	// TTL is how long a quorum of masters keeps the leader's key without a
	// further extension: a frozen leader is replaced no later.
	TTL time.Duration
}

// Leader reads who leads now: the value and term of the candidate that a
// quorum of masters holds the key for. It only reads (Client.Inspect: a
// few round trips per master, all masters at once). It returns an error
// matching ErrNoLeader when no quorum holds the key, and another error
// when so many masters could not be read that a leader might be hidden;
// each master's failure is then in the error as a *NodeError.
//
// What it returns is a snapshot: the leader may be deposed the moment
// after. Only a resource that checks the term can tell a current leader's
// write from an old one.
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx); err != nil {
		return Leader{}, err
	}
	in, err := e.c.Inspect(ctx, e.key)
	if err != nil {
		return Leader{}, err
	}
	return leaderOf(in, e.c.quorum)
}

// leaderOf finds the leader in what the masters hold.
func leaderOf(in Inspection, quorum int) (Leader, error) {
	type seen struct {
		n     int
		term  uint64
		ttls  []time.Duration
		votes map[string]int // metadata -> masters
	}
	byToken := map[string]*seen{}
	var failed []error
	for _, m := range in.Masters {
		if m.Err != nil {
			failed = append(failed, m.Err)
			continue
		}
		st := m.State
		if st.Kind != layout.KindLock || len(st.Holders) != 1 {
			continue
		}
		h := st.Holders[0]
		s := byToken[h.Token]
		if s == nil {
			s = &seen{votes: map[string]int{}}
			byToken[h.Token] = s
		}
		s.n++
		s.votes[h.Meta]++
		s.ttls = append(s.ttls, h.TTL)
		if st.Fenced && st.Fence > s.term {
			s.term = st.Fence
		}
	}
	for _, s := range byToken {
		if s.n < quorum || s.term == 0 {
			continue
		}
		ld := Leader{Term: s.term}
		best := 0
		for v, n := range s.votes {
			if n > best || n == best && v < ld.Value {
				ld.Value, best = v, n
			}
		}
		sort.Slice(s.ttls, func(i, j int) bool { return s.ttls[i] > s.ttls[j] })
		ld.TTL = s.ttls[quorum-1]
		return ld, nil
	}
	if len(failed) > len(in.Masters)-quorum {
		return Leader{}, fmt.Errorf("redlock: leader of %q: %d of %d masters could not be read: %w",
			in.Key, len(failed), len(in.Masters), errors.Join(failed...))
	}
	return Leader{}, newKeyError(ErrNoLeader, in.Key, "", nil)
}

// maxObserved bounds the leaders Observe keeps for a receiver that does
// not receive.
const maxObserved = 64

// Observe reads the leader again and again until ctx ends, and sends each
// new one on the returned channel: in the order of their terms, each term
// once, never an older one after a newer. It reads every tenth of the TTL
// (at least 50 ms apart, at most a second), also while the receiver is not
// receiving (it keeps the latest 64 leaders for it). A leader that came and
// went between two readings is not sent, and the gap in the terms shows
// it. One goroutine runs until ctx ends, then closes the channel.
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
			case out <- head:
				queue = queue[1:]
			case <-t.C:
				if ld, err := e.Leader(ctx); err == nil && ld.Term > last {
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

package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/redlock"
)

// ErrNoLeader is matched by the error of Election.Leader when no quorum of
// masters holds the election's key: nobody leads at the moment.
var ErrNoLeader = errors.New("election: no leader")

// ErrHandOver is matched by the error of Election.Leader when a quorum of
// masters holds a leader's key but not yet a quorum its term: the new
// leader's fencing commit is still under way (or the leader was elected
// by an older version that records no term). It matches ErrNoLeader too:
// no leader is settled.
var ErrHandOver = fmt.Errorf("%w: hand-over in progress", ErrNoLeader)

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

// How often Leader reads during a hand-over before it reports one, and
// how long it waits between the reads: a commit follows its grant by one
// round trip.
const (
	handOverReads = 4
	handOverPause = 20 * time.Millisecond
)

// Leader reads who leads now: the Value and Term of the candidate that a
// quorum of masters holds the key for, with that term recorded on each of
// them, so the pair is always one a candidate was granted. It only reads
// (redlock.Client.InspectHolder), and what it returns is a snapshot: only
// a resource that checks the term can tell a current leader's write from
// an old one. It returns an error matching redlock.ErrClosed on a closed
// client; ErrNoLeader when no quorum holds the key; ErrHandOver (which
// matches ErrNoLeader) while a new leader's term is not yet on a quorum;
// and, when the masters it could not read might hide a leader, an error
// with each one's *redlock.NodeError (and ctx.Err() when ctx ended). How
// it reads and decides: docs/design.md, "Reading an election's leader".
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx); err != nil {
		return Leader{}, err
	}
	for try := 1; ; try++ {
		in, err := e.c.InspectHolder(ctx, e.key)
		if err != nil {
			return Leader{}, err
		}
		ld, handOver, err := leaderIn(e.key, in.Masters, e.c.Quorum())
		if err != nil && !errors.Is(err, ErrNoLeader) {
			// Masters could not be read: if ctx ended, that is why (a
			// master's read then says it did not answer in time).
			if cerr := ctxEnded(ctx); cerr != nil && !errors.Is(err, cerr) {
				err = fmt.Errorf("%w (%w)", err, cerr)
			}
		}
		if !handOver || try == handOverReads {
			return ld, err
		}
		t := time.NewTimer(handOverPause)
		select {
		case <-ctx.Done():
			t.Stop()
			return ld, err
		case <-e.c.Done():
			t.Stop()
			return Leader{}, e.closed()
		case <-t.C:
		}
	}
}

// ctxEnded returns ctx.Err(), or context.DeadlineExceeded when ctx's
// deadline has passed but its timer has not yet fired: a connection's
// deadline, taken from ctx's, can end a read a moment before ctx ends.
func ctxEnded(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}

// keyError is ErrNoLeader or ErrHandOver for one key.
type keyError struct {
	sentinel error
	key      string
}

func (e *keyError) Error() string {
	if errors.Is(e.sentinel, ErrHandOver) {
		return "election: no settled leader of " + strconv.Quote(e.key) + " (hand-over in progress)"
	}
	return "election: no leader of " + strconv.Quote(e.key)
}

func (e *keyError) Unwrap() error { return e.sentinel }

// leaderOf finds the leader in what the masters hold: the token a quorum
// holds with the same term recorded for it on each of them.
func leaderOf(key string, reads []redlock.MasterState, quorum int) (Leader, error) {
	ld, _, err := leaderIn(key, reads, quorum)
	return ld, err
}

// leaderIn is leaderOf, and tells whether a quorum of the masters read
// holds one token (a hand-over is under way, or may be: reading again soon
// may find its term on a quorum).
//
// Without a pair on a quorum it says "no leader" (or "hand-over") only when
// the masters it could not read cannot hide one: when they, with the
// masters that agree on a pair, or hold a token, are fewer than a quorum.
// Otherwise it cannot tell, and says so with each master's failure.
func leaderIn(key string, reads []redlock.MasterState, quorum int) (Leader, bool, error) {
	type pair struct {
		token string
		term  uint64
	}
	type seen struct {
		ttls  []time.Duration
		votes map[string]int // value -> masters
	}
	byPair := map[pair]*seen{}
	holding := map[string]int{} // token -> masters holding it, with a term or not
	var failed []error
	for _, r := range reads {
		if r.Err != nil {
			failed = append(failed, r.Err)
			continue
		}
		if len(r.State.Holders) == 0 {
			continue
		}
		h := r.State.Holders[0]
		holding[h.Token]++
		if h.Fence == 0 {
			continue
		}
		p := pair{h.Token, h.Fence}
		s := byPair[p]
		if s == nil {
			s = &seen{votes: map[string]int{}}
			byPair[p] = s
		}
		s.votes[h.Meta]++
		s.ttls = append(s.ttls, h.TTL)
	}
	for p, s := range byPair {
		if len(s.ttls) < quorum {
			continue
		}
		ld := Leader{Term: p.term}
		best := 0
		for v, n := range s.votes { // one value per token, unless a master lies
			if n > best || n == best && v < ld.Value {
				ld.Value, best = v, n
			}
		}
		slices.SortFunc(s.ttls, func(a, b time.Duration) int { return cmp.Compare(b, a) })
		ld.TTL = s.ttls[quorum-1]
		return ld, false, nil
	}
	most := 0 // the most masters that hold one token: a pair's votes are among them
	handOver := false
	for _, n := range holding {
		most = max(most, n)
		handOver = handOver || n >= quorum
	}
	unread := func() error {
		return fmt.Errorf("election: leader of %q: %d of %d masters could not be read: %w",
			key, len(failed), len(reads), errors.Join(failed...))
	}
	if len(failed) > 0 && (len(failed) > len(reads)-quorum || most+len(failed) >= quorum && !handOver) {
		return Leader{}, false, unread()
	}
	if handOver {
		best := 0 // the most masters that agree on a pair
		for _, s := range byPair {
			best = max(best, len(s.ttls))
		}
		if len(failed) > 0 && best+len(failed) >= quorum {
			return Leader{}, true, unread()
		}
		return Leader{}, true, &keyError{ErrHandOver, key}
	}
	return Leader{}, false, &keyError{ErrNoLeader, key}
}

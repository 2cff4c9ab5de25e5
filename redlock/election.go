package redlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/resp"
	"github.com/quorumlock/quorumlock/internal/scripts"
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
// An election's fencing commit also records the term beside the holder,
// in the field "term:"+token of the metadata hash, in the same
// script step that raises the counter (scripts.FenceCommitTerm); an
// election always keeps that hash, an empty value too. Leader reads each
// master in one script step (scripts.LeaderRead): the token that holds the
// key, the term recorded for that token and its metadata, so the three are
// of one moment of the master. The leader is the token that a quorum of
// masters holds with the same term recorded: that token's acquisition
// chose the term and committed it to a quorum. The fencing counter alone
// is never read for the term: it is raised a round trip after the grant,
// and read beside the new holder it gave the old holder's term
// (docs/design.md, "Reading an election's leader"). Observe reads Leader
// again and again.
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
	all := append(append([]LockOption{WithAutoExtend(0)}, opts...), WithFencing(), asElection())
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

// asElection makes a lock an election's campaign: it always keeps holder
// metadata, and its fencing commit records the term beside the holder.
func asElection() LockOption { return func(c *lockConfig) { c.election = true } }

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
	if err := e.c.check(ctx); err != nil {
		return err
	}
	return e.c.closedErr("election", e.key)
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

// Leader reads who leads now: the Value and Term of the candidate that a
// quorum of masters holds the key for, with that term recorded on each of
// them, so the pair is always one a candidate was granted. It only reads,
// and what it returns is a snapshot: only a resource that checks the term
// can tell a current leader's write from an old one. It returns ErrClosed
// on a closed client; ErrNoLeader when no quorum holds the key; ErrHandOver
// (which matches ErrNoLeader) while a new leader's term is not yet on a
// quorum; and, when the masters it could not read might hide a leader, an
// error with each one's *NodeError (and ctx.Err() when ctx ended). How it
// reads and decides: docs/design.md, "Reading an election's leader".
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	if err := e.check(ctx); err != nil {
		return Leader{}, err
	}
	rctx, cancel := e.c.untilClosed(ctx)
	defer cancel()
	for try := 1; ; try++ {
		reads := e.c.readLeader(rctx, e.key)
		if err := e.c.closedErr("leader of", e.key); err != nil {
			return Leader{}, err
		}
		ld, handOver, err := leaderIn(e.key, reads, e.c.quorum)
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
		case <-e.c.closing:
			t.Stop()
			return Leader{}, e.c.closedErr("leader of", e.key)
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

// ErrHandOver is matched by the error of Election.Leader when a quorum of
// masters holds a leader's key but not yet a quorum its term: the new
// leader's fencing commit is still under way (or the leader was elected
// by an older version that records no term). It matches ErrNoLeader too:
// no leader is settled.
var ErrHandOver = fmt.Errorf("%w: hand-over in progress", ErrNoLeader)

// How often Leader reads during a hand-over before it reports one, and
// how long it waits between the reads: a commit follows its grant by one
// round trip.
const (
	handOverReads = 4
	handOverPause = 20 * time.Millisecond
)

// leaderRead is what one master holds for an election (leader_read.lua).
type leaderRead struct {
	token string // "" when the key holds no token
	ttl   time.Duration
	term  uint64 // 0 when no term is recorded for the token
	value string
	err   error // a *NodeError
}

// readLeader reads every master at once.
func (c *Client) readLeader(ctx context.Context, key string) []leaderRead {
	out := make([]leaderRead, len(c.masters))
	var wg sync.WaitGroup
	for i := range c.masters {
		wg.Add(1)
		go func(m *master) {
			defer wg.Done()
			out[m.index] = c.readLeaderOn(ctx, m, key)
		}(&c.masters[i])
	}
	wg.Wait()
	return out
}

// readLeaderOn reads one master in one round trip (scripts.LeaderRead),
// within the per-master timeout and ctx.
func (c *Client) readLeaderOn(ctx context.Context, m *master, key string) (lr leaderRead) {
	fail := func(err error) leaderRead { return leaderRead{err: c.nodeError(m, err)} }
	defer func() {
		if p := recover(); p != nil { // redigo's parser on a pool that is not guarded
			lr = fail(fault.PanicError(p))
		}
	}()
	in, ok := m.t.(Inspector)
	if !ok {
		return fail(fmt.Errorf("%w: the transport cannot inspect (it is not a transport.Inspector)", errors.ErrUnsupported))
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	s := scripts.LeaderRead
	replies, err := in.Inspect(rctx, []layout.Command{{Name: "EVAL",
		Args: []any{s.Source(), 2, key, layout.MetaKey(key), maxToken, layout.MaxMeta}}})
	if err == nil && len(replies) != 1 {
		err = fmt.Errorf("leader read: %d replies to 1 command", len(replies))
	}
	if err != nil {
		return fail(err)
	}
	lr, err = parseLeaderRead(replies[0])
	if err != nil {
		return fail(err)
	}
	return lr
}

// maxToken bounds the token a leader read sends back: the library's
// tokens are 36 bytes, and a longer one is no leader's.
const maxToken = 256

// parseLeaderRead checks a leader read's reply, untrusted: {} or {token,
// PTTL, term or nil, value or nil} within the bounds the script was given.
func parseLeaderRead(v any) (leaderRead, error) {
	if err, ok := v.(error); ok {
		return leaderRead{}, fmt.Errorf("leader read: %w", err)
	}
	a, ok := v.([]any)
	if !ok || len(a) != 0 && len(a) != 4 {
		return leaderRead{}, fmt.Errorf("%w: leader read replied %s", layout.ErrMalformed, resp.Shape(v))
	}
	var lr leaderRead
	if len(a) == 0 {
		return lr, nil
	}
	bad := func(what string) (leaderRead, error) {
		return leaderRead{}, fmt.Errorf("%w: leader read: bad %s", layout.ErrMalformed, what)
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
		return lr, nil
	}
	lr.token, lr.ttl = tok, layout.NoExpiry
	if pttl >= 0 {
		lr.ttl = time.Duration(pttl) * time.Millisecond
	}
	if a[2] != nil {
		t, ok := resp.Bulk(a[2])
		if !ok {
			return bad("term")
		}
		n, err := strconv.ParseUint(t, 10, 64)
		if err != nil || n == 0 || n >= maxFence || t[0] == '0' {
			return bad("term")
		}
		lr.term = n
	}
	if a[3] != nil {
		m, ok := resp.Bulk(a[3])
		if !ok || len(m) > layout.MaxMeta {
			return bad("value")
		}
		lr.value = m
	}
	return lr, nil
}

// leaderOf finds the leader in what the masters hold: the token a quorum
// holds with the same term recorded for it on each of them.
func leaderOf(key string, reads []leaderRead, quorum int) (Leader, error) {
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
func leaderIn(key string, reads []leaderRead, quorum int) (Leader, bool, error) {
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
		if r.err != nil {
			failed = append(failed, r.err)
			continue
		}
		if r.token == "" {
			continue
		}
		holding[r.token]++
		if r.term == 0 {
			continue
		}
		p := pair{r.token, r.term}
		s := byPair[p]
		if s == nil {
			s = &seen{votes: map[string]int{}}
			byPair[p] = s
		}
		s.votes[r.value]++
		s.ttls = append(s.ttls, r.ttl)
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
	if len(failed) > 0 && (len(failed) > len(reads)-quorum || most+len(failed) >= quorum && !handOver) {
		return Leader{}, false, fmt.Errorf("redlock: leader of %q: %d of %d masters could not be read: %w",
			key, len(failed), len(reads), errors.Join(failed...))
	}
	if handOver {
		best := 0 // the most masters that agree on a pair
		for _, s := range byPair {
			best = max(best, len(s.ttls))
		}
		if len(failed) > 0 && best+len(failed) >= quorum {
			return Leader{}, true, fmt.Errorf("redlock: leader of %q: %d of %d masters could not be read: %w",
				key, len(failed), len(reads), errors.Join(failed...))
		}
		return Leader{}, true, newKeyError(ErrHandOver, key, "", nil)
	}
	return Leader{}, false, newKeyError(ErrNoLeader, key, "", nil)
}

// maxObserved bounds the leaders Observe keeps for a receiver that does
// not receive.
const maxObserved = 64

// Observe reads the leader again and again until ctx ends or the client
// closes, and sends each new one on the returned channel, in the order of
// their terms, each once. It reads every tenth of the TTL (50 ms to 1 s
// apart), keeping the latest 64 leaders for a slow receiver; a leader
// that came and went between readings is not sent (its term is missing).
// The channel is closed when ctx ends or Client.Close is called (at once
// on a closed client or a nil ctx); Close waits for its goroutine.
func (e *Election) Observe(ctx context.Context) <-chan Leader {
	ch := make(chan Leader)
	if e.check(ctx) != nil || !e.c.addWorker() {
		close(ch)
		return ch
	}
	go func() {
		defer e.c.workers.Done()
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
			case <-e.c.closing:
				return
			case out <- head:
				queue = queue[1:]
			case <-t.C:
				ld, err := e.Leader(ctx)
				if errors.Is(err, ErrClosed) {
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

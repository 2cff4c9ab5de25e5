package redlock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/finish"
	"github.com/quorumlock/quorumlock/observe"
)

// opKind is what a round asks of every master.
type opKind uint8

const (
	opAcquire  opKind = iota // SET key token NX PX ttl
	opExtend                 // compare-and-PEXPIRE
	opRelease                // compare-and-DEL, announced to waiters
	opRollback               // compare-and-DEL of a failed attempt, not announced
	opLeave                  // a fair waiter that gives up leaves the queue
	opWait                   // the wake-up subscription (for logs only)
	opCommit                 // a fenced acquisition raises the fencing counters
	opHeal                   // a held lock is put back where it was lost (heal.go)
)

func (o opKind) String() string {
	switch o {
	case opAcquire:
		return "acquire"
	case opExtend:
		return "extend"
	case opRelease:
		return "release"
	case opRollback:
		return "rollback"
	case opLeave:
		return "leave queue"
	case opCommit:
		return "commit fence"
	case opHeal:
		return "heal"
	default:
		return "wait"
	}
}

// vote is one master's answer in a round.
type vote uint8

const (
	voteYes  vote = iota + 1 // granted, extended or released
	voteNo                   // held by another token / not ours
	voteFail                 // error or timeout: the outcome on that master is unknown
	voteSkip                 // not asked: the round's lead master did not grant it (see round.ledBy)
)

type reply struct {
	index int
	vote  vote
	err   error
}

// round is one operation sent to every master in parallel, through each
// master's Transport, with no goroutine of its own: each master's share
// (a leg) moves on as its transport completes its commands. A leg sends
// its command at once on an Ordered transport; on another, it first waits
// for the round it follows on that master (chaining, see startRound). It
// reports the reply and — for an acquisition that failed — sends the
// rollback of its master's SET once the round is decided and, on a
// transport that is not Ordered, once that SET has been answered, so that
// a rollback can never overtake the SET it undoes.
type round struct {
	c     *Client
	op    opKind
	key   string
	token string
	ttlMS int64
	k     kind     // what the lock's rounds send (kind.go)
	fence *fencing // nil for a lock without fencing
	// counters[i] is master i's fencing counter, from a fenced
	// acquisition's reply; written before the reply is reported.
	counters []uint64
	// freeAt[i] is when (Unix ns, real time) master i's copy of the key is
	// expected to be free, from a waiting plain acquisition's reply (the
	// holder's remaining TTL), or 0 when unknown; nil for other rounds.
	// Set before the reply is reported, read by freeIn at any time.
	freeAt []atomic.Int64
	// writerWaits has bit i set when master i turned a reader away for a
	// waiting writer (and not a holder); set before the reply is reported.
	writerWaits atomic.Uint64
	chain       string    // the key in Client.chains this round is the newest of, or ""
	deadline    time.Time // when its commands stop being waited for
	// wait is how long its commands are waited for from its start: the
	// adaptive bound of an acquisition or an extension (bound.go), a
	// release's longer wait (stall.Bound.ReleaseWait), else the per-master
	// timeout.
	wait    time.Duration
	running atomic.Int32
	// leadAnswered is how long after the round's start its lead master
	// answered (µs), once it did: the other legs, sent only then, count
	// their round trips for the adaptive bound from that moment. (An
	// Int32 beside running, in what would be padding: an Int64 would
	// take round3 to the next size class.)
	leadAnswered atomic.Int32
	// ledBy is 1 + the index of the master an acquisition asks first,
	// or 0: the others are asked once it granted, and not at all when it
	// did not (a woken waiter's attempt, see Client.leadFor).
	ledBy int
	// sentLed counts the legs on Ordered transports that wait for the
	// lead and have neither been sent nor ended: an acquisition that
	// succeeded waits for it before it returns, so that no later command
	// of the holder (its release) reaches such a master before the SET.
	sentLed sync.WaitGroup

	// ctx is the caller's, for the logger and the observer only (never
	// for cancellation); seen, each master's answer for the observer
	// (observe.go), nil without one.
	ctx  context.Context
	seen []observe.MasterResult

	replies chan reply

	// mu guards decided, failed, rbq and the legs' state. Lock order
	// (see Client.mu): a Lock's op may be held when it is taken
	// (Lock.finalNo), Client.mu and the finisher's locks never are; under
	// it only a transport's own lock is taken (its Silence, in expire).
	mu      sync.Mutex
	decided bool
	failed  bool
	legs    []leg

	// rb is a failed acquisition's rollback, built once it is decided;
	// rbq[i] is master i's rollback once sent (under mu), for Close to
	// complete it should the transport never do so (Client.abandon).
	rb  *wireCmd
	rbq []*rollbackReq

	// liveNext and livePrev link the rounds whose legs still run
	// (Client.live, under Client.mu).
	liveNext, livePrev *round

	// fin: retries of its release or rollback that a master missed
	// (internal/finish, and finish.go).
	fin finish.Round
	// placers, for a lock's release: the lock's rounds that may have put
	// its token on a master (Lock.placers). Set by Lock.Release once the
	// round started, so that the finisher, when it queues, sends or gives
	// up a retry, can tell a master that none of them reached: the
	// release leaves nothing there, and needs no retry nor warning
	// (nothingAt).
	placers atomic.Pointer[[]*round]

	// final, for a release, reports whether master i's answer that it
	// does not hold the token is final: no command of the lock that puts
	// the token there can still run on it (Lock.finalNo). Nil for other
	// rounds. Set before the round is collected, read by collect only.
	final func(i int) bool

	// The round's command and its arguments, in the round's own
	// allocation (alloc.go).
	wireBuf wireCmd
	argBuf  [12]any
}

// startRound starts the round on every master. Commands that must not
// pass each other on a master are chained (see "Ordering on each master"
// in docs/design.md): an Ordered transport keeps them in the order they
// are sent; on another, leg i of a round sends nothing before leg i of the
// round it follows has ended. Every round of one holder of a key — one
// token, or one reentrant owner, fair waiter or writer across its
// attempts (chainID) — follows the holder's previous round still running,
// so a late rollback of a failed attempt cannot delete the next attempt's
// grant, nor a late attempt bring back a queue entry or a writer's intent
// that its waiter gave up. A fence commit follows its acquisition's
// command (after), not its end. An acquisition that starts a holder's
// chain follows the client's latest release of the key still in flight,
// so a client that releases and locks again does not find its own old
// token on the masters that were slow to delete it, and the client's
// latest leave of the key still in flight, so that it is not turned away
// by the intent or queue entry of its own waiter that gave up. The wait is
// bounded by the round's own deadline; a leg that gave up still ends only
// after the rounds it follows, so the chain holds through it.
func (c *Client) startRound(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, k kind, fence *fencing) (*round, error) {
	return c.startLed(ctx, op, key, token, ttl, after, k, fence, -1)
}

// startLed is startRound for an acquisition whose master lead (unless -1)
// is asked first: every other leg also waits for the lead's answer, and
// is sent only when the lead granted; else it ends unsent (voteSkip).
func (c *Client) startLed(ctx context.Context, op opKind, key, token string, ttl time.Duration, after *round, k kind, fence *fencing, lead int) (*round, error) {
	n := len(c.masters)
	r := newRound(n)
	r.c, r.op, r.key, r.token, r.ttlMS = c, op, key, token, ttl.Milliseconds()
	r.ledBy = lead + 1
	r.k, r.fence = k, fence
	r.wait = c.boundFor(op, ttl)
	if op == opRelease {
		r.wait = c.bound.ReleaseWait()
	}
	r.replies, r.deadline, r.ctx = make(chan reply, n), time.Now().Add(r.wait), ctx
	if c.obs != nil {
		r.seen = make([]observe.MasterResult, n)
	}
	if fence != nil && op == opAcquire {
		r.counters = make([]uint64, n)
	}
	if pk, ok := k.(plainKind); ok && pk.waiting && fence == nil && op == opAcquire {
		r.freeAt = make([]atomic.Int64, n)
	}
	r.running.Store(int32(n))
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s %q", ErrClosed, op, key)
	}
	var older *finish.Round // a reentrant owner's previous round, whose retries this one ends
	if k.oneToken() {
		older = c.fin.Newest(chainID(key, token, k), &r.fin, ttl)
	}
	prev := after
	var leave *round // the client's latest leave of key, for an acquisition that starts a chain
	if !c.allOrdered {
		if op != opCommit {
			r.chain = chainID(key, token, k)
			if last := c.chains[r.chain]; last != nil {
				prev = last
			}
			if c.chains == nil {
				c.chains = make(map[string]*round)
			}
			c.chains[r.chain] = r
		}
		switch {
		case op == opAcquire && prev == nil:
			prev, leave = c.releasing[key], c.leaving[key]
		case op == opRelease:
			c.releasing[key] = r
		case op == opLeave:
			c.leaving[key] = r
		}
	}
	// Every leg counts until it ends: Close gives them their grace, and
	// an acquisition's legs end only once it is decided and, when it
	// failed, rolled back. Close finds the round in c.live until then.
	c.workers.Add(n)
	r.liveNext = c.live
	if c.live != nil {
		c.live.livePrev = r
	}
	c.live = r
	c.mu.Unlock()
	if older != nil {
		c.fin.Supersede(older, &r.fin)
	}
	w := &r.wireBuf
	r.wireInto(w, op, r.argBuf[:])
	host := time.Duration(-1) // c.hostSilence, once asked
	for i := range r.legs {
		l := &r.legs[i]
		l.r, l.i = r, i
		w.fill(&l.cmd, r)
		l.cmd.To, l.cmd.Deadline = l, r.deadline
		m := &c.masters[i]
		hung := false
		if _, silencer := m.t.(Silencer); silencer && !m.ordered && (r.wait > c.timeout || m.silentFor(c.timeout)) {
			// Hung, for this round, is silent beyond the host (every
			// master's silence, hostSilence): by the round's whole wait
			// for an acquisition or an extension (downAfter: under the
			// adaptive bound a master silent for less is as slow as the
			// others), by a per-master timeout for the other commands
			// (a release's longer wait is not a measure of how slow the
			// masters are). A master that is not hung is asked and
			// waited for as the others: the pooled transport, which
			// drops an acquisition to a master silent for a per-master
			// timeout, is told not to (DropWhenDown), and reads its
			// reply late (it is silent for less than the command's
			// wait). An Ordered transport keeps its own judgement: its
			// silence already follows its reader, and writing to a
			// master it counts down only queues commands behind a
			// frozen one.
			if host < 0 {
				host = c.hostSilence()
			}
			beyond := c.timeout
			if l.cmd.DropWhenDown {
				beyond = r.wait
			}
			if hung = m.silentFor(host + beyond); !hung {
				l.cmd.DropWhenDown = false
			}
		} else {
			hung = m.knownDown()
		}
		if r.wait > c.timeout && hung {
			// A release's longer wait, and an adaptive bound above the
			// timeout, are for masters that are slow, not for one hung:
			// a command to it gets the per-master timeout, so that it
			// holds no pooled connection longer.
			l.cmd.Deadline = r.deadline.Add(c.timeout - r.wait)
		}
		if n == 1 && op != opLeave {
			// The caller waits for this reply alone (collect follows):
			// a transport may read it in Send, when the caller sends it
			// (begin).
			l.cmd.Wait = ctx
		}
	}
	for i := range r.legs {
		r.legs[i].begin(prev, leave)
	}
	return r, nil
}

// settledAt reports whether the round's command can no longer run on
// master i: the master answered it (granted or refused), or it was never
// sent there and never will be (not asked, given up before it was sent,
// failed unsent). A command that failed unanswered may still run, late.
func (r *round) settledAt(i int) bool {
	if r.fin.UnsentAt(i) {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	l := &r.legs[i]
	return l.vote == voteYes || l.placedNothingLocked()
}

// settledEverywhere reports whether settledAt holds on every master.
func (r *round) settledEverywhere() bool {
	for i := range r.legs {
		if !r.settledAt(i) {
			return false
		}
	}
	return true
}

// forget removes the round from the client's live rounds and its chains
// once its last leg has ended.
func (r *round) forget() {
	c := r.c
	c.mu.Lock()
	if r.livePrev != nil {
		r.livePrev.liveNext = r.liveNext
	} else {
		c.live = r.liveNext
	}
	if r.liveNext != nil {
		r.liveNext.livePrev = r.livePrev
	}
	r.liveNext, r.livePrev = nil, nil
	if !c.allOrdered {
		if c.releasing[r.key] == r {
			delete(c.releasing, r.key)
		}
		if c.leaving[r.key] == r {
			delete(c.leaving, r.key)
		}
		if r.chain != "" && c.chains[r.chain] == r {
			delete(c.chains, r.chain)
		}
	}
	c.mu.Unlock()
}

// chainID names the holder of key whose rounds must reach each master in
// the order they are started: a reentrant owner (whose token is the
// owner), a fair waiter or a writer (stable across their attempts, whose
// queue entry or intent each attempt refreshes and a leave removes), else
// the token.
func chainID(key, token string, k kind) string {
	id := k.holder()
	if id == "" {
		id = "t:" + token
	}
	return key + "\x00" + id
}

// setBit sets bit i (below 64) of a.
func setBit(a *atomic.Uint64, i int) {
	for {
		old := a.Load()
		if a.CompareAndSwap(old, old|1<<i) {
			return
		}
	}
}

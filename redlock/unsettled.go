package redlock

import (
	"slices"
	"time"
)

// Expiry changes still in flight.
//
// A command that sets a key's TTL and that a master has not answered may
// still run there, and not necessarily in the order it was sent: a later
// command on another connection can run first (the pooled path uses a
// connection per command, the pipelined path a new one after it gave a
// silent one up, and a redis-server resumed from SIGSTOP reads its
// sockets in no fixed order). When the earlier command had the shorter
// TTL, the key expires on that master at the earlier command's TTL from
// when it finally runs, which is after the later command was sent.
//
// So the lock keeps, per master, the TTLs of its expiry changes whose
// outcome there is not known. A later round that a quorum confirms counts
// each confirming master for at most the shortest TTL still in flight to
// it (heldTTL), and the validity is start + the quorum-th longest of those
// − drift. A late answer settles a command (it ran, or it was refused);
// a failure (a timeout after sending, say) never does, and that master
// stays limited for the lock's lifetime. The state is guarded by l.op.

// unsettledRound is an expiry change some master had not answered when
// its round was decided.
type unsettledRound struct {
	r     *round
	ttl   time.Duration
	votes []vote // by master; 0 while unanswered
}

// track records the masters that did not answer r, a round that set the
// key's TTL to ttl, as decided by t. The caller holds l.op.
func (l *Lock) track(r *round, t *tally, ttl time.Duration) {
	open := false
	for i, v := range t.votes {
		switch v {
		case 0:
			open = true
		case voteFail:
			l.limitMaster(i, ttl)
		}
	}
	if open {
		l.unsettled = append(l.unsettled, unsettledRound{r: r, ttl: ttl, votes: t.votes})
	}
}

// limitMaster records that a command setting ttl may still run on master
// i at any time.
func (l *Lock) limitMaster(i int, ttl time.Duration) {
	if l.inFlight == nil {
		l.inFlight = make([]time.Duration, len(l.c.masters))
	}
	if p := l.inFlight[i]; p == 0 || ttl < p {
		l.inFlight[i] = ttl
	}
}

// limits returns, per master, the shortest TTL that may still be set
// there by a command sent earlier (0: none), after taking in the answers
// that came since. It must be called before the next round is sent: an
// answer that comes later does not show that the earlier command ran
// before that round's. nil when no master is limited. The caller holds
// l.op.
func (l *Lock) limits() []time.Duration {
	kept := l.unsettled[:0]
	for _, u := range l.unsettled {
		for drained := false; !drained; {
			select {
			case rp := <-u.r.replies:
				u.votes[rp.index] = rp.vote
				if rp.vote == voteFail {
					l.limitMaster(rp.index, u.ttl)
				}
			default:
				drained = true
			}
		}
		if slices.Contains(u.votes, 0) {
			kept = append(kept, u)
		}
	}
	clear(l.unsettled[len(kept):])
	l.unsettled = kept
	if len(kept) == 0 {
		return l.inFlight
	}
	lim := slices.Clone(l.inFlight)
	if lim == nil {
		lim = make([]time.Duration, len(l.c.masters))
	}
	for _, u := range kept {
		for i, v := range u.votes {
			if v == 0 && (lim[i] == 0 || u.ttl < lim[i]) {
				lim[i] = u.ttl
			}
		}
	}
	return lim
}

// heldTTL returns how long, from the start of a round that set ttl and
// that a quorum confirmed, a quorum of the confirming masters is sure to
// keep the key: ttl, unless so many of them may still run an earlier
// command with a shorter TTL (lim, from limits) that the quorum-th
// longest is shorter.
func heldTTL(lim []time.Duration, t *tally, ttl time.Duration, quorum int) time.Duration {
	if lim == nil {
		return ttl
	}
	held := make([]time.Duration, 0, len(t.votes))
	for i, v := range t.votes {
		if v != voteYes {
			continue
		}
		h := ttl
		if p := lim[i]; p > 0 && p < h {
			h = p
		}
		held = append(held, h)
	}
	if len(held) < quorum {
		return ttl // not confirmed: the caller does not use it
	}
	slices.Sort(held)
	return held[len(held)-quorum]
}

// limitsBeforeNext returns old's limits (see limits) for the owner's next
// hold of a reentrant lock: its token is the owner, so old's expiry
// changes still in flight apply to that hold too. Call it before the new
// hold's acquisition is sent. nil when none.
func (l *Lock) limitsBeforeNext() []time.Duration {
	l.op.Lock()
	defer l.op.Unlock()
	return slices.Clone(l.limits())
}

// inherit makes l, a new hold, allow for the expiry changes of an earlier
// hold with the same token that were still in flight when l's acquisition
// was sent (lim, from limitsBeforeNext). Not knowing which masters granted
// l, it counts with the shortest TTL among them; when that leaves no
// validity, l is lost and the error says so.
func (l *Lock) inherit(lim []time.Duration) error {
	held := l.ttl
	for i, p := range lim {
		if p > 0 {
			l.limitMaster(i, p)
			held = min(held, p)
		}
	}
	if held == l.ttl {
		return nil
	}
	c := l.c
	until := l.limitUntil(l.acquired.Add(held - c.drift(held)))
	if !c.clock.Now().Before(until) {
		err := newKeyError(ErrLockLost, l.key, "an extension of the owner's lost hold to "+held.String()+" may still run", nil)
		l.markLost(err)
		return err
	}
	return nil
}

package redlock

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/jitter"
)

// Fallback poll.
//
// A waiter is woken by the release's notice, and its backoff timer is only
// a fallback for the keys that are freed without one: a holder that
// vanished frees its key at its TTL, and the rollbacks of a split vote are
// not announced. While the backoff climbs (contention, a split vote, a
// notice that came before the masters that had not yet run the release)
// the waiter retries at the backoff; once the backoff has reached its
// maximum, the last attempt was refused by a quorum's worth of masters
// that hold the key for another, and the release of each of its keys
// would reach this client —
// the key's channel is subscribed, acknowledged, on enough masters that
// every quorum includes one of them (N − quorum + 1) — the waiter polls
// only every fallbackPoll(TTL) instead.

// maxFallbackPoll bounds the fallback poll.
const maxFallbackPoll = 2 * time.Second

// fallbackPoll is how long a waiter with live subscriptions sleeps between
// attempts unless woken: half the lock's TTL (a vanished holder with the
// same TTL frees the key at most that long before the waiter notices), at
// most maxFallbackPoll, and never less than the maximum backoff.
func fallbackPoll(ttl, backoffMax time.Duration) time.Duration {
	return max(backoffMax, min(ttl/2, maxFallbackPoll))
}

// delay returns how long the waiter sleeps before its next attempt
// (number attempt+1), which failed with failed, unless woken: the jittered
// backoff, or the jittered fallback poll once the backoff is at its
// maximum, the attempt was refused by so many masters holding the key for
// another that no quorum was possible (masters that failed or timed out
// announce nothing when they come back), and every key's subscription is
// live on enough masters. A waiter that leaves a mark (a fair queue entry,
// a writer's intent) keeps the backoff: its attempts refresh the mark,
// which would expire otherwise.
func (wg *waiting) delay(lc *lockConfig, attempt int, leaves bool, failed error) time.Duration {
	d := jitter.Backoff(wg.w.c.jit, lc.backoffMin, lc.backoffMax, attempt)
	if leaves || attempt < 30 && lc.backoffMin<<attempt < lc.backoffMax && lc.backoffMin<<attempt > 0 {
		return d
	}
	var qe *QuorumError
	if !asQuorumError(failed, &qe) || len(qe.Refused) <= qe.Masters-qe.Quorum {
		return d
	}
	w := wg.w
	need := len(w.c.masters) - w.c.quorum + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		if w.liveLocked(wt.Key) < need {
			return d
		}
	}
	p := fallbackPoll(lc.ttl, lc.backoffMax)
	return p/2 + wg.w.c.jit.N(p-p/2+1)
}

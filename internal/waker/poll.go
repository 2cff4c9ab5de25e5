package waker

import (
	"time"
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
// only every fallbackPoll(TTL) instead. The core decides the first two
// (they depend on its backoff and its errors); Poll checks the last and
// draws the poll.

// maxFallbackPoll bounds the fallback poll.
const maxFallbackPoll = 2 * time.Second

// fallbackPoll is how long a waiter with live subscriptions sleeps between
// attempts unless woken: half the lock's TTL (a vanished holder with the
// same TTL frees the key at most that long before the waiter notices), at
// most maxFallbackPoll, and never less than the maximum backoff.
func fallbackPoll(ttl, backoffMax time.Duration) time.Duration {
	return max(backoffMax, min(ttl/2, maxFallbackPoll))
}

// Poll returns the jittered fallback poll of a lock of ttl whose backoff
// is at most backoffMax, for a waiter whose backoff is at its maximum and
// whose last attempt was refused by so many masters holding the key for
// another that no quorum was possible (masters that failed or timed out
// announce nothing when they come back): a random delay in [p/2, p], p =
// fallbackPoll(ttl, backoffMax). It reports false, and draws nothing,
// unless every key's subscription is live on enough masters; the waiter
// then keeps its backoff.
func (wg *Waiting) Poll(ttl, backoffMax time.Duration) (time.Duration, bool) {
	w := wg.w
	need := len(w.subs) - w.cfg.Quorum + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		if w.liveLocked(wt.Key) < need {
			return 0, false
		}
	}
	p := fallbackPoll(ttl, backoffMax)
	return p/2 + w.cfg.Jitter(p-p/2+1), true
}

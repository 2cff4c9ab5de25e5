package redlock

import (
	"slices"
	"time"

	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/waker"
)

// Expired locks found at once.
//
// A holder that vanished frees its key at its TTL and announces nothing,
// so no notice wakes its waiters. A waiting plain attempt (after the
// first, which is a bare SET NX PX) runs wait_acquire.lua, whose refusal
// replies the key's remaining TTL on that master; the waiter then tries
// again when the key is expected to be free on a quorum of masters, if
// that comes before its backoff or fallback poll. Every byte of that reply
// is untrusted: the hint only ever shortens the waiter's delay, never
// below hintFloor (which doubles with every hinted attempt that is refused
// again, so that a master that keeps answering 0 cannot make the waiter
// spin), and a TTL above maxHint or a negative one is no hint at all.

// maxHint bounds a remaining TTL that counts as a hint; a larger one is
// ignored (the waiter's own delay is shorter in any case).
const maxHint = time.Hour

// noteFree records master i's answer to a waiting plain attempt: refused
// with the holder's remaining TTL left (ms), or granted.
func (r *round) noteFree(i int, left int64, refused bool) {
	if r.freeAt == nil || i >= len(r.freeAt) {
		return
	}
	now := time.Now()
	switch {
	case !refused:
		r.freeAt[i].Store(now.UnixNano())
	case left >= 0 && left <= maxHint.Milliseconds():
		// Redis frees a key once its clock is past the expiry: 1 ms
		// after the remaining TTL has run out.
		r.freeAt[i].Store(now.Add(time.Duration(left+1) * time.Millisecond).UnixNano())
	}
}

// freeIn returns how long from now the key is expected to be free on
// quorum masters, from the answers to this waiting plain attempt that
// told: the quorum-th soonest, or, with fewer answers (a piloted attempt
// asks one master), the latest of them. ok is false when no answer told.
func (r *round) freeIn(quorum int, now time.Time) (d time.Duration, ok bool) {
	if r == nil || r.freeAt == nil {
		return 0, false
	}
	var buf [16]int64
	at := buf[:0]
	for i := range r.freeAt {
		if v := r.freeAt[i].Load(); v != 0 {
			at = append(at, v)
		}
	}
	if len(at) == 0 {
		return 0, false
	}
	slices.Sort(at)
	pick := at[len(at)-1]
	if len(at) >= quorum {
		pick = at[quorum-1]
	}
	return max(time.Unix(0, pick).Sub(now), 0), true
}

// hinted returns the delay before a waiter's next attempt given its own
// delay and the key's expected free moment in (from the last attempt's
// replies, freeIn): in plus a random spread of at most waker.WakeSpread
// (waiters of other clients learned the same moment, drawn from j), but
// never below floor, and only when that is sooner than delay.
func hinted(j *jitter.Rand, delay, in time.Duration, ok bool, floor time.Duration) (time.Duration, bool) {
	if !ok {
		return delay, false
	}
	h := max(in+j.N(waker.WakeSpread), floor)
	if h >= delay {
		return delay, false
	}
	return h, true
}

// hintFloor is the least delay a hint may give after hints attempts
// made at a hinted moment were refused: minBackoff, doubled with each,
// at most the backoff's ceiling.
func hintFloor(lc *lockConfig, hints int) time.Duration {
	if hints < 30 {
		if f := minBackoff << hints; f > 0 && f < lc.backoffMax {
			return f
		}
	}
	return lc.backoffMax
}

package redlock

import (
	"time"

	"github.com/quorumlock/quorumlock/internal/wake"
)

// Woken waiters ask one master first.
//
// A release wakes every waiter of the key, in every process. Were each to
// send SET NX to every master at once, all but one would be refused
// everywhere, at five commands each and the rollbacks of the masters they
// did not await, and some would split the vote so that none won. Instead a
// woken waiter's attempt asks one master first, the key's pilot, and the
// others only once the pilot granted it: the pilot decides among the woken
// waiters in one command each, the losers send nothing else, and the
// winner asks the rest in one more round trip. Its validity still counts
// from before its first write, so the longer round only shortens it
// (docs/design.md, "Woken waiters").
//
// Every process must name the same pilot for a key without talking to the
// others: the pilot is the master whose run_id (learned at first contact,
// internal/ident) hashes highest with the key (rendezvous hashing, in
// wake.Pilot), so that the order in which processes list their masters
// does not matter, and keys spread over the masters. Until every run_id
// is known, the masters' positions stand in for them. A master that
// failed a command within leadQuiet is passed over for the next, so that
// a master that is down or hung does not fail every woken attempt: the
// attempt is made to every master at once when each of them failed
// lately.

// leadQuiet is how long a master that failed a command is not chosen as
// pilot, at least: see leadFor.
const leadQuiet = time.Second

// leadFor returns the master a woken waiter's attempt on key asks first,
// or -1 for none (one master, or none answered lately without failing):
// the key's pilot (wake.Pilot) among the masters that did not fail a
// command within max(leadQuiet, 20 × the per-master timeout). It takes
// the identity's mutex (ident.Identity.Known) until every run_id is
// known, and the waker calls it with its lock held (waker.Waker.Notify):
// the lock order is the waker's lock, then the identity's; nothing that
// holds the identity's mutex calls into the waker.
func (c *Client) leadFor(key string) int {
	quiet := int64(max(leadQuiet, 20*c.timeout))
	now := time.Now().UnixNano()
	return wake.Pilot(key, c.ident.Known(), len(c.masters), func(i int) bool {
		at := c.failedAt[i].Load()
		return at != 0 && now-at < quiet
	})
}

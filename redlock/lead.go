package redlock

import (
	"strconv"
	"time"
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
// identity.go) hashes highest with the key (rendezvous hashing), so that
// the order in which processes list their masters does not matter, and
// keys spread over the masters. Until every run_id is known, the masters'
// positions stand in for them. A master that failed a command within
// leadQuiet is passed over for the next, so that a master that is down or
// hung does not fail every woken attempt: the attempt is made to every
// master at once when each of them failed lately.

// leadQuiet is how long a master that failed a command is not chosen as
// pilot, at least: see leadFor.
const leadQuiet = time.Second

// leadFor returns the master a woken waiter's attempt on key asks first,
// or -1 for none (one master, or none answered lately without failing).
func (c *Client) leadFor(key string) int {
	n := len(c.masters)
	if n < 2 {
		return -1
	}
	quiet := max(leadQuiet, 20*c.timeout)
	now := time.Now().UnixNano()
	ids := c.ident.known()
	k := fnv64a(fnvOffset, key)
	best, bestScore := -1, uint64(0)
	var num [20]byte
	for i := range c.masters {
		if at := c.failedAt[i].Load(); at != 0 && now-at < int64(quiet) {
			continue
		}
		var h uint64
		if ids != nil {
			h = fnv64a(fnvOffset, ids[i])
		} else {
			h = fnv64aBytes(fnvOffset, strconv.AppendInt(num[:0], int64(i), 10))
		}
		if s := mix64(h ^ k); best < 0 || s > bestScore {
			best, bestScore = i, s
		}
	}
	return best
}

// FNV-1a, 64 bits (hash/fnv's New64a, without its allocation per call:
// leadFor runs on every notice and every woken attempt).
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnv64a(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

func fnv64aBytes(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

// mix64 is MurmurHash3's 64-bit finalizer: every bit of x moves about
// half of the result's, which FNV alone does not do for inputs that differ
// only in their last bytes.
func mix64(x uint64) uint64 {
	x ^= x >> 33
	x *= 0xff51afd7ed558ccd
	x ^= x >> 33
	x *= 0xc4ceb9fe1a85ec53
	x ^= x >> 33
	return x
}

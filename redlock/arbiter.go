package redlock

import "context"

// Contended attempts ask one master first.
//
// When several clients contend for a key and a release is announced, all
// their waiters retry at once; sent to every master in parallel, their
// SETs split the masters' votes, no one reaches a quorum, all roll back
// and back off. So an attempt that follows evidence of contention (its
// waiter was woken by a release notice, or its previous attempt was
// refused by a master that holds the key) first asks one master, the
// key's arbiter, which every client contending for the key picks alike:
// only the contender it grants asks the others. A refusal ends the attempt
// at once, with nothing sent elsewhere and nothing to roll back. An
// arbiter that fails, or has not answered within a quarter of the
// per-master timeout, does not
// hold the attempt up: it then asks the others in parallel, as an
// unarbitrated attempt does, and a late grant by the arbiter is rolled
// back like any other. First attempts and TryAcquire stay fully parallel.
// docs/design.md ("Contended attempts ask one master first") argues why
// this leaves safety and validity as they were.

// arbiterShare: an attempt waits for its arbiter at most the per-master
// timeout divided by this before it asks the other masters.
const arbiterShare = 4

// arbiter returns the index of key's arbiter: the master a hash of the
// key names, or the next in order that this client does not see as
// failing; -1 with a single master, or when it sees every one failing.
func (c *Client) arbiter(key string) int {
	n := len(c.masters)
	if n < 2 {
		return -1
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	first := int(h % uint32(n))
	for j := range n {
		if i := (first + j) % n; !c.failing[i].Load() {
			return i
		}
	}
	return -1
}

// seenFailing records master i's latest answer: failed or not.
func (c *Client) seenFailing(i int, failed bool) {
	if c.failing[i].Load() != failed {
		c.failing[i].Store(failed)
	}
}

// arbitrate returns the arbiter an acquisition of kind k on key asks
// first, or -1 when it asks every master at once: it does unless it
// follows evidence of contention (contended) and k is a kind whose
// attempts are arbitrated.
func (c *Client) arbitrate(key string, k kind, contended bool) int {
	if !contended || !k.arbitrated() {
		return -1
	}
	return c.arbiter(key)
}

// askArbiter waits for the arbitrated round r's arbiter, at most the
// per-master timeout / arbiterShare, and never past ctx, and then lets the other legs go, or
// skips them when the arbiter refused or ctx ended. It returns the
// arbiter's reply counted, if it came; the caller collects the rest.
func (c *Client) askArbiter(ctx context.Context, r *round) tally {
	t := tally{votes: make([]vote, len(c.masters))}
	wait := c.clock.NewTimer(c.timeout / arbiterShare)
	defer wait.Stop()
	skip := false
	select {
	case rp := <-r.replies:
		t.add(rp)
		skip = rp.vote == voteNo
	case <-wait.C():
		// Slow or stopped: not the arbiter of the next attempts until it
		// answers again.
		c.failing[r.arb].Store(true)
	case <-ctx.Done():
		skip = true
	}
	r.release(skip)
	if skip {
		for i := range t.votes {
			if i != r.arb {
				t.add(reply{index: i, vote: voteSkip})
			}
		}
	}
	return t
}

// release lets the held legs of an arbitrated round begin, or, with skip,
// marks them not asked (the caller counts them so): each then ends,
// sending nothing and reporting no reply, once what it follows on its
// master has (begin).
func (r *round) release(skip bool) {
	if skip {
		r.mu.Lock()
		for i := range r.legs {
			if l := &r.legs[i]; i != r.arb {
				l.skip, l.replied, l.vote = true, true, voteSkip
			}
		}
		r.mu.Unlock()
		for i := range r.legs {
			if i != r.arb {
				r.legs[i].answered.fire()
			}
		}
	}
	for i := range r.legs {
		if i != r.arb {
			r.legs[i].begin(r.prev)
		}
	}
	r.prev = nil
}

package redlock

import (
	"context"
	"strconv"
	"time"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// Locks that heal.
//
// A master that restarts without its data (or is flushed) loses the
// copies of the locks it held, and an extension only extends where the
// key still is: a long-held lock (an election, an auto-extended job) would
// stay on fewer masters with every restart, tolerating one failure fewer
// each time, until one more failure loses it. So an extension that a
// quorum confirmed in time also puts the lock back, with SET NX and the
// time its validity has left, on each master that answered that it does
// not hold the token (scripts.Heal): only where the key is absent, never
// over another holder. With the lock it restores what the master lost
// beside it: the fencing counter (raised to the lock's fencing token,
// never lowered), the holder's metadata and an election's term.
// docs/design.md ("Locks that heal") argues why that is safe.

// healable reports whether locks of kind k are put back where lost: a
// plain lock (fenced, with metadata, an election's) or a fair one, whose
// key holds its token as a string. Reentrant, read-write and multi-key
// locks keep more than a token there, and are not.
func healable(k kind) bool {
	if mk, ok := k.(*metaKind); ok {
		k = mk.kind
	}
	switch k.(type) {
	case plainKind, *fairness:
		return true
	}
	return false
}

// heal puts the lock back on the masters that answered its extension
// (tally t), or an earlier extension after that one had returned
// (Lock.lacking), that they do not hold its token, for what is left of
// its validity (until), and waits for a quorum of answers or ctx. An
// extension's tally ends at a quorum, and waiting for the rest would let
// a paused master slow every extension: a master that lost the lock and
// answers after the others is healed by the next extension that starts
// after its answer came. The caller
// holds op, after the extension succeeded. Nothing is sent when every
// master holds the lock, when its kind is not healable, or when less than
// a millisecond of validity is left. Its outcome changes nothing of the
// lock: a master that refuses (another holder, another kind) or fails is
// tried again at the next extension.
func (l *Lock) heal(ctx context.Context, t *tally, until time.Time) {
	if !healable(l.kind()) || ctx.Err() != nil {
		return
	}
	lacking := l.lacking.Swap(0) != 0
	for _, v := range t.votes {
		lacking = lacking || v == voteNo
	}
	if !lacking {
		return
	}
	c := l.c
	left := until.Sub(c.clock.Now()).Truncate(time.Millisecond)
	if left < time.Millisecond {
		return
	}
	f := &fencing{counter: layout.FenceKey(l.key), arg: strconv.FormatUint(l.fence, 10)}
	hr, err := c.startRound(ctx, opHeal, l.key, l.token, left, l.follow(), l.kind(), f)
	if err != nil {
		return
	}
	// Later rounds follow it on each master, and it may put the token
	// there: the release's answers count it as they count a reentrant
	// owner's rounds taking the lock again (finalNo, placers).
	l.chain = hr
	l.noteRetaken(hr)
	c.collect(ctx, hr)
}

// noteLateRefusals arranges that a master which had not answered the
// extension round r when its tally t was taken, and then answers that it
// does not hold the token, is marked in l.lacking for the next extension
// to heal.
func (l *Lock) noteLateRefusals(r *round, t *tally) {
	if !healable(l.kind()) {
		return
	}
	for i, v := range t.votes {
		if v != 0 || i >= 64 {
			continue
		}
		leg := &r.legs[i]
		leg.answered.Then(func() {
			r.mu.Lock()
			no := leg.vote == voteNo
			r.mu.Unlock()
			if no {
				setBit(&l.lacking, i)
			}
		})
	}
}

// healCommand is the heal round's command (scripts.Heal): the lock key,
// its fencing counter and metadata hash, then the token, the TTL, the
// fencing token ("0" without fencing) and what metadata to write.
func (r *round) healCommand(dst []any) (*scripts.Script, string, []any) {
	mode, value, metaKey := "0", "", layout.MetaKey(r.key)
	if mk, ok := r.k.(*metaKind); ok {
		mode, value, metaKey = "1", mk.meta.value, mk.meta.key
		if mk.meta.term {
			mode = "2"
		}
	}
	return scripts.Heal, "", append(dst, r.key, r.fence.counter, metaKey, r.token, r.ttlMS, r.fence.arg, mode, value)
}

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
// (round r, tally t) that they do not hold its token, for what is left of
// its validity (until), and waits for a quorum of answers or ctx. The
// extension's tally ends at a quorum: a master that lost the lock and
// answers after the others is waited for here, at most one per-master
// timeout, and one whose answer came later still is found in the previous
// extension's round (prev, nil for none) by the next extension. The caller
// holds op, after the extension succeeded. Nothing is sent when every
// master holds the lock, when its kind is not healable, or when less than
// a millisecond of validity is left. Its outcome changes nothing of the
// lock: a master that refuses (another holder, another kind) or fails is
// tried again at the next extension.
func (l *Lock) heal(ctx context.Context, r *round, t *tally, prev *round, until time.Time) {
	if !healable(l.kind()) || ctx.Err() != nil {
		return
	}
	lacking := prev != nil && prev.refusedSomewhere()
	for _, v := range t.votes {
		lacking = lacking || v == voteNo
	}
	if !lacking && r.awaitAnswers(ctx, t, l.c.timeout) {
		lacking = r.refusedSomewhere()
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

// refusedSomewhere reports whether some master has answered r with a
// refusal (for an extension: it does not hold the token), also after the
// round's caller stopped waiting.
func (r *round) refusedSomewhere() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.legs {
		if r.legs[i].vote == voteNo {
			return true
		}
	}
	return false
}

// awaitAnswers waits until every master that had not answered r when its
// tally t was taken has answered (or its leg gave up), for at most d or
// until ctx ends. It reports whether there was any such master.
func (r *round) awaitAnswers(ctx context.Context, t *tally, d time.Duration) bool {
	var missing []int
	for i, v := range t.votes {
		if v == 0 {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return false
	}
	answered := make(chan struct{}, len(missing))
	for _, i := range missing {
		r.legs[i].answered.then(func() { answered <- struct{}{} })
	}
	timer := r.c.clock.NewTimer(d)
	defer timer.Stop()
	for range missing {
		select {
		case <-answered:
		case <-timer.C():
			return true
		case <-ctx.Done():
			return true
		}
	}
	return true
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

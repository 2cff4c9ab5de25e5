package wake

import "strings"

// Kind is what a waiter waits for, as far as its wake-up goes.
type Kind uint8

const (
	// Plain waits for one key: woken once per notice that wakes one, and
	// sent to the back of the queue when woken.
	Plain Kind = iota
	// Fair waits for one key in a fair lock's queue: woken as a plain
	// waiter is, but it keeps its place, which is its arrival.
	Fair
	// Multi waits for several keys (a multi-key lock): woken by every
	// notice of each of them, in its place, and never by the once-per-
	// notice wake of the key's waiters.
	Multi
	// Writer is a waiting writer of a read-write lock: woken before the
	// client's other waiters of the key, wherever it stands.
	Writer
	// Reader is a reader of a read-write lock: woken as a plain waiter,
	// and one that gets in passes a wake-up on to the next.
	Reader
)

// Waiter is one waiter of a key in a Queue, made by Queue.Add.
type Waiter struct {
	// Key is the key it waits for, for the caller.
	Key string
	// Ch gets the waiter's wake-ups; it holds at most one pending
	// (several waiters of one call, on several keys, share it).
	Ch chan struct{}
	// Kind and Arrival: a fair waiter's place, µs since the epoch (0 for
	// any other kind).
	Kind    Kind
	Arrival int64
	// ID is a plain waiter's ID in the key's line on the masters, which a
	// release that hands the key over names (Notice.Heir); "" for a
	// waiter in no line.
	ID string
	// Heir: the latest wake-up handed the key over to this waiter (a
	// quorum of masters announced it named): its attempt asks every
	// master at once, with no delay. Read and cleared by the attempt.
	Heir bool
	// heirVotes has bit i set when master i announced a hand-over to
	// this waiter since its latest attempt began: by a release, a
	// rollback or the leave of an heir that gave up, whichever.
	heirVotes uint64
	// Woken: a notice was handed to this waiter. Should it give up without
	// the lock, the notice is passed on (Leave). A caller that took the
	// notice for an attempt may clear it (a semaphore's waiter does).
	Woken bool
	// pending: a notice woke the waiter and its attempt has not begun;
	// trying: that attempt is under way (Queue.Trying); crossed: a notice
	// woke another waiter of the key meanwhile, since the wake-up (Crossed).
	pending, trying, crossed bool
}

// Notice is one master's notice of a release, as Decide sees it.
type Notice struct {
	// Count is how many masters announced this release so far, this
	// notice included: 1 for its first notice.
	Count int
	// Quorum is the Client's quorum.
	Quorum int
	// FromPilot: the notice came from the key's pilot, the master a woken
	// attempt asks first now. PilotHeard: the pilot's notice of this
	// release came earlier.
	FromPilot, PilotHeard bool
	// FromAsked: the notice came from the master the key's latest piloted
	// attempt asked first (it may no longer be the pilot).
	FromAsked bool
	// Heir is the start of the waiter ID the release handed the key over
	// to on this master (keys.ParseHandOver), or "": the key holds that
	// waiter's marker there, which refuses every other attempt.
	// HeirVotes is how many masters announced a hand-over to that
	// waiter, here, since its latest attempt began (this one included).
	Heir      string
	HeirVotes int
	// Candidate is the start of the waiter ID first in the key's line on
	// this master when the release left the key free, or "".
	Candidate string
}

// Decision is whom a notice wakes among a key's waiters.
type Decision struct {
	// One is the index of the one waiter of the key alone that the notice
	// wakes (-1: none), and Back whether it then goes to the back of the
	// queue (it is not fair).
	One  int
	Back bool
	// Multi: every multi-key waiter of the key is woken, in its place.
	Multi bool
	// Heir: the waiter woken (One) is the one the key was handed over to.
	Heir bool
	// Heard: the notice counts as heard, so that a waiter that registers
	// next, whose first attempt it may have come after, tries again: no
	// waiter of the key was here, or a multi-key waiter, which may go on
	// waiting for another key, was woken.
	Heard bool
}

// Woken reports whether d wakes waiter i of q, the queue it was decided
// for.
func (d Decision) Woken(q []*Waiter, i int) bool {
	return i == d.One || d.Multi && q[i].Kind == Multi
}

// Decide returns whom notice n of a release wakes among q, the client's
// waiters of the key, longest waiting first (fair waiters by arrival).
//
// A release wakes one waiter of the key alone (Next) at its first notice,
// the quickest hand-off; again at the pilot's notice, when that was not
// the first, since the woken waiter may have asked the pilot before it ran
// the release; at the notice of the master a piloted attempt asked first,
// since the pilot can change between that attempt and the notice; and at
// the notice that completes a quorum, since a waiter woken earlier may
// have reached masters that had not yet run the release. Every other
// notice of the release wakes none of them.
//
// Every notice of the key wakes every multi-key waiter: a master may
// refuse one for another of its keys, and that master's notice of this
// key may be none of those four. Such a waiter may go on waiting without
// taking the key or passing the notice on, so the notice also counts as
// heard.
//
// A notice that names the candidate, the waiter first in the key's line
// (Notice.Candidate), wakes it, when it is here, where another notice
// wakes the next waiter, and no other waiter in the line.
//
// A notice of a hand-over (Notice.Heir) wakes only the waiter it names,
// in its place, and only once a quorum of masters announced a hand-over
// to it since its latest attempt began (Notice.HeirVotes: by releases,
// rollbacks and leaves alike): then the masters that hold its marker
// can make a quorum, and its attempt asks every master at once. Any other
// waiter would be refused wherever the marker is, and so wakes for none
// of the hand-over's notices; a waiter named by fewer than a quorum of
// masters (heads that differ) finds the key by its timer once the
// markers run out.
func Decide(q []*Waiter, n Notice) Decision {
	d := Decision{One: -1, Heard: len(q) == 0}
	if n.Heir != "" {
		if n.HeirVotes < n.Quorum {
			return d
		}
		if i := heir(q, n.Heir); i >= 0 {
			d.One, d.Heir = i, true
		}
		return d
	}
	if n.Count == 1 || n.FromPilot && !n.PilotHeard || n.FromAsked || n.Count == n.Quorum {
		if n.Candidate != "" {
			d.One = candidate(q, n.Candidate)
		} else {
			d.One = Next(q)
		}
		if d.One >= 0 {
			d.Back = q[d.One].Kind != Fair
		}
	}
	for _, w := range q {
		if w.Kind == Multi {
			d.Multi, d.Heard = true, true
			break
		}
	}
	return d
}

// heir returns the index of the waiter of q whose line ID begins with
// name, or -1.
func heir(q []*Waiter, name string) int {
	for i, w := range q {
		if w.ID != "" && strings.HasPrefix(w.ID, name) {
			return i
		}
	}
	return -1
}

// candidate returns the index of the waiter of q a notice that names the
// candidate name wakes: that waiter, when it is here; else, the next
// waiter (Next) among those in no line. A waiter in the line that the
// candidate is not would race the candidate and the releaser for the
// key, and lose to one of them: each release would wake one such waiter
// in every client, and their attempts would split the vote.
func candidate(q []*Waiter, name string) int {
	i := -1
	for j, w := range q {
		switch {
		case w.ID != "" && strings.HasPrefix(w.ID, name):
			return j
		case w.ID == "" && w.Kind != Multi && i < 0:
			i = j
		}
	}
	return i
}

// Next returns the index of the waiter of q that a wake-up of the key
// alone goes to, or -1 when none waits for this key alone: the longest
// waiting, or a waiting writer wherever it stands. The writer's intent
// turns the client's readers away, so a wake-up spent on one of them would
// be lost, and the writer, last in the queue after an attempt it lost,
// might hear none of the release's notices. Multi-key waiters are passed
// over: they hear every notice.
func Next(q []*Waiter) int {
	i := -1
	for j, w := range q {
		switch {
		case w.Kind == Multi:
			continue
		case w.Kind == Writer:
			return j
		case i < 0:
			i = j
		}
	}
	return i
}

// Crossed reports whether d, decided for q, crosses the attempt of
// waiter i of q, one for an earlier notice, about to begin or under way:
// it wakes another waiter of the key alone, whose attempt may meet i's at
// the masters.
func (d Decision) Crossed(q []*Waiter, i int) bool {
	return (q[i].pending || q[i].trying) && d.One >= 0 && d.One != i
}

// Tried tells what w's attempt, made for a notice, hands on as it ends;
// undone: it failed, and some master granted it (or may have: its answer
// was not awaited) before it was rolled back. Such an attempt, after a
// notice woke another waiter of the key meanwhile, wakes the next waiter
// (passOn): what it was granted, undone only now and announced by no
// notice, may be why that other waiter was refused. This happens when
// the notice that woke it came before a quorum of masters ran the release
// and a later notice (the pilot's, the quorum's) woke another: the two
// attempts meet at the pilot, the first holds it while the masters that
// had not yet run the release refuse it, the second is refused there, and
// neither would try again before its timer, with the key free. Only a
// notice's wake crosses an attempt, so each notice hands on one extra
// wake-up at most per attempt it crosses: no chain of attempts passing
// wake-ups on to each other outlives the notices.
//
// An attempt that got the lock, or that every master it asked refused,
// undid nothing another attempt could have met, and wakes nobody. On a
// key other clients keep taking, each notice that wakes a waiter crosses
// the attempts of the client's other waiters under way, nearly all
// refused by the pilot; were those to wake the next as they end, the
// next notice would cross these attempts in turn, and every waiter of the
// client would try at every release.
func Tried(w *Waiter, undone bool) (passOn bool) {
	return w.trying && w.crossed && undone
}

// Leave tells what w, leaving its key's queue, hands on; rest are the
// waiters that stay. acquired: its call got the lock. A waiter woken by a
// notice that gives up without the lock passes the notice on to the next
// waiter (PassOn), and so does a reader that got in, since the next may
// be a reader that can get in too. With nobody left, a notice it gives up
// counts as heard, for the waiter that registers next.
func Leave(w *Waiter, acquired bool, rest []*Waiter) (passOn, heard bool) {
	gaveUp := w.Woken && !acquired
	if len(rest) == 0 {
		return false, gaveUp
	}
	return gaveUp || acquired && w.Kind == Reader, false
}

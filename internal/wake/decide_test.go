package wake

import (
	"slices"
	"strings"
	"testing"
)

// w is a waiter of a rule's queue: its name, kind, arrival (fair) and
// whether a notice woke it before the rule's event.
type w struct {
	name    string
	kind    Kind
	arrival int64
	woken   bool
	// trying: its attempt for a notice is under way; crossed: a notice
	// woke another waiter of the key since its wake-up.
	trying, crossed bool
	id              string // its ID in the key's line, or ""
}

// note is one master's notice: its message and the master that sent it.
type note struct {
	msg  string
	from int
}

// rule is one rule of docs/design.md's "Waiting without polling", "Woken
// waiters ask one master first" and "Fair mode", as a queue, notices heard
// before, and one event: a notice, or a waiter leaving.
type rule struct {
	name    string
	waiters []w
	earlier []note // heard before the waiters registered, from the same release or others
	before  []note // heard after they registered, before the event (hand-overs to one of them)
	pilot   int    // the key's pilot (-1: none)
	asked   int    // the master a piloted attempt asked first (-1: none)
	quorum  int
	notice  *note // the event: a notice; or
	leave   string
	tried   string // or the end of a waiter's attempt
	got     bool   // the leaving waiter's call got the lock
	undone  bool   // the attempt that ended failed, its grants rolled back

	woken   []string // the waiters the event wakes
	crossed []string // the attempts a notice crosses (Decision.Crossed)
	order   []string // the queue after it (nil: as before, less a leaver)
	heard   bool     // the event counts as heard (a waiter registering next retries)
}

var (
	plain = func(name string) w { return w{name: name, kind: Plain} }
	fair  = func(name string, arrival int64) w { return w{name: name, kind: Fair, arrival: arrival} }
	multi = func(name string) w { return w{name: name, kind: Multi} }
	// inLine is a plain waiter in the key's line, whose ID begins with
	// its name.
	inLine = func(name string) w { return w{name: name, kind: Plain, id: name + "-0123-4567"} }
)

var rules = []rule{
	{
		name:    "a hand-over's notices wake nobody before a quorum announced it",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345!hwaiter-b", 0},
	},
	{
		name:    "the hand-over notice that completes a quorum wakes the heir alone, in its place",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		before:  []note{{"tok12345!hwaiter-b", 0}, {"tok12345!hwaiter-b", 1}},
		pilot:   2, asked: -1, quorum: 3,
		notice: &note{"tok12345!hwaiter-b", 2},
		woken:  []string{"waiter-b"}, order: []string{"waiter-a", "waiter-b"},
	},
	{
		name:    "a hand-over notice the same master sent again is one vote",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		before:  []note{{"tok12345!hwaiter-b", 0}, {"tok12345!hwaiter-b", 1}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tokABCDE!hwaiter-b", 1},
	},
	{
		name:    "a hand-over to a waiter of another client wakes nobody here",
		waiters: []w{inLine("waiter-a"), plain("b")},
		earlier: []note{{"tok12345!hwaiter-z", 0}},
		pilot:   -1, asked: -1, quorum: 2,
		notice: &note{"tok12345!hwaiter-z", 1},
	},
	{
		name:    "hand-overs to one waiter count together, whichever release, rollback or leave sent them",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		before:  []note{{"tokAAAAA!hwaiter-b", 0}, {"waiter-z!hwaiter-b", 1}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tokCCCCC!hwaiter-b", 2},
		woken:  []string{"waiter-b"}, order: []string{"waiter-a", "waiter-b"},
	},
	{
		name:    "a hand-over wakes no multi-key waiter",
		waiters: []w{multi("m"), inLine("waiter-b")},
		pilot:   -1, asked: -1, quorum: 1,
		notice: &note{"tok12345!hwaiter-b", 0},
		woken:  []string{"waiter-b"},
	},
	{
		name:    "a candidate's notice wakes the candidate, wherever it stands",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345!cwaiter-b/2", 0},
		woken:  []string{"waiter-b"}, order: []string{"waiter-a", "waiter-b"},
	},
	{
		name:    "a candidate's notice wakes no other waiter in the line, but one in none",
		waiters: []w{inLine("waiter-a"), plain("b"), multi("m")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345!cwaiter-z/2", 0},
		woken:  []string{"b", "m"}, order: []string{"waiter-a", "m", "b"}, heard: true,
	},
	{
		name:    "a candidate's later notice wakes nobody, as a release's",
		waiters: []w{inLine("waiter-a"), inLine("waiter-b")},
		earlier: []note{{"tok12345!cwaiter-b/2", 0}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345!cwaiter-b/2", 1},
	},
	{
		name:    "first notice wakes the longest waiter alone, sent to the back",
		waiters: []w{plain("a"), plain("b"), plain("c")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345/3", 0},
		woken:  []string{"a"}, order: []string{"b", "c", "a"},
	},
	{
		name:    "a later notice that is neither the pilot's, the asked master's nor the quorum's wakes nobody",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 0}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 1},
	},
	{
		name:    "the pilot's notice wakes again when it was not the first",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 0}},
		pilot:   2, asked: -1, quorum: 3,
		notice: &note{"tok12345", 2},
		woken:  []string{"a"}, order: []string{"b", "a"},
	},
	{
		name:    "the pilot's notice wakes once per release",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 2}},
		pilot:   2, asked: -1, quorum: 5,
		notice: &note{"tok12345", 2},
	},
	{
		name:    "the notice that completes a quorum wakes again",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 2}, {"tok12345", 0}},
		pilot:   2, asked: -1, quorum: 3,
		notice: &note{"tok12345", 1},
		woken:  []string{"a"}, order: []string{"b", "a"},
	},
	{
		name:    "notices past the quorum wake nobody",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 0}, {"tok12345", 1}, {"tok12345", 2}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 3},
	},
	{
		name:    "the notice of the master a woken attempt asked first wakes, whoever is the pilot now",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 0}, {"tok12345", 1}, {"tok12345", 3}, {"tok12345", 2}},
		pilot:   2, asked: 4, quorum: 3,
		notice: &note{"tok12345", 4},
		woken:  []string{"a"}, order: []string{"b", "a"},
	},
	{
		name:    "the masters' notices of one release are one release, whatever count each carries",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345/4", 0}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345/2", 1},
	},
	{
		name:    "another release's first notice wakes, told apart by its id",
		waiters: []w{plain("a"), plain("b")},
		earlier: []note{{"tok12345", 0}, {"tok12345", 1}, {"tok12345", 2}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok67890", 3},
		woken:  []string{"a"}, order: []string{"b", "a"},
	},
	{
		name:    "a reentrant owner's last release is told apart by its own id",
		waiters: []w{plain("a"), plain("b")},
		// The owner's previous last release, announced by its own id on
		// every master; the owner's token is the same for both.
		earlier: []note{{"rid-0001", 0}, {"rid-0001", 1}, {"rid-0001", 2}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"rid-0002", 0},
		woken:  []string{"a"}, order: []string{"b", "a"},
	},
	{
		name:  "a notice with no waiter here counts as heard",
		pilot: -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		heard:  true,
	},
	{
		name:    "a waiting writer is woken first, wherever it stands",
		waiters: []w{{name: "r1", kind: Reader}, {name: "r2", kind: Reader}, {name: "w", kind: Writer}, plain("p")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		woken:  []string{"w"}, order: []string{"r1", "r2", "p", "w"},
	},
	{
		name:    "a woken fair waiter keeps its place",
		waiters: []w{fair("f1", 10), fair("f2", 20)},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		woken:  []string{"f1"}, order: []string{"f1", "f2"},
	},
	{
		name:    "fair waiters queue by arrival, not by registration",
		waiters: []w{fair("late", 20), fair("early", 10)},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		woken:  []string{"early"}, order: []string{"early", "late"},
	},
	{
		name:    "a multi-key waiter is woken by every notice of its key, in its place",
		waiters: []w{multi("m"), plain("a")},
		earlier: []note{{"tok12345", 0}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 1},
		woken:  []string{"m"}, order: []string{"m", "a"},
		heard: true,
	},
	{
		name:    "the once-per-notice wake passes over multi-key waiters",
		waiters: []w{multi("m"), plain("a"), plain("b")},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		woken:  []string{"a", "m"}, order: []string{"m", "b", "a"},
		heard: true,
	},
	{
		name:    "a woken waiter that gives up passes the notice on",
		waiters: []w{{name: "a", kind: Plain, woken: true}, plain("b"), plain("c")},
		leave:   "a",
		woken:   []string{"b"}, order: []string{"c", "b"},
	},
	{
		name:    "a waiter not woken gives nothing up",
		waiters: []w{plain("a"), plain("b")},
		leave:   "a",
	},
	{
		name:    "a woken waiter that got the lock passes nothing on",
		waiters: []w{{name: "a", kind: Plain, woken: true}, plain("b")},
		leave:   "a", got: true,
	},
	{
		name:    "a reader that got in passes a wake-up on",
		waiters: []w{{name: "r1", kind: Reader, woken: true}, {name: "r2", kind: Reader}},
		leave:   "r1", got: true,
		woken: []string{"r2"},
	},
	{
		name:    "a notice that wakes another waiter crosses the attempts under way or about to begin",
		waiters: []w{plain("a"), {name: "t", kind: Plain, trying: true}, {name: "p", kind: Plain, woken: true}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 0},
		woken:  []string{"a"}, order: []string{"t", "p", "a"},
		crossed: []string{"p", "t"},
	},
	{
		name:    "a notice that wakes nobody crosses no attempt",
		waiters: []w{plain("a"), {name: "t", kind: Plain, trying: true}},
		earlier: []note{{"tok12345", 0}},
		pilot:   -1, asked: -1, quorum: 3,
		notice: &note{"tok12345", 1},
	},
	{
		name:    "a failed attempt a notice crossed wakes the next waiter",
		waiters: []w{plain("a"), plain("b"), {name: "t", kind: Plain, trying: true, crossed: true}},
		tried:   "t", undone: true,
		woken: []string{"a"}, order: []string{"b", "t", "a"},
	},
	{
		name:    "a crossed attempt that got the lock, or that every master it asked refused, wakes nobody",
		waiters: []w{plain("a"), {name: "t", kind: Plain, trying: true, crossed: true}},
		tried:   "t", undone: false,
	},
	{
		name:    "a failed attempt no notice crossed wakes nobody",
		waiters: []w{plain("a"), {name: "t", kind: Plain, trying: true}},
		tried:   "t", undone: true,
	},
	{
		name:    "a woken waiter that gives up last leaves the notice heard",
		waiters: []w{{name: "a", kind: Plain, woken: true}},
		leave:   "a",
		heard:   true,
	},
}

func TestWake_rules(t *testing.T) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) { r.check(t) })
	}
}

func (r rule) check(t *testing.T) {
	var q Queue
	for _, n := range r.earlier {
		q.Notify(n.msg, n.from, r.pilot, r.quorum)
	}
	byName := map[string]*Waiter{}
	for _, x := range r.waiters {
		wt := q.Add(x.name, make(chan struct{}, 1), x.kind, x.arrival)
		wt.ID = x.id
		wt.Woken, wt.pending = x.woken, x.woken
		wt.trying, wt.crossed = x.trying, x.crossed
		byName[x.name] = wt
	}
	for _, n := range r.before {
		q.Notify(n.msg, n.from, r.pilot, r.quorum)
	}
	if r.notice != nil && r.asked >= 0 {
		q.Asking(r.asked)
	}
	want := r.order
	if want == nil { // as before, less a leaver
		want = slices.DeleteFunc(names(q.waiters), func(n string) bool { return n == r.leave })
	}
	var heard bool
	switch {
	case r.notice != nil:
		heard = q.Notify(r.notice.msg, r.notice.from, r.pilot, r.quorum)
	case r.tried != "":
		q.Tried(byName[r.tried], r.undone)
	default:
		heard = q.Remove(byName[r.leave], r.got)
	}
	var woken []string
	for _, wt := range q.waiters {
		if len(wt.Ch) > 0 {
			woken = append(woken, wt.Key)
		}
		if heir := r.notice != nil && wt.ID != "" && strings.Contains(r.notice.msg, "!h"+wt.ID[:8]) && len(wt.Ch) > 0; wt.Heir != heir {
			t.Errorf("waiter %s: Heir %v, want %v", wt.Key, wt.Heir, heir)
		}
	}
	slices.Sort(woken)
	if !slices.Equal(woken, r.woken) {
		t.Errorf("woken %v, want %v", woken, r.woken)
	}
	if got := names(q.waiters); !slices.Equal(got, want) {
		t.Errorf("queue %v, want %v", got, want)
	}
	if r.notice != nil {
		var crossed []string
		for _, wt := range q.waiters {
			if wt.crossed {
				crossed = append(crossed, wt.Key)
			}
		}
		slices.Sort(crossed)
		if !slices.Equal(crossed, r.crossed) {
			t.Errorf("crossed %v, want %v", crossed, r.crossed)
		}
	}
	if heard != r.heard {
		t.Errorf("heard %v, want %v", heard, r.heard)
	}
}

func names(q []*Waiter) []string {
	var s []string
	for _, w := range q {
		s = append(s, w.Key)
	}
	return s
}

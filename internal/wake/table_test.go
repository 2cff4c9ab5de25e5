package wake

import (
	"slices"
	"testing"
	"time"
)

// A waiter registering is quiet (no second attempt needed) only when its
// key was followed at the generation it read before its first attempt and
// no notice counted as heard came since: a new key, a notice with nobody
// to wake, a multi-key waiter's notice and a notice given up by the last
// waiter each make the next waiter try again.
func TestTable_quietOnlyWhenNothingHeardSinceTheMark(t *testing.T) {
	var tb Table
	ch := func() chan struct{} { return make(chan struct{}, 1) }
	gen := tb.Gen()
	_, quiet := tb.Add("k", ch(), gen, Plain, 0)
	if quiet {
		t.Fatal("a key born after the mark is quiet")
	}
	gen = tb.Gen()
	if _, quiet := tb.Add("k", ch(), gen, Plain, 0); !quiet {
		t.Fatal("a followed key, nothing heard, is not quiet")
	}
	tb.Notify("k", "rel-1", 0, 2, func(string) int { return -1 }) // wakes a
	if _, quiet := tb.Add("k", ch(), gen, Plain, 0); !quiet {
		t.Fatal("a notice that woke a waiter here made the key loud")
	}
	gen = tb.Gen()
	if _, quiet := tb.Add("k", ch(), gen, Multi, 0); !quiet {
		t.Fatal("a followed key is not quiet for a multi-key waiter")
	}
	tb.Notify("k", "rel-1", 1, 2, func(string) int { return -1 })
	if _, quiet := tb.Add("k", ch(), gen, Plain, 0); quiet {
		t.Fatal("a notice a multi-key waiter heard left the key quiet")
	}
	var lone Table
	w, _ := lone.Add("solo", ch(), 0, Plain, 0)
	w.Woken = true
	gen = lone.Gen()
	if idle := lone.Remove(w, false, time.Now(), 4); !idle {
		t.Fatal("the key's last waiter left and it does not linger")
	}
	if _, quiet := lone.Add("solo", ch(), gen, Plain, 0); quiet {
		t.Fatal("a notice the last waiter gave up left the key quiet")
	}
}

// A key whose last waiter left stays followed for the linger time, and is
// dropped after it; beyond maxLinger such keys the one idle longest is
// dropped at once. A waiter registering on a lingering key takes it back.
func TestTable_keysLingerThenExpire(t *testing.T) {
	var tb Table
	t0 := time.Unix(1000, 0)
	const linger = time.Second
	for i, key := range []string{"a", "b", "c"} {
		w, _ := tb.Add(key, make(chan struct{}, 1), 0, Plain, 0)
		tb.Remove(w, true, t0.Add(time.Duration(i)*time.Millisecond), 2)
	}
	if tb.Followed("a") || !tb.Followed("b") || !tb.Followed("c") {
		t.Fatal("beyond maxLinger, the key idle longest was not the one dropped")
	}
	if waited, lingering := tb.Counts(); waited != 0 || lingering != 2 {
		t.Fatalf("counts %d, %d; want 0, 2", waited, lingering)
	}
	tb.Add("c", make(chan struct{}, 1), 0, Plain, 0)
	if !tb.Waiting() {
		t.Fatal("a waiter on a lingering key does not count as waiting")
	}
	if next := tb.NextExpiry(linger); !next.Equal(t0.Add(time.Millisecond + linger)) {
		t.Fatalf("next expiry %v", next)
	}
	if next, dropped := tb.Expire(t0.Add(linger), linger); dropped || next.IsZero() {
		t.Fatalf("expired early: %v %v", next, dropped)
	}
	if next, dropped := tb.Expire(t0.Add(2*linger), linger); !dropped || !next.IsZero() {
		t.Fatalf("not expired: %v %v", next, dropped)
	}
	if tb.Followed("b") || !tb.Followed("c") {
		t.Fatal("expiry dropped the wrong keys")
	}
}

// A release's first notice came before a quorum of masters ran it: the
// attempt it woke (a's) holds the pilot while the others refuse it, and
// the quorum's notice wakes b, whose attempt the pilot refuses for a's
// grant. When a's attempt fails in turn, after b's, its grant undone and
// announced by no notice, it wakes the next waiter of the slot (c): the
// slot does not wait for a timer. An attempt that got the lock, one that
// every master it asked refused (b's), and one that no notice of its key
// crossed, wake nobody.
func TestTable_failedAttemptCrossedByANoticeWakesTheNext(t *testing.T) {
	slots := []string{"s0", "s1"}
	pilot := func(string) int { return 0 }
	const quorum = 3
	type call struct {
		name string
		ch   chan struct{}
		ws   []*Waiter
	}
	setup := func() (*Table, []*call) {
		var tb Table
		var cs []*call
		for _, name := range []string{"a", "b", "c"} {
			c := &call{name: name, ch: make(chan struct{}, 1)}
			for _, key := range slots {
				w, _ := tb.Add(key, c.ch, tb.Gen(), Plain, 0)
				c.ws = append(c.ws, w)
			}
			cs = append(cs, c)
		}
		return &tb, cs
	}
	// take is the call's wake-up taken for an attempt on the slot it was
	// woken for (as a semaphore's waiter does), which begins.
	take := func(t *testing.T, tb *Table, c *call) *Waiter {
		t.Helper()
		select {
		case <-c.ch:
		default:
			t.Fatalf("%s not woken", c.name)
		}
		i := tb.TakeOne(c.ws, 0)
		if i != 0 {
			t.Fatalf("%s woken for slot %d, want 0", c.name, i)
		}
		tb.Trying(c.ws[i])
		return c.ws[i]
	}
	woken := func(cs []*call) []string {
		var s []string
		for _, c := range cs {
			if len(c.ch) > 0 {
				s = append(s, c.name)
			}
		}
		return s
	}

	t.Run("crossed by the quorum's notice, it fails after b: c is woken", func(t *testing.T) {
		tb, cs := setup()
		tb.Notify("s0", "rel-1", 0, quorum, pilot) // first notice, the pilot's: wakes a
		a := take(t, tb, cs[0])
		tb.Notify("s0", "rel-1", 1, quorum, pilot)
		tb.Notify("s0", "rel-1", 2, quorum, pilot) // completes a quorum: wakes b
		b := take(t, tb, cs[1])
		tb.Tried(b, false) // refused at the pilot, which holds a's grant
		if got := woken(cs); len(got) != 0 {
			t.Fatalf("b's failed attempt, crossed by no notice, woke %v", got)
		}
		tb.Tried(a, true) // granted by the pilot, refused by the others: undone
		if got := woken(cs); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("a's failed attempt, crossed by the quorum's notice, woke %v, want [c]", got)
		}
		if i := tb.TakeOne(cs[2].ws, 0); i != 0 {
			t.Fatalf("c woken for slot %d, want 0", i)
		}
		tb.Notify("s0", "rel-1", 3, quorum, pilot)
		tb.Notify("s0", "rel-1", 4, quorum, pilot)
		if got := woken(cs[:2]); len(got) != 0 {
			t.Fatalf("the release's last notices woke %v", got)
		}
	})
	t.Run("crossed after its wake-up, before its attempt began: c is woken", func(t *testing.T) {
		tb, cs := setup()
		tb.Notify("s0", "rel-1", 0, quorum, pilot) // wakes a
		tb.Notify("s0", "rel-1", 1, quorum, pilot)
		tb.Notify("s0", "rel-1", 2, quorum, pilot) // wakes b, a not yet on its way
		a := take(t, tb, cs[0])
		b := take(t, tb, cs[1])
		tb.Tried(b, false)
		tb.Tried(a, true)
		if got := woken(cs); !slices.Equal(got, []string{"c"}) {
			t.Fatalf("woken %v, want [c]", got)
		}
	})
	t.Run("crossed, it gets the lock: nobody is woken", func(t *testing.T) {
		tb, cs := setup()
		tb.Notify("s0", "rel-1", 1, quorum, pilot)
		a := take(t, tb, cs[0])
		tb.Notify("s0", "rel-1", 0, quorum, pilot) // the pilot's: wakes b
		take(t, tb, cs[1])
		tb.Tried(a, false) // it got the lock: nothing undone
		if got := woken(cs); len(got) != 0 {
			t.Fatalf("a's attempt got the lock and woke %v", got)
		}
	})
	t.Run("a wake-up handed on takes no crossing along", func(t *testing.T) {
		tb, cs := setup()
		tb.Notify("s0", "rel-1", 0, quorum, pilot) // wakes a on s0
		tb.Notify("s1", "rel-2", 0, quorum, pilot) // wakes a on s1
		tb.Notify("s1", "rel-2", 1, quorum, pilot)
		tb.Notify("s1", "rel-2", 2, quorum, pilot) // wakes b on s1: crosses a's
		<-cs[0].ch
		if i := tb.TakeOne(cs[0].ws, 0); i != 0 {
			t.Fatalf("a took slot %d, want 0", i) // and hands s1 on, to c
		}
		tb.Trying(cs[0].ws[0])
		<-cs[2].ch
		if i := tb.TakeOne(cs[2].ws, 0); i != 1 {
			t.Fatalf("c took slot %d, want 1", i)
		}
		tb.Trying(cs[2].ws[1])
		tb.Tried(cs[0].ws[0], true)
		tb.Tried(cs[2].ws[1], true)
		if got := woken(cs); !slices.Equal(got, []string{"b"}) {
			t.Fatalf("woken %v, want [b] alone, by s1's quorum notice", got)
		}
	})
	t.Run("no notice of its key crossed it: nobody is woken", func(t *testing.T) {
		tb, cs := setup()
		tb.Notify("s0", "rel-1", 0, quorum, pilot)
		a := take(t, tb, cs[0])
		tb.Notify("s0", "rel-1", 1, quorum, pilot) // wakes nobody
		tb.Notify("s1", "rel-2", 0, quorum, pilot) // another slot's: wakes a, first there
		tb.Tried(a, true)
		if got := woken(cs); !slices.Equal(got, []string{"a"}) {
			t.Fatalf("woken %v, want [a], by slot s1's notice alone", got)
		}
		if i := tb.TakeOne(cs[0].ws, 0); i != 1 {
			t.Fatalf("a woken for slot %d, want 1", i)
		}
	})
}

package wake

import (
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// Attacks on the hand-over notices: a master's message is untrusted.

// ParseHandOver never panics, names at most one waiter in at most 8
// characters, and what it splits off puts the ID back together.
func FuzzAttack_parseHandOver(f *testing.F) {
	for _, s := range []string{"", "!", "!h", "!hx", "abcdefgh!hwaiter-a", "a!c", "a!h12345678", "a!h123456789", "!!h!", "a/3", "\xff!h\xff", "tok!cwaiter/2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		release, heir, candidate := keys.ParseHandOver(id)
		if heir != "" && candidate != "" {
			t.Fatalf("%q names an heir %q and a candidate %q", id, heir, candidate)
		}
		if len(heir) > 8 || len(candidate) > 8 {
			t.Fatalf("%q names %q / %q, over 8 characters", id, heir, candidate)
		}
		switch {
		case heir != "":
			if release+"!h"+heir != id {
				t.Fatalf("%q split into %q and heir %q", id, release, heir)
			}
		case candidate != "":
			if release+"!c"+candidate != id {
				t.Fatalf("%q split into %q and candidate %q", id, release, candidate)
			}
		default:
			if release != id {
				t.Fatalf("%q names nobody but comes back as %q", id, release)
			}
		}
	})
}

// Any notice on a queue of waiters in a line and others never panics, a
// hand-over's notice wakes at most the one waiter it names (and marks no
// other the heir), and no notice marks an heir a waiter it did not wake.
func FuzzAttack_notifyHandOver(f *testing.F) {
	f.Add("tok12345!hwaiter-b", "tok12345!hwaiter-b", 0, 1, 2)
	f.Add("tok12345!cwaiter-a/2", "tok12345!hwaiter-b", 3, 0, 2)
	f.Add("!h", "!hw", 1, 1, 1)
	f.Add("x!h/1", "x!h", 0, 0, 1)
	f.Fuzz(func(t *testing.T, first, msg string, from, pilot, quorum int) {
		if quorum < 1 || quorum > 9 || from < 0 || from > 9 || pilot < -1 || pilot > 9 {
			return
		}
		var q Queue
		ids := []string{"waiter-a-0123", "waiter-b-4567", "wzzzzzzz-89ab", ""}
		kinds := []Kind{Plain, Plain, Plain, Multi}
		for i, id := range ids {
			w := q.Add("k", make(chan struct{}, 1), kinds[i], 0)
			w.ID = id
		}
		q.Notify(first, (from+1)%10, pilot, quorum)
		for _, w := range q.waiters {
			select {
			case <-w.Ch:
			default:
			}
			w.Heir = false
		}
		q.Notify(msg, from, pilot, quorum)
		id, _ := keys.ParseNotice(msg)
		_, heir, _ := keys.ParseHandOver(id)
		woken := 0
		for _, w := range q.waiters {
			got := len(w.Ch) > 0
			if got {
				woken++
			}
			if w.Heir && !got {
				t.Fatalf("%q: %q marked the heir, not woken", msg, w.ID)
			}
			if heir != "" && got && !strings.HasPrefix(w.ID, heir) {
				t.Fatalf("hand-over %q woke %q (kind %v)", msg, w.ID, w.Kind)
			}
		}
		if heir != "" && woken > 1 {
			t.Fatalf("hand-over %q woke %d waiters", msg, woken)
		}
	})
}

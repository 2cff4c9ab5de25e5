package keys_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/keys"
)

// A release notice names its release and, after NoticeSep, a short count;
// anything else a master may send is the release's ID with no count.
func TestParseNotice(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		id   string
		subs int
	}{
		{"abcdefgh/3", "abcdefgh", 3},
		{"abcdefgh/0", "abcdefgh", 0},
		{"abcdefgh", "abcdefgh", 0},         // another kind's notice
		{"a/b/12", "a/b", 12},               // the last separator
		{"abcdefgh/", "abcdefgh/", 0},       // no count
		{"abcdefgh/-1", "abcdefgh/-1", 0},   // not a count
		{"abcdefgh/1e3", "abcdefgh/1e3", 0}, // not decimal
		{"abcdefgh/9999999", "abcdefgh/9999999", 0},
		{"abcdefgh/999999", "abcdefgh", 999999},
		{"", "", 0},
		{"/", "/", 0},
	} {
		id, subs := keys.ParseNotice(tc.msg)
		if id != tc.id || subs != tc.subs {
			t.Errorf("ParseNotice(%q) = %q, %d; want %q, %d", tc.msg, id, subs, tc.id, tc.subs)
		}
	}
}

// A notice of a release with a line names the heir or the candidate
// after HandOverSep; any other release ID names neither and comes back
// whole.
func TestParseHandOver(t *testing.T) {
	for _, tc := range []struct {
		id, release, heir, candidate string
	}{
		{"abcdefgh!hwaiter-a", "abcdefgh", "waiter-a", ""},
		{"abcdefgh!cwaiter-a", "abcdefgh", "", "waiter-a"},
		{"abcdefgh!hw", "abcdefgh", "w", ""},
		{"abcdefgh", "abcdefgh", "", ""},
		{"abcdefgh!h", "abcdefgh!h", "", ""},                 // no name
		{"abcdefgh!xwaiter-a", "abcdefgh!xwaiter-a", "", ""}, // no such mark
		{"abcdefgh!hwaiter-a-too-long", "abcdefgh!hwaiter-a-too-long", "", ""},
		{"!hwaiter-a", "", "waiter-a", ""},
		{"", "", "", ""},
	} {
		release, heir, candidate := keys.ParseHandOver(tc.id)
		if release != tc.release || heir != tc.heir || candidate != tc.candidate {
			t.Errorf("ParseHandOver(%q) = %q, %q, %q; want %q, %q, %q", tc.id, release, heir, candidate, tc.release, tc.heir, tc.candidate)
		}
	}
	// As ParseNotice leaves them: a candidate's notice carries a count.
	id, subs := keys.ParseNotice("abcdefgh!cwaiter-a/2")
	if release, _, candidate := keys.ParseHandOver(id); release != "abcdefgh" || candidate != "waiter-a" || subs != 2 {
		t.Errorf("a candidate's notice read as %q, %q, %d subscribers", release, candidate, subs)
	}
}

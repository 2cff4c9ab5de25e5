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

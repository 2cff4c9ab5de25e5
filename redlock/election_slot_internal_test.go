package redlock

import (
	"errors"
	"testing"
	"time"
)

// With masters that could not be read, Leader says it cannot tell when
// the masters it could not read, with those that agree on a pair (or hold
// a token), might make a quorum: neither "no leader" nor "hand-over",
// which would claim what it did not see.
func TestLeader_unreadMastersMightHideALeader(t *testing.T) {
	rd := func(tok string, term uint64) leaderRead {
		return leaderRead{token: tok, ttl: time.Second, term: term, value: "v" + tok}
	}
	fail := leaderRead{err: &NodeError{Err: ErrMasterTimeout}}
	for _, tc := range []struct {
		name  string
		reads []leaderRead
		err   error
	}{
		{"the leader's key on the unread masters", []leaderRead{rd("x", 7), fail, fail, {}, {}}, ErrMasterTimeout},
		{"the leader's term on the unread masters", []leaderRead{rd("x", 7), rd("x", 7), rd("x", 0), fail, fail}, ErrMasterTimeout},
		{"free, one unread", []leaderRead{{}, {}, {}, {}, fail}, ErrNoLeader},
		{"a minority's holder, one unread", []leaderRead{rd("x", 7), {}, {}, {}, fail}, ErrNoLeader},
		{"a hand-over, one unread", []leaderRead{rd("y", 8), rd("y", 0), rd("y", 0), rd("y", 0), fail}, ErrHandOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := leaderOf("k", tc.reads, 3)
			if !errors.Is(err, tc.err) {
				t.Fatalf("leaderOf: %v; want %v", err, tc.err)
			}
			if tc.err == ErrMasterTimeout && errors.Is(err, ErrNoLeader) {
				t.Fatalf("leaderOf: %v; it did not see that there is no leader", err)
			}
			if tc.err == ErrNoLeader && errors.Is(err, ErrHandOver) {
				t.Fatalf("leaderOf: %v; want no hand-over", err)
			}
		})
	}
}

package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
)

// A cluster member's Inspect routes a script call (Election.Leader's read)
// by its first key, not by the script's text (attack18b).
func TestCluster_inspectRoutesScriptByFirstKey(t *testing.T) {
	const key = "{elect}:lock"
	for _, tc := range []struct {
		c    layout.Command
		want int
	}{
		{layout.Command{Name: "EVAL", Args: []any{"return { 1 }", 2, key, "{elect}:meta"}}, keys.Slot(key)},
		{layout.Command{Name: "eval", Args: []any{"return 1", int64(1), []byte(key)}}, keys.Slot(key)},
		{layout.Command{Name: "EVALSHA", Args: []any{"abc", 1, key}}, keys.Slot(key)},
		{layout.Command{Name: "EVAL", Args: []any{"return 1", 0}}, -1},
		{layout.Command{Name: "EVAL", Args: []any{"return 1", 0, "x"}}, -1},
		{layout.Command{Name: "EVAL", Args: []any{"return 1"}}, -1},
		{layout.Command{Name: "HGETALL", Args: []any{key}}, keys.Slot(key)},
	} {
		if got := inspectSlot(tc.c); got != tc.want {
			t.Errorf("%s %v: slot %d, want %d", tc.c.Name, tc.c.Args, got, tc.want)
		}
	}
}

// With masters that could not be read, Leader says it cannot tell when
// the masters it could not read, with those that agree on a pair (or hold
// a token), might make a quorum: neither "no leader" nor "hand-over",
// which would claim what it did not see (attack18b).
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

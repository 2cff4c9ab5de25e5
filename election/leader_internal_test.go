package election

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/redlock"
)

var free = redlock.MasterState{State: layout.State{Kind: layout.KindFree}}

// held is a master that holds tok for a second, with term recorded beside
// it (0: none) and value as its metadata.
func held(tok string, term uint64, value string) redlock.MasterState {
	h := layout.Holder{Mode: layout.ModeExclusive, Token: tok, TTL: time.Second, Fence: term, Meta: value}
	return redlock.MasterState{State: layout.State{Kind: layout.KindLock, TTL: h.TTL, Holders: []layout.Holder{h}}}
}

// leaderOf reports a (value, term) pair only when a quorum agrees on the
// token and the term; a quorum holding a token without a quorum on its term
// is a hand-over, never the old term.
func TestLeaderOf_pairsOnlyWhatAQuorumAgreesOn(t *testing.T) {
	rd := func(tok string, term uint64, v string) redlock.MasterState {
		return held(tok, term, v)
	}
	fail := redlock.MasterState{Err: &redlock.NodeError{Err: redlock.ErrMasterTimeout}}
	for _, tc := range []struct {
		name  string
		reads []redlock.MasterState
		want  Leader
		err   error
	}{
		{"settled", []redlock.MasterState{rd("x", 7, "vx"), rd("x", 7, "vx"), rd("x", 7, "vx"), free, fail}, Leader{Value: "vx", Term: 7, TTL: time.Second}, nil},
		{"new holder, term on a minority", []redlock.MasterState{rd("y", 8, "vy"), rd("y", 0, "vy"), rd("y", 0, "vy"), rd("x", 7, "vx"), rd("x", 7, "vx")}, Leader{}, ErrHandOver},
		{"holder on a minority", []redlock.MasterState{rd("y", 8, "vy"), rd("y", 8, "vy"), rd("x", 7, "vx"), free, free}, Leader{}, ErrNoLeader},
		{"terms disagree", []redlock.MasterState{rd("x", 7, "vx"), rd("x", 7, "vx"), rd("x", 9, "vx"), rd("x", 9, "vx"), free}, Leader{}, ErrHandOver},
		{"free", []redlock.MasterState{free, free, free, free, free}, Leader{}, ErrNoLeader},
		{"too many failures", []redlock.MasterState{rd("x", 7, "vx"), rd("x", 7, "vx"), fail, fail, fail}, Leader{}, redlock.ErrMasterTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaderOf("k", tc.reads, 3)
			if got != tc.want || (tc.err == nil) != (err == nil) || tc.err != nil && !errors.Is(err, tc.err) {
				t.Fatalf("leaderOf = %+v, %v; want %+v, %v", got, err, tc.want, tc.err)
			}
			if errors.Is(err, ErrHandOver) && !errors.Is(err, ErrNoLeader) {
				t.Fatal("ErrHandOver does not match ErrNoLeader")
			}
		})
	}
}

// With masters that could not be read, Leader says it cannot tell when
// the masters it could not read, with those that agree on a pair (or hold
// a token), might make a quorum: neither "no leader" nor "hand-over",
// which would claim what it did not see.
func TestLeader_unreadMastersMightHideALeader(t *testing.T) {
	rd := func(tok string, term uint64) redlock.MasterState {
		return held(tok, term, "v"+tok)
	}
	fail := redlock.MasterState{Err: &redlock.NodeError{Err: redlock.ErrMasterTimeout}}
	for _, tc := range []struct {
		name  string
		reads []redlock.MasterState
		err   error
	}{
		{"the leader's key on the unread masters", []redlock.MasterState{rd("x", 7), fail, fail, free, free}, redlock.ErrMasterTimeout},
		{"the leader's term on the unread masters", []redlock.MasterState{rd("x", 7), rd("x", 7), rd("x", 0), fail, fail}, redlock.ErrMasterTimeout},
		{"free, one unread", []redlock.MasterState{free, free, free, free, fail}, ErrNoLeader},
		{"a minority's holder, one unread", []redlock.MasterState{rd("x", 7), free, free, free, fail}, ErrNoLeader},
		{"a hand-over, one unread", []redlock.MasterState{rd("y", 8), rd("y", 0), rd("y", 0), rd("y", 0), fail}, ErrHandOver},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := leaderOf("k", tc.reads, 3)
			if !errors.Is(err, tc.err) {
				t.Fatalf("leaderOf: %v; want %v", err, tc.err)
			}
			if tc.err == redlock.ErrMasterTimeout && errors.Is(err, ErrNoLeader) {
				t.Fatalf("leaderOf: %v; it did not see that there is no leader", err)
			}
			if tc.err == ErrNoLeader && errors.Is(err, ErrHandOver) {
				t.Fatalf("leaderOf: %v; want no hand-over", err)
			}
		})
	}
}

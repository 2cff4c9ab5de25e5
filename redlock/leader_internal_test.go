package redlock

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/layout"
)

// leaderOf reports a (value, term) pair only when a quorum agrees on the
// token and the term; a quorum holding a token without a quorum on its term
// is a hand-over, never the old term.
func TestLeaderOf_pairsOnlyWhatAQuorumAgreesOn(t *testing.T) {
	rd := func(tok string, term uint64, v string) leaderRead {
		return leaderRead{token: tok, ttl: time.Second, term: term, value: v}
	}
	fail := leaderRead{err: &NodeError{Err: ErrMasterTimeout}}
	for _, tc := range []struct {
		name  string
		reads []leaderRead
		want  Leader
		err   error
	}{
		{"settled", []leaderRead{rd("x", 7, "vx"), rd("x", 7, "vx"), rd("x", 7, "vx"), {}, fail}, Leader{Value: "vx", Term: 7, TTL: time.Second}, nil},
		{"new holder, term on a minority", []leaderRead{rd("y", 8, "vy"), rd("y", 0, "vy"), rd("y", 0, "vy"), rd("x", 7, "vx"), rd("x", 7, "vx")}, Leader{}, ErrHandOver},
		{"holder on a minority", []leaderRead{rd("y", 8, "vy"), rd("y", 8, "vy"), rd("x", 7, "vx"), {}, {}}, Leader{}, ErrNoLeader},
		{"terms disagree", []leaderRead{rd("x", 7, "vx"), rd("x", 7, "vx"), rd("x", 9, "vx"), rd("x", 9, "vx"), {}}, Leader{}, ErrHandOver},
		{"free", []leaderRead{{}, {}, {}, {}, {}}, Leader{}, ErrNoLeader},
		{"too many failures", []leaderRead{rd("x", 7, "vx"), rd("x", 7, "vx"), fail, fail, fail}, Leader{}, ErrMasterTimeout},
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

// A leader read's reply is untrusted: anything but the script's shapes
// within its bounds is malformed, never a panic.
func TestParseLeaderRead_refusesWhatTheScriptNeverSends(t *testing.T) {
	long := func(n int) []byte { return make([]byte, n) }
	ok := []any{[]byte("tok"), int64(1500), []byte("42"), []byte("v")}
	if lr, err := parseLeaderRead(ok); err != nil || lr != (leaderRead{token: "tok", ttl: 1500 * time.Millisecond, term: 42, value: "v"}) {
		t.Fatalf("parse = %+v, %v", lr, err)
	}
	if lr, err := parseLeaderRead([]any{}); err != nil || lr.token != "" {
		t.Fatalf("parse of {} = %+v, %v", lr, err)
	}
	if lr, err := parseLeaderRead([]any{"tok", int64(-1), nil, nil}); err != nil || lr.ttl != layout.NoExpiry || lr.term != 0 {
		t.Fatalf("parse of a key without TTL = %+v, %v", lr, err)
	}
	for _, v := range []any{
		nil, int64(1), "x", []any{[]byte("tok")},
		[]any{nil, int64(1), nil, nil},
		[]any{[]byte(""), int64(1), nil, nil},
		[]any{long(maxToken + 1), int64(1), nil, nil},
		[]any{[]byte("tok"), "1", nil, nil},
		[]any{[]byte("tok"), int64(-3), nil, nil},
		[]any{[]byte("tok"), int64(1), []byte("0"), nil},
		[]any{[]byte("tok"), int64(1), []byte("007"), nil},
		[]any{[]byte("tok"), int64(1), []byte("-1"), nil},
		[]any{[]byte("tok"), int64(1), []byte("9007199254740992"), nil},
		[]any{[]byte("tok"), int64(1), []byte("99999999999999999999999"), nil},
		[]any{[]byte("tok"), int64(1), int64(5), nil},
		[]any{[]byte("tok"), int64(1), nil, long(layout.MaxMeta + 1)},
		[]any{[]byte("tok"), int64(1), nil, []any{}},
		errors.New("ERR boom"),
	} {
		if lr, err := parseLeaderRead(v); err == nil {
			t.Errorf("parse(%v) = %+v, want an error", v, lr)
		}
	}
}

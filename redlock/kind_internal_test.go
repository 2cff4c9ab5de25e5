package redlock

import (
	"fmt"
	"testing"

	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Every kind sends, per phase, exactly the command below: the table is
// what the lock kinds sent before they became types (the tag and its
// switches), so the refactor cannot change a byte on the wire, and a new
// kind adds its rows here.
func TestKind_commandsPerPhase(t *testing.T) {
	fair := &fairness{queue: "k:q", deadlines: "k:d", waiter: "W", arrival: 7, entryTTLms: 500}
	writer := &writeKind{writer: "W", intentMS: 300}
	multi := &multiKind{ks: []string{"a", "b"}}
	re := &reentrantKind{owner: "O", hold: "H", count: 2}
	last := re.forRelease().(*reentrantKind)
	fence := &fencing{counter: FenceKey("k")}
	ch := wakeChannel("k")
	type row struct {
		name   string
		k      kind
		fence  *fencing
		op     opKind
		script *scripts.Script // nil: a plain command
		args   []any
	}
	rows := []row{
		{"plain", plainKind{}, nil, opAcquire, nil, []any{"k", "tok", "NX", "PX", int64(1000)}},
		{"plain", plainKind{}, fence, opAcquire, scripts.FencedAcquire, []any{"k", FenceKey("k"), "tok", int64(1000)}},
		{"plain", plainKind{}, nil, opExtend, scripts.Extend, []any{"k", "tok", int64(1000)}},
		{"plain", plainKind{}, nil, opRelease, scripts.Release, []any{"k", "tok", ch}},
		{"plain", plainKind{}, nil, opRollback, scripts.Release, []any{"k", "tok", ""}},
		{"plain waiting", plainKind{waiting: true}, nil, opAcquire, scripts.WaitAcquire, []any{"k", "tok", int64(1000)}},
		{"plain waiting", plainKind{waiting: true}, fence, opAcquire, scripts.FencedAcquire, []any{"k", FenceKey("k"), "tok", int64(1000)}},
		{"plain waiting", plainKind{waiting: true}, nil, opRelease, scripts.Release, []any{"k", "tok", ch}},
		{"fair", fair, nil, opAcquire, scripts.FairAcquire, []any{"k", "k:q", "k:d", "tok", int64(1000), "W", int64(7), int64(500)}},
		{"fair", fair, fence, opAcquire, scripts.FairFencedAcquire, []any{"k", "k:q", "k:d", FenceKey("k"), "tok", int64(1000), "W", int64(7), int64(500)}},
		{"fair", fair, nil, opExtend, scripts.Extend, []any{"k", "tok", int64(1000)}},
		{"fair", fair, nil, opRelease, scripts.FairRelease, []any{"k", "k:q", "k:d", "tok", ch, "W"}},
		{"fair", fair, nil, opRollback, scripts.Release, []any{"k", "tok", ""}},
		{"fair", fair, nil, opLeave, scripts.Leave, []any{"k:q", "k:d", "k", "W", ch}},
		{"read", readKind{}, nil, opAcquire, scripts.RW, []any{"k", "read", "tok", int64(1000), int64(0), ""}},
		{"read", readKind{}, nil, opExtend, scripts.RW, []any{"k", "extend-read", "tok", int64(1000)}},
		{"read", readKind{}, nil, opRelease, scripts.RW, []any{"k", "release-read", "tok", ch}},
		{"read", readKind{}, nil, opRollback, scripts.RW, []any{"k", "release-read", "tok", ""}},
		{"write", writer, nil, opAcquire, scripts.RW, []any{"k", "write", "tok", int64(1000), int64(300), "W"}},
		{"write", writer, nil, opExtend, scripts.RW, []any{"k", "extend-write", "tok", int64(1000)}},
		{"write", writer, nil, opRelease, scripts.RW, []any{"k", "release-write", "tok", ch, "W"}},
		{"write", writer, nil, opRollback, scripts.RW, []any{"k", "release-write", "tok", ""}},
		{"write", writer, nil, opLeave, scripts.RW, []any{"k", "leave", "W", ch}},
		{"multi", multi, nil, opAcquire, scripts.Multi, []any{"a", "b", "acquire", "tok", int64(1000)}},
		{"multi", multi, nil, opExtend, scripts.Multi, []any{"a", "b", "extend", "tok", int64(1000)}},
		{"multi", multi, nil, opRelease, scripts.Multi, []any{"a", "b", "release", "tok", wakePrefix}},
		{"multi", multi, nil, opRollback, scripts.Multi, []any{"a", "b", "release", "tok", ""}},
		{"reentrant", re, nil, opAcquire, scripts.Reentrant, []any{"k", "acquire", "tok", int64(1000), int64(2), "H"}},
		{"reentrant", re, nil, opExtend, scripts.Reentrant, []any{"k", "extend", "tok", int64(1000), "H"}},
		{"reentrant", re, nil, opRelease, scripts.Reentrant, []any{"k", "release", "tok", int64(2), "", "", "H"}},
		{"reentrant last", last, nil, opRelease, scripts.Reentrant, []any{"k", "release", "tok", int64(0), ch, last.releaseID, "H"}},
		{"reentrant", re, nil, opRollback, scripts.Reentrant, []any{"k", "release", "tok", 0, "", "", "H"}},
		{"commit", plainKind{}, &fencing{counter: FenceKey("k"), arg: "9"}, opCommit, scripts.FenceCommit, []any{"k", FenceKey("k"), "tok", "9"}},
		// A lock with metadata commits as before; an election's commit also records the term.
		{"meta commit", &metaKind{kind: plainKind{}, meta: &holderMeta{key: "k:meta", value: "v"}},
			&fencing{counter: FenceKey("k"), arg: "9"}, opCommit, scripts.FenceCommit, []any{"k", FenceKey("k"), "tok", "9"}},
		{"election commit", &metaKind{kind: plainKind{}, meta: &holderMeta{key: "k:meta", term: true}},
			&fencing{counter: FenceKey("k"), arg: "9"}, opCommit, scripts.FenceCommitTerm, []any{"k", FenceKey("k"), "k:meta", "tok", "9"}},
	}
	for _, tc := range rows {
		r := &round{key: "k", token: "tok", ttlMS: 1000, k: tc.k, fence: tc.fence}
		script, cmd, args := r.command(tc.op, nil)
		if script != tc.script {
			t.Errorf("%s %v: script %v, want %v", tc.name, tc.op, scriptName(script), scriptName(tc.script))
		}
		if script == nil && cmd != "SET" {
			t.Errorf("%s %v: command %q, want SET", tc.name, tc.op, cmd)
		}
		if got, want := fmt.Sprintf("%#v", args), fmt.Sprintf("%#v", tc.args); got != want {
			t.Errorf("%s %v: args\n%s\nwant\n%s", tc.name, tc.op, got, want)
		}
	}
	if last.releaseID == "" || last.count != 0 || re.count != 2 {
		t.Errorf("the last release: count %d, id %q; the hold's count %d (must stay 2)", last.count, last.releaseID, re.count)
	}
}

// Every attempt at a first reentrant hold has a hold id of its own, which
// the hold's later rounds (taking it again, giving holds back, the last
// release) keep; other kinds are their own for every attempt.
func TestKind_reentrantAttemptsHaveTheirOwnHoldID(t *testing.T) {
	k := kind(&metaKind{kind: &reentrantKind{owner: "O", count: 1, ids: newHoldIDs(nil)}, meta: &holderMeta{key: "k:meta", value: "v"}})
	hold := func(k kind) string { return k.(*metaKind).kind.(*reentrantKind).hold }
	a, b := kindForAttempt(k), kindForAttempt(k)
	if hold(a) == "" || hold(b) == "" || hold(a) == hold(b) || hold(k) != "" {
		t.Fatalf("hold ids of two attempts: %q and %q (the kind's own: %q)", hold(a), hold(b), hold(k))
	}
	again := mapKind(a, func(k kind) kind { return k.(*reentrantKind).withCount(3) })
	if hold(again) != hold(a) || hold(a.forRelease()) != hold(a) {
		t.Errorf("the hold's rounds: %q, %q; want %q", hold(again), hold(a.forRelease()), hold(a))
	}
	if p := kindForAttempt(plainKind{}); p != (plainKind{}) {
		t.Errorf("a plain attempt's kind: %#v", p)
	}
	if w := kind(&writeKind{writer: "W"}); kindForAttempt(w) != w {
		t.Errorf("a writer's attempt has a kind of its own")
	}
}

// What the machinery asks of each kind besides its commands.
func TestKind_traits(t *testing.T) {
	fair := &fairness{waiter: "W"}
	writer := &writeKind{writer: "W"}
	re := &reentrantKind{owner: "O", count: 1}
	multi := &multiKind{ks: []string{"a", "b"}}
	for _, tc := range []struct {
		name                                                   string
		k                                                      kind
		holder                                                 string
		leaves, shared, queued, oneToken, renews, partial, rel bool
		keys                                                   int
	}{
		{"plain", plainKind{}, "", false, false, false, false, false, false, false, 1},
		{"fair", fair, "f:W", true, false, true, false, false, false, false, 1},
		{"read", readKind{}, "", false, true, false, false, true, false, false, 1},
		{"write", writer, "w:W", true, false, false, false, true, false, false, 1},
		{"multi", multi, "", false, false, false, false, false, false, false, 2},
		{"reentrant", re, "", false, false, false, true, true, true, true, 1},
	} {
		k := tc.k
		got := fmt.Sprint(k.holder(), k.leaves(), k.shared(), k.queued(), k.oneToken(), k.renews(), k.partial(), k.forRelease() != nil, len(k.keys("k")))
		want := fmt.Sprint(tc.holder, tc.leaves, tc.shared, tc.queued, tc.oneToken, tc.renews, tc.partial, tc.rel, tc.keys)
		if got != want {
			t.Errorf("%s: holder, leaves, shared, queued, oneToken, renews, partial, forRelease, keys = %s, want %s", tc.name, got, want)
		}
	}
	if re.token(nil) != "O" {
		t.Errorf("reentrant token %q, want its owner", re.token(nil))
	}
	if a, b := (plainKind{}).token(nil), (plainKind{}).token(nil); a == b || a == "" {
		t.Errorf("plain tokens %q, %q: want fresh ones", a, b)
	}
}

func scriptName(s *scripts.Script) string {
	if s == nil {
		return "<nil>"
	}
	return s.Name()
}

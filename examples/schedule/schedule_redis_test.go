package main

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

// Three replicas as separate processes on three real masters: one is
// frozen while it runs a slot and a master is killed. Read from the store
// itself, not from the scenario's verdict: every slot from the first to the
// last committed has exactly one commit, the frozen slot's by another
// replica, and the woken replica's write was refused by the fence.
func TestSchedule_eachSlotCommittedOnceDespiteAFrozenReplicaAndAKilledMaster(t *testing.T) {
	redistest.SkipShort(t)
	runScenario(t, func() {})
}

// The replicas started after the first two timers of a slot fired and
// before the third one's (300 ms late) did: the third replica's schedule
// starts with that slot, the other two's with the next one. The replica
// frozen is one running a slot the others attend too, so another one
// commits it (frozen in the third replica's first slot, nobody would).
func TestSchedule_frozenSlotCommittedByAnotherWhenReplicasStartBetweenTimers(t *testing.T) {
	redistest.SkipShort(t)
	// Start the replicas 155 ms into a slot, just after the second
	// replica's timer (150 ms): each takes tens of milliseconds to start
	// and reads the clock before the third one's timer (300 ms) fires,
	// unless the machine is slow enough that it does not.
	res := runScenario(t, func() {
		now := time.Now()
		at := now.Truncate(period).Add(155 * time.Millisecond)
		if !at.After(now) {
			at = at.Add(period)
		}
		time.Sleep(time.Until(at)) // the subject: an instant of the schedule, not a guessed time
	})
	if res.Firsts["c"] == res.Firsts["a"] {
		t.Skipf("the replicas started after the third timer fired (first slots %v): the case was not reached", res.Firsts)
	}
}

// runScenario runs the scenario on four fresh servers, calling before
// just before it starts the replicas, and checks the store.
func runScenario(t *testing.T, before func()) Result {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	servers := redistest.Start(t, 4)
	env := scenarioEnv{exe: exe, data: servers[3].Addr(), kill: servers[0].Kill}
	for _, s := range servers[:3] {
		env.lock = append(env.lock, s.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	var out bytes.Buffer
	before()
	res, err := scenario(ctx, &out, env)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	st, err := newStore(env.data)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	commits, err := st.commits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	first, last := int64(-1), int64(-1)
	for _, c := range commits {
		slot, err := strconv.ParseInt(c[0], 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if by, ok := seen[slot]; ok {
			t.Errorf("slot %d committed twice: by %s and by %s", slot, by, c[1])
		}
		seen[slot] = c[1]
		if first < 0 || slot < first {
			first = slot
		}
		last = max(last, slot)
	}
	for s := first; s <= last; s++ {
		if _, ok := seen[s]; !ok {
			t.Errorf("slot %d never committed", s)
		}
	}
	if last-first < 2 {
		t.Errorf("only slots %d to %d committed", first, last)
	}
	if by := seen[res.Frozen]; by == "" || by == res.FrozenName {
		t.Errorf("the frozen slot %d was committed by %q, frozen replica %q", res.Frozen, by, res.FrozenName)
	}
	if n, err := st.staleRefused(ctx); err != nil || n < 1 {
		t.Errorf("writes refused for a stale fence: %d, %v; want the woken replica's", n, err)
	}
	t.Logf("slots %d..%d, %d commits, frozen %s in slot %d\n%s", first, last, len(commits), res.FrozenName, res.Frozen, out.String())
	return res
}

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
}

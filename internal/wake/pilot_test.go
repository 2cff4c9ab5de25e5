package wake

import (
	"fmt"
	"hash/fnv"
	"slices"
	"testing"
)

// The pilot's hash is FNV-1a, as hash/fnv's: processes of this version and
// of earlier ones name the same pilot for a key.
func TestPilot_hashIsHashFNV(t *testing.T) {
	for _, s := range []string{"", "a", "lead:same:1", "0123456789abcdef0123456789abcdef01234567", "\xff\x00é"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := fnv64a(fnvOffset, s), h.Sum64(); got != want {
			t.Errorf("fnv64a(%q) = %x, hash/fnv says %x", s, got, want)
		}
		if got, want := fnv64aBytes(fnvOffset, []byte(s)), h.Sum64(); got != want {
			t.Errorf("fnv64aBytes(%q) = %x, hash/fnv says %x", s, got, want)
		}
	}
}

// Two processes that list the same masters in other orders name the same
// pilot for every key; a master passed over gives its keys to others and
// takes back none of theirs; with fewer than two masters, or all passed
// over, there is none.
func TestPilot_sameMasterWhateverTheOrder(t *testing.T) {
	ids := []string{"run-a", "run-b", "run-c", "run-d", "run-e"}
	rev := slices.Clone(ids)
	slices.Reverse(rev)
	none := func(int) bool { return false }
	count := make([]int, len(ids))
	for i := 0; i < 500; i++ {
		key := fmt.Sprintf("k%d", i)
		p := Pilot(key, ids, len(ids), none)
		if q := Pilot(key, rev, len(rev), none); rev[q] != ids[p] {
			t.Fatalf("%s: pilot %s in one order, %s in the other", key, ids[p], rev[q])
		}
		count[p]++
		skip := func(i int) bool { return i == 0 }
		if s := Pilot(key, ids, len(ids), skip); s == 0 || p != 0 && s != p {
			t.Fatalf("%s: pilot %d, %d with master 0 passed over", key, p, s)
		}
	}
	for i, n := range count {
		if n < 50 {
			t.Errorf("master %d pilots %d of 500 keys, want about 100", i, n)
		}
	}
	if p := Pilot("k", ids[:1], 1, none); p != -1 {
		t.Errorf("one master: pilot %d, want none", p)
	}
	if p := Pilot("k", ids, len(ids), func(int) bool { return true }); p != -1 {
		t.Errorf("every master passed over: pilot %d, want none", p)
	}
	if p := Pilot("k", nil, 3, none); p < 0 || p > 2 {
		t.Errorf("positions for run_ids: pilot %d", p)
	}
	if n := testing.AllocsPerRun(100, func() { Pilot("k", nil, 3, none) }); n != 0 {
		t.Errorf("Pilot allocates %v times a call, want 0", n)
	}
}

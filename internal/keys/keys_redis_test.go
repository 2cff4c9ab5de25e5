package keys

import (
	"testing"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestCompanion(t *testing.T) {
	for _, tc := range []struct{ key, want string }{
		{"orders", "{orders}:x"},
		{"{user1}:orders", "{user1}:orders:x"},
		{"a{b}c", "a{b}c:x"},
		{"a{b", "{a{b}:x"},
		{"with space", "{with space}:x"},
	} {
		if got := Companion(tc.key, ":x"); got != tc.want {
			t.Errorf("Companion(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestSlot_matchesRedis(t *testing.T) {
	node := redistest.StartOne(t, redistest.WithConfig("cluster-enabled", "yes"))
	for _, k := range []string{"", "a", "foo", "123456789", "{user1000}.following", "{user1000}.followers",
		"foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}x", "a{b", "héllo", "\x00\xff binary"} {
		want, err := redis.Int(node.Do("CLUSTER", "KEYSLOT", k))
		if err != nil {
			t.Fatal(err)
		}
		if got := Slot(k); got != want {
			t.Errorf("Slot(%q) = %d, Redis says %d", k, got, want)
		}
	}
}

// FuzzCompanion: a companion key shares its key's hash slot whenever a
// tag can say so (see Companion), and slots stay in range.
func FuzzCompanion(f *testing.F) {
	for _, k := range []string{"a", "{a}b", "{}x", "a{b", "}{", "{{a}}", "\xff"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		s := Slot(key)
		if s < 0 || s >= 16384 {
			t.Fatalf("Slot(%q) = %d", key, s)
		}
		comp := Companion(key, ":fence")
		if shares := Slot(comp) == s; SharesSlot(key) && !shares {
			t.Fatalf("Companion(%q) = %q in slot %d, the key in %d", key, comp, Slot(comp), s)
		}
	})
}

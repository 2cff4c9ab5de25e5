package scripts_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Heal sets the key only where it is absent, raises the counter (never
// lowers it) and writes the metadata and term beside the holder; it
// leaves another holder's key, and a key of another kind, alone.
func TestHeal_setsOnlyWhereAbsentAndNeverLowersTheCounter(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	heal := func(token, fence, mode string) int {
		t.Helper()
		n, err := redis.Int(redigot.Do(scripts.Heal, c, timeout, "k", "{k}:fence", "{k}:meta", token, 5000, fence, mode, "v"))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if _, err := c.Do("SET", "{k}:fence", "12"); err != nil {
		t.Fatal(err)
	}
	if n := heal("me", "9", "2"); n != 1 {
		t.Fatalf("heal of an absent key = %d", n)
	}
	if v, _ := redis.String(c.Do("GET", "k")); v != "me" {
		t.Errorf("GET k = %q", v)
	}
	if v, _ := redis.String(c.Do("GET", "{k}:fence")); v != "12" {
		t.Errorf("counter lowered to %q", v)
	}
	if m, _ := redis.StringMap(c.Do("HGETALL", "{k}:meta")); m["me"] != "v" || m["term:me"] != "9" {
		t.Errorf("metadata %v", m)
	}
	if p, _ := redis.Int(c.Do("PTTL", "{k}:meta")); p <= 0 || p > 5000 {
		t.Errorf("metadata PTTL %d", p)
	}
	if n := heal("me", "9", "2"); n != 1 {
		t.Errorf("heal where it holds already = %d", n)
	}
	if n := heal("other", "99", "0"); n != 0 {
		t.Errorf("heal over another holder = %d", n)
	}
	if v, _ := redis.String(c.Do("GET", "{k}:fence")); v != "12" {
		t.Errorf("a refused heal changed the counter to %q", v)
	}
	if _, err := c.Do("DEL", "k"); err != nil {
		t.Fatal(err)
	}
	if n := heal("me", "130", "0"); n != 1 {
		t.Fatal("heal after a flush refused")
	}
	if v, _ := redis.String(c.Do("GET", "{k}:fence")); v != "130" {
		t.Errorf("counter %q, want raised to 130", v)
	}
	if _, err := c.Do("DEL", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("HSET", "k", "owner", "1"); err != nil {
		t.Fatal(err)
	}
	if n := heal("me", "0", "0"); n != 0 {
		t.Errorf("heal over a key of another kind = %d", n)
	}
}

package scripts_test

import (
	"testing"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// A fair waiter's leave, and a fair release that deletes nothing,
// announce themselves only when the lock is free and a waiter remains:
// the waiter first now may sleep, as nothing told it the key was free.
// The previous version's leave (two keys, never announced) and release
// (announced only when it deletes) act on the queue as before, beside
// this version's fair scripts.
func TestLeave_firstWaiterAnnouncesAFreeKey(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	sub := conn(t, srv)
	psc := redis.PubSubConn{Conn: sub}
	if err := psc.Subscribe("ch"); err != nil {
		t.Fatal(err)
	}
	if _, ok := psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	queue := func(waiters ...string) {
		t.Helper()
		for i, w := range waiters {
			// Refused (held) or granted, the waiter is queued at its arrival.
			if _, err := redigot.Do(scripts.FairAcquire, c, timeout, "lock", "q", "d", "tok-"+w, 30000, w, i+1, 30000); err != nil {
				t.Fatal(err)
			}
		}
	}
	leave := func(s *scripts.Script, w string) int {
		t.Helper()
		args := []any{"q", "d", w}
		if s == scripts.Leave {
			args = []any{"q", "d", "lock", w, "ch"}
		}
		n, err := redis.Int(redigot.Do(s, c, timeout, args...))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	notice := func() string {
		t.Helper()
		// A PING marks the end of what the leave may have published.
		if err := psc.Ping("end"); err != nil {
			t.Fatal(err)
		}
		got := ""
		for {
			switch m := psc.ReceiveWithTimeout(timeout).(type) {
			case redis.Message:
				got = string(m.Data)
			case redis.Pong:
				return got
			case error:
				t.Fatal(m)
			}
		}
	}
	hold := func() {
		t.Helper()
		if _, err := c.Do("SET", "lock", "other", "PX", 30000); err != nil {
			t.Fatal(err)
		}
	}
	free := func() {
		t.Helper()
		if _, err := c.Do("DEL", "lock", "q", "d"); err != nil {
			t.Fatal(err)
		}
	}

	hold()
	queue("waiter-a", "waiter-b")
	if _, err := c.Do("DEL", "lock"); err != nil { // expired, unannounced
		t.Fatal(err)
	}
	if leave(scripts.Leave, "waiter-b") != 1 || notice() != "waiter-b"[:8] {
		t.Fatal("the second waiter's leave of a free key: not queued, or not announced (the first may sleep)")
	}
	queue("waiter-b")
	if leave(scripts.Leave, "waiter-a") != 1 {
		t.Fatal("the first waiter was not queued")
	}
	if got := notice(); got != "waiter-a"[:8] {
		t.Fatalf("the first waiter's leave of a free key announced %q, want %q", got, "waiter-a"[:8])
	}
	if leave(scripts.Leave, "waiter-b") != 1 || notice() != "" {
		t.Fatal("the last waiter's leave: not queued, or announced with nobody left")
	}
	if leave(scripts.Leave, "waiter-b") != 0 {
		t.Fatal("a waiter not queued left")
	}

	free()
	hold()
	queue("waiter-a", "waiter-b")
	if leave(scripts.Leave, "waiter-a") != 1 || notice() != "" {
		t.Fatal("the first waiter's leave of a held key: not queued, or announced")
	}

	free()
	hold()
	queue("waiter-a", "waiter-b")
	if _, err := c.Do("DEL", "lock"); err != nil {
		t.Fatal(err)
	}
	if leave(scripts.PreviousLeave, "waiter-a") != 1 || notice() != "" {
		t.Fatal("the previous version's leave: not queued, or announced")
	}
	// waiter-b is first now: its next attempt gets the key.
	if n, err := redis.Int(redigot.Do(scripts.FairAcquire, c, timeout, "lock", "q", "d", "tok-b", 30000, "waiter-b", 2, 30000)); err != nil || n != 1 {
		t.Fatalf("after the previous version's leave the next waiter got %d, %v", n, err)
	}

	// A fair release after the holder's key expired deletes nothing, takes
	// the holder's entry out, and announces the free key to the waiter
	// left; the previous version's release takes the entry out, silently.
	release := func(s *scripts.Script, tok, w string) int {
		t.Helper()
		n, err := redis.Int(redigot.Do(s, c, timeout, "lock", "q", "d", tok, "ch", w))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, s := range []*scripts.Script{scripts.FairRelease, scripts.PreviousFairRelease} {
		free()
		queue("holder", "waiter-b") // the holder, first, gets the key
		if _, err := c.Do("DEL", "lock"); err != nil {
			t.Fatal(err)
		}
		want := "tok-hold"
		if s == scripts.PreviousFairRelease {
			want = ""
		}
		if release(s, "tok-holder", "holder") != 0 || notice() != want {
			t.Fatalf("%s release after expiry: deleted something, or announced other than %q", s.Name(), want)
		}
		if n, _ := redis.Int(c.Do("ZCARD", "q")); n != 1 {
			t.Fatalf("%s release after expiry left %d entries, want the waiter's alone", s.Name(), n)
		}
	}
	// Released while another holds the key, or with nobody waiting: silent.
	free()
	queue("holder")
	if _, err := c.Do("SET", "lock", "other", "PX", 30000); err != nil {
		t.Fatal(err)
	}
	if release(scripts.FairRelease, "tok-holder", "holder") != 0 || notice() != "" {
		t.Fatal("a release of a key another holds announced it")
	}
	free()
	queue("holder")
	if _, err := c.Do("DEL", "lock"); err != nil {
		t.Fatal(err)
	}
	if release(scripts.FairRelease, "tok-holder", "holder") != 0 || notice() != "" {
		t.Fatal("a release after expiry with nobody waiting announced it")
	}
}

package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// status --json carries what the table shows: the holder's metadata per
// master and for the key, and a held lock missing on a master that
// answered (a restarted master) is counted and told.
func TestStatus_jsonHasMetadataAndMissingCopies(t *testing.T) {
	servers := redistest.Start(t, 3)
	masters := addrsOf(servers)
	ctx, l := holdLock(t, masters, "job", redlock.WithMetadata("host-7 pid 42"))
	if !redistest.WaitFor(ctx, func() bool {
		_, out, _ := redlockRun(t, masters, "status", "--json", "job")
		return strings.Count(out, `"metadata": "host-7 pid 42"`) == 3
	}) {
		t.Fatal("the metadata is not on every master")
	}
	// A master restarted empty: the lock is missing there.
	if err := servers[2].Restart(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := redlockRun(t, masters, "status", "--json", "job")
	if code != exitOK {
		t.Fatalf("exit %d: %s%s", code, out, errOut)
	}
	var got struct {
		Keys []struct {
			Holder    string `json:"holder"`
			Meta      string `json:"holder_metadata"`
			HeldOn    int    `json:"held_on"`
			MissingOn int    `json:"missing_on"`
			Masters   []struct {
				Holders []struct {
					Meta string `json:"metadata"`
				} `json:"holders"`
			} `json:"masters"`
		} `json:"keys"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	k := got.Keys[0]
	if k.Holder != l.Token() || k.Meta != "host-7 pid 42" || k.HeldOn != 2 || k.MissingOn != 1 {
		t.Errorf("key: %+v\n%s", k, out)
	}
	if len(k.Masters[0].Holders) != 1 || k.Masters[0].Holders[0].Meta != "host-7 pid 42" {
		t.Errorf("master 0: %+v", k.Masters[0])
	}
	_, text, _ := redlockRun(t, masters, "status", "job")
	if !strings.Contains(text, `"host-7 pid 42"`) || !strings.Contains(text, "missing on 1 master(s) that answered") ||
		!strings.Contains(text, "tolerates 0 more failure(s), not 1") {
		t.Errorf("text:\n%s", text)
	}
}

// holdLock takes a lock on key for a minute (released at the test's end)
// and returns it with a context that ends within 10 s.
func holdLock(t *testing.T, masters []string, key string, opts ...redlock.LockOption) (context.Context, *redlock.Lock) {
	t.Helper()
	c, err := redigo.NewFromAddrs(masters)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	l, err := c.Acquire(ctx, key, append([]redlock.LockOption{redlock.WithTTL(time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Release(context.Background()) })
	return ctx, l
}

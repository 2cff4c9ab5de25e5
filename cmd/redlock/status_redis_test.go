package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/redigo"
	"github.com/quorumlock/quorumlock/redlock"
)

// Keys and what masters hold can carry terminal escape sequences, tabs
// and newlines: status prints them escaped, so they neither act on the
// terminal nor shift its table.
func TestStatus_escapesWhatItPrints(t *testing.T) {
	srv := redistest.StartOne(t)
	const key, token = "\x1b[2Jjob", "\x1b]0;pwned\a\ttok"
	if _, err := srv.Do("SET", key, token, "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("HSET", "nested", "own\ner\x1b[31m", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("RPUSH", "list\r", "x"); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := redlockRun(t, []string{srv.Addr()}, "status", key, "nested", "list\r")
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.ContainsAny(out, "\x1b\a\r") {
		t.Fatalf("status prints control characters raw:\n%q", out)
	}
	for _, want := range []string{`"\x1b[2Jjob"`, `"\x1b]0;pwne"…`, `"own\ner\x1b[31m"×2`, `"list\r"`} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %s:\n%s", want, out)
		}
	}
	if rows := strings.Count(out, "\n  "+srv.Addr()+"  "); rows != 3 {
		t.Errorf("%d rows for 3 keys: a newline from the master broke one:\n%s", rows, out)
	}
}

// A hung master (SIGSTOP: it accepts connections, never answers) costs
// status one bounded probe, not one per key: it is skipped for the keys
// after and named once.
func TestStatus_hungMasterAskedOnce(t *testing.T) {
	servers := redistest.Start(t, 3)
	if _, err := servers[0].Do("SET", "k1", "tok-1", "PX", 60000); err != nil {
		t.Fatal(err)
	}
	if err := servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer servers[2].Resume()
	keys := []string{"k1", "k2", "k3", "k4", "k5"}
	start := time.Now()
	code, out, errOut := redlockRun(t, addrsOf(servers), append([]string{"status"}, keys...)...)
	took := time.Since(start)
	if code != exitOK {
		t.Fatalf("exit %d with 2 of 3 answering:\n%s%s", code, out, errOut)
	}
	// For the first key one read beside the client's identity check, at
	// most statusTimeout (1s) and 100 ms; then the Close of that client, which gives
	// the hung master's read still in flight up to one more timeout when
	// status moves on to a client without it; then nothing: under the five
	// seconds (or ten) a read per key would cost, plus that Close.
	if took > 4*statusTimeout {
		t.Errorf("status took %v for %d keys with one hung master", took, len(keys))
	}
	if n := strings.Count(out, "master 2 ("+servers[2].Addr()+"): "); n != 1 {
		t.Errorf("the hung master's error is printed %d times, want once:\n%s", n, out)
	}
	if n := strings.Count(out, servers[2].Addr()+"  no (below)"); n != len(keys) {
		t.Errorf("%d rows say the hung master did not answer, want %d:\n%s", n, len(keys), out)
	}
	if !strings.Contains(out, "did not answer in time") {
		t.Errorf("the hung master's error does not say it did not answer in time:\n%s", out)
	}
}

// status --json: one object with stable field names (docs/operations.md).
func TestStatus_json(t *testing.T) {
	servers := redistest.Start(t, 3)
	for _, s := range servers[:2] {
		if _, err := s.Do("SET", "job", "tok-\x1b-1", "PX", 60000); err != nil {
			t.Fatal(err)
		}
	}
	if err := servers[2].Kill(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := redlockRun(t, addrsOf(servers), "status", "--json", "job", "free")
	if code != exitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	var got struct {
		Masters []struct {
			Address     string `json:"address"`
			Answered    bool   `json:"answered"`
			Error       string `json:"error"`
			SkippedKeys int    `json:"skipped_keys"`
		} `json:"masters"`
		Keys []struct {
			Key      string `json:"key"`
			Verdict  string `json:"verdict"`
			Holder   string `json:"holder"`
			HeldOn   int    `json:"held_on"`
			Answered int    `json:"answered"`
			Quorum   int    `json:"quorum"`
			Masters  []struct {
				Address  string `json:"address"`
				Answered bool   `json:"answered"`
				Kind     string `json:"kind"`
				Holder   string `json:"holder"`
				TTLMS    *int64 `json:"ttl_ms"`
			} `json:"masters"`
		} `json:"keys"`
		Quorum int `json:"quorum"`
		Failed int `json:"failed"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not one JSON object: %v\n%s", err, out)
	}
	if got.Quorum != 2 || got.Failed != 1 || len(got.Masters) != 3 || len(got.Keys) != 2 {
		t.Fatalf("summary: %+v", got)
	}
	if m := got.Masters[2]; m.Answered || m.Error == "" || m.SkippedKeys != 1 || m.Address != servers[2].Addr() {
		t.Errorf("the killed master: %+v", m)
	}
	job := got.Keys[0]
	if job.Key != "job" || job.Verdict != "held" || job.Holder != "tok-\x1b-1" || job.HeldOn != 2 || job.Answered != 2 {
		t.Errorf("job: %+v", job)
	}
	if h := job.Masters[0]; !h.Answered || h.Kind != "lock" || h.TTLMS == nil || *h.TTLMS <= 0 {
		t.Errorf("job on master 0: %+v", h)
	}
	if free := got.Keys[1]; free.Verdict != "free" || free.Masters[0].Kind != "free" || free.Masters[0].TTLMS != nil {
		t.Errorf("free: %+v", free)
	}
}

// One server under two addresses is refused by every command that uses
// the client, naming both, and nothing runs.
func TestCLI_sameServerTwiceIsRefused(t *testing.T) {
	servers := redistest.Start(t, 2)
	port := strings.TrimPrefix(servers[0].Addr(), "127.0.0.1:")
	masters := []string{servers[0].Addr(), servers[1].Addr(), "localhost:" + port}
	want := "masters 0 (" + masters[0] + ") and 2 (" + masters[2] + ") are the same Redis server"
	for _, args := range [][]string{
		{"status", "job"},
		{"exec", "--wait", "0", "job", "--", "true"},
	} {
		code, out, errOut := redlockRun(t, masters, args...)
		if code != exitUsage || !strings.Contains(errOut, want) || strings.Count(errOut, "redlock: ") != 1 {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
	if n, err := servers[0].Do("EXISTS", "job"); err != nil || n.(int64) != 0 {
		t.Errorf("EXISTS job = %v, %v", n, err)
	}
}

// Every key of a multi-key lock names its holder: status shows the
// metadata on each key, not on the first alone.
func TestStatus_multiKeyLockShowsItsHolderOnEveryKey(t *testing.T) {
	servers := redistest.Start(t, 3)
	pools := make([]pool.Pool, len(servers))
	for i, s := range servers {
		pools[i] = s.Pool()
	}
	c, err := redigo.New(pools, redlock.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keys := []string{"{job}:in", "{job}:out"}
	l, err := c.AcquireMulti(ctx, keys, redlock.WithTTL(time.Minute), redlock.WithMetadata("host=worker-3"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(context.Background())
	// The acquisition returns at a quorum: wait for the last master.
	if !redistest.WaitFor(ctx, func() bool {
		n, err := servers[2].Do("EXISTS", keys[1])
		return err == nil && n == int64(1)
	}) {
		t.Fatal("the last master never got the lock")
	}
	code, out, errOut := redlockRun(t, addrsOf(servers), append([]string{"status"}, keys...)...)
	if code != exitOK {
		t.Fatalf("exit %d:\n%s%s", code, out, errOut)
	}
	// Per key: a row per master and the verdict.
	if want := len(keys) * (len(servers) + 1); strings.Count(out, `"host=worker-3"`) != want {
		t.Errorf("the holder's metadata is shown %d times, want %d (every key, every master):\n%s",
			strings.Count(out, `"host=worker-3"`), want, out)
	}
}

package scripts_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"
	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const timeout = 2 * time.Second

func conn(t *testing.T, s *redistest.Server) redis.Conn {
	t.Helper()
	c, err := redis.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestRelease_deletesOnlyOwnToken(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if _, err := c.Do("SET", "k", "mine", "PX", 10000); err != nil {
		t.Fatal(err)
	}
	n, err := redis.Int(redigot.Do(scripts.Release, c, timeout, "k", "theirs", "ch"))
	if err != nil || n != 0 {
		t.Fatalf("foreign release = %d, %v; want 0, nil", n, err)
	}
	if v, _ := redis.String(c.Do("GET", "k")); v != "mine" {
		t.Fatalf("after foreign release GET = %q, want mine", v)
	}
	n, err = redis.Int(redigot.Do(scripts.Release, c, timeout, "k", "mine", "ch"))
	if err != nil || n != 1 {
		t.Fatalf("own release = %d, %v; want 1, nil", n, err)
	}
	if n, _ := redis.Int(c.Do("EXISTS", "k")); n != 0 {
		t.Fatal("key still exists after release")
	}
	n, err = redis.Int(redigot.Do(scripts.Release, c, timeout, "k", "mine", "ch"))
	if err != nil || n != 0 {
		t.Fatalf("release of absent key = %d, %v; want 0, nil", n, err)
	}
}

func TestExtend_neverRecreatesAndChecksToken(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if n, err := redis.Int(redigot.Do(scripts.Extend, c, timeout, "k", "mine", 5000)); err != nil || n != 0 {
		t.Fatalf("extend of absent key = %d, %v; want 0, nil", n, err)
	}
	if n, _ := redis.Int(c.Do("EXISTS", "k")); n != 0 {
		t.Fatal("extend re-created a missing key")
	}
	if _, err := c.Do("SET", "k", "mine", "PX", 1000); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.Int(redigot.Do(scripts.Extend, c, timeout, "k", "theirs", 50000)); err != nil || n != 0 {
		t.Fatalf("foreign extend = %d, %v; want 0, nil", n, err)
	}
	if n, err := redis.Int(redigot.Do(scripts.Extend, c, timeout, "k", "mine", 50000)); err != nil || n != 1 {
		t.Fatalf("own extend = %d, %v; want 1, nil", n, err)
	}
	if pttl, _ := redis.Int(c.Do("PTTL", "k")); pttl < 40000 {
		t.Fatalf("PTTL after extend = %d, want > 40000", pttl)
	}
}

func TestScript_Do_fallsBackToEvalAfterFlush(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if err := redigot.Load(scripts.Release, c, timeout); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("SET", "k", "tok"); err != nil {
		t.Fatal(err)
	}
	// EVALSHA alone now fails with NOSCRIPT ...
	_, err := c.Do("EVALSHA", scripts.Release.SHA(), 1, "k", "tok", "ch")
	if !redigot.IsNoScript(err) {
		t.Fatalf("EVALSHA after flush: %v, want NOSCRIPT", err)
	}
	// ... and Do recovers through EVAL, which caches the script again.
	if n, err := redis.Int(redigot.Do(scripts.Release, c, timeout, "k", "tok", "ch")); err != nil || n != 1 {
		t.Fatalf("Do after flush = %d, %v; want 1, nil", n, err)
	}
	exists, err := redis.Ints(c.Do("SCRIPT", "EXISTS", scripts.Release.SHA()))
	if err != nil || len(exists) != 1 || exists[0] != 1 {
		t.Fatalf("SCRIPT EXISTS after fallback = %v, %v", exists, err)
	}
}

func TestScript_SHAMatchesServer(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	for _, s := range []*scripts.Script{scripts.Release, scripts.Extend} {
		sha, err := redis.String(c.Do("SCRIPT", "LOAD", s.Source()))
		if err != nil || sha != s.SHA() {
			t.Errorf("%s: server SHA %q, %v; ours %q", s.Name(), sha, err, s.SHA())
		}
	}
}

func TestFencedAcquire_returnsCounterOnlyWhenSet(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	v, err := redis.String(redigot.Do(scripts.FencedAcquire, c, timeout, "k", layout.FenceKey("k"), "tok", 5000))
	if err != nil || v != "0" {
		t.Fatalf("first acquire = %q, %v; want \"0\"", v, err)
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", "k")); ttl <= 0 || ttl > 5000 {
		t.Fatalf("lock PTTL = %d", ttl)
	}
	if _, err := c.Do("SET", layout.FenceKey("k"), "41"); err != nil {
		t.Fatal(err)
	}
	n, err := redis.Int(redigot.Do(scripts.FencedAcquire, c, timeout, "k", layout.FenceKey("k"), "other", 5000))
	if err != nil || n != 0 {
		t.Fatalf("acquire of a held lock = %d, %v; want 0", n, err)
	}
	if _, err := c.Do("DEL", "k"); err != nil {
		t.Fatal(err)
	}
	if v, err := redis.String(redigot.Do(scripts.FencedAcquire, c, timeout, "k", layout.FenceKey("k"), "tok2", 5000)); err != nil || v != "41" {
		t.Fatalf("acquire = %q, %v; want the counter 41", v, err)
	}
}

func TestFenceCommit_raisesOnlyForHolderAndNeverLowers(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	commit := func(tok, fence string) int {
		t.Helper()
		n, err := redis.Int(redigot.Do(scripts.FenceCommit, c, timeout, "k", layout.FenceKey("k"), tok, fence))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	counter := func() string {
		v, _ := redis.String(c.Do("GET", layout.FenceKey("k")))
		return v
	}
	if commit("tok", "5") != 0 || counter() != "" {
		t.Fatal("commit without the lock changed something")
	}
	if _, err := c.Do("SET", "k", "tok", "PX", 5000); err != nil {
		t.Fatal(err)
	}
	if commit("other", "5") != 0 || counter() != "" {
		t.Fatal("commit with a foreign token changed something")
	}
	if commit("tok", "5") != 1 || counter() != "5" {
		t.Fatalf("counter = %q, want 5", counter())
	}
	if commit("tok", "3") != 1 || counter() != "5" {
		t.Fatalf("a lower commit lowered the counter to %q", counter())
	}
	if commit("tok", "10") != 1 || counter() != "10" { // longer string, larger
		t.Fatalf("counter = %q, want 10", counter())
	}
	if commit("tok", "18446744073709551615") != 1 || counter() != "18446744073709551615" {
		t.Fatalf("counter = %q, want the exact 2^64-1", counter())
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", layout.FenceKey("k"))); ttl != -1 {
		t.Fatalf("counter PTTL = %d, want none", ttl)
	}
}

// FuzzExplain: any error text, and any line a script refusal names, is
// explained or passed through; never a panic.
func FuzzExplain(f *testing.F) {
	f.Add("ERR The user executing the script can't run this command or subcommand script: " + scripts.Release.SHA() + ", on @user_script:12.")
	f.Add("ERR can't run this command script: " + scripts.RW.SHA() + ", on @user_script:999999999999999999999")
	f.Add("NOPERM this user has no permissions to run the 'set' command")
	f.Add("can't run this command @user_script:")
	f.Add("WRONGTYPE Operation against a key holding the wrong kind of value script: " + scripts.RW.SHA() + ", on @user_script:30.")
	f.Fuzz(func(t *testing.T, msg string) {
		err := scripts.Explain(redis.Error(msg), msg)
		var re redis.Error
		if errors.Is(err, scripts.ErrWrongKind) && errors.As(err, &re) && string(re) == msg {
			return // explained; the master's text is kept for errors.As
		}
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Fatalf("Explain(%q) = %v: the original text is lost", msg, err)
		}
	})
}

// An election's commit records the term beside the holder only while the
// lock holds the holder's token, in the same step as the counter, with the
// hash following the lock key's TTL; the leader read returns the token, the
// term recorded for that token (never another's) and its metadata.
func TestFenceCommitTerm_recordsOnlyForHolder_andLeaderReadPairsThem(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	meta := layout.MetaKey("k")
	commit := func(tok, fence string) int {
		t.Helper()
		n, err := redis.Int(redigot.Do(scripts.FenceCommitTerm, c, timeout, "k", layout.FenceKey("k"), meta, tok, fence))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	read := func() []any {
		t.Helper()
		v, err := redis.Values(c.Do("EVAL", scripts.LeaderRead.Source(), 2, "k", meta, 256, layout.MaxMeta))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if commit("a", "5") != 0 {
		t.Fatal("commit without the lock")
	}
	if n, _ := redis.Int(c.Do("EXISTS", meta, layout.FenceKey("k"))); n != 0 {
		t.Fatal("commit without the lock wrote something")
	}
	if v := read(); len(v) != 0 {
		t.Fatalf("read of a free key: %q", v)
	}
	if _, err := c.Do("SET", "k", "a", "PX", 5000); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("HSET", meta, "a", "value-a"); err != nil {
		t.Fatal(err)
	}
	if v := read(); len(v) != 4 || string(v[0].([]byte)) != "a" || v[2] != nil || string(v[3].([]byte)) != "value-a" {
		t.Fatalf("read before the commit: %q", v)
	}
	if commit("b", "5") != 0 {
		t.Fatal("commit with a foreign token")
	}
	if commit("a", "7") != 1 {
		t.Fatal("commit of the holder refused")
	}
	if term, _ := redis.String(c.Do("HGET", meta, keys.TermField("a"))); term != "7" {
		t.Fatalf("term = %q, want 7", term)
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", meta)); ttl <= 0 || ttl > 5000 {
		t.Fatalf("meta PTTL = %d, want the lock's", ttl)
	}
	v := read()
	if len(v) != 4 || string(v[0].([]byte)) != "a" || string(v[2].([]byte)) != "7" || string(v[3].([]byte)) != "value-a" {
		t.Fatalf("read after the commit: %q", v)
	}
	if ttl, ok := v[1].(int64); !ok || ttl <= 0 || ttl > 5000 {
		t.Fatalf("read PTTL %v", v[1])
	}
	// Another holder: a's term stays in the hash but is never read as b's.
	if _, err := c.Do("SET", "k", "b", "PX", 5000); err != nil {
		t.Fatal(err)
	}
	if v := read(); string(v[0].([]byte)) != "b" || v[2] != nil || v[3] != nil {
		t.Fatalf("read of b before its commit: %q", v)
	}
	// Not a string: nothing.
	if _, err := c.Do("DEL", "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("HSET", "k", "f", "1"); err != nil {
		t.Fatal(err)
	}
	if v := read(); len(v) != 0 {
		t.Fatalf("read of a hash: %q", v)
	}
	// A user whose ACL refuses GET gets the refusal, not "no token".
	if _, err := c.Do("ACL", "SETUSER", "noget", "on", "nopass", "~*", "+@all", "-get"); err != nil {
		t.Fatal(err)
	}
	c2, err := redis.Dial("tcp", srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := c2.Do("AUTH", "noget", "x"); err != nil {
		t.Fatal(err)
	}
	if v, err := c2.Do("EVAL", scripts.LeaderRead.Source(), 2, "k", meta, 256, layout.MaxMeta); err == nil {
		t.Fatalf("read refused GET by the ACL: %v, want the refusal", v)
	} else {
		t.Logf("refused: %v", err)
	}
}

// The release announces itself with the token's first 8 characters and
// how many connections were subscribed to the channel on the master.
func TestRelease_noticeCountsTheSubscribers(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	var subs []redis.PubSubConn
	for range 2 {
		psc := redis.PubSubConn{Conn: conn(t, srv)}
		if err := psc.Subscribe("ch"); err != nil {
			t.Fatal(err)
		}
		if _, ok := psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
			t.Fatal("no subscription")
		}
		subs = append(subs, psc)
	}
	if _, err := c.Do("SET", "k", "0123456789abcdef", "PX", 10000); err != nil {
		t.Fatal(err)
	}
	if n, err := redis.Int(redigot.Do(scripts.Release, c, timeout, "k", "0123456789abcdef", "ch")); err != nil || n != 1 {
		t.Fatalf("release = %d, %v; want 1", n, err)
	}
	for i, psc := range subs {
		m, ok := psc.ReceiveWithTimeout(timeout).(redis.Message)
		if !ok {
			t.Fatalf("subscriber %d: no message", i)
		}
		if id, n := keys.ParseNotice(string(m.Data)); id != "01234567" || n != 2 {
			t.Fatalf("subscriber %d: notice %q = %q, %d; want 01234567, 2", i, m.Data, id, n)
		}
	}
}

// A waiting plain acquisition sets a free key as SET NX PX does and
// replies OK; refused, it replies the holder's remaining TTL (-1 for a
// key without one), and -3 where the ACL user may not run PTTL, with no
// error and no ACL log entry.
func TestWaitAcquire_refusalRepliesTheHoldersRemainingTTL(t *testing.T) {
	srv := redistest.StartOne(t)
	c := conn(t, srv)
	if v, err := redigot.Do(scripts.WaitAcquire, c, timeout, "k", "mine", 3000); err != nil || v != "OK" {
		t.Fatalf("on a free key = %#v, %v; want OK", v, err)
	}
	if v, _ := redis.String(c.Do("GET", "k")); v != "mine" {
		t.Fatalf("GET = %q, want mine", v)
	}
	if ttl, _ := redis.Int64(c.Do("PTTL", "k")); ttl <= 0 || ttl > 3000 {
		t.Fatalf("PTTL after the grant = %d", ttl)
	}
	left, err := redis.Int64(redigot.Do(scripts.WaitAcquire, c, timeout, "k", "theirs", 9000))
	if err != nil || left <= 0 || left > 3000 {
		t.Fatalf("on a held key = %d, %v; want its remaining TTL (0, 3000]", left, err)
	}
	if v, _ := redis.String(c.Do("GET", "k")); v != "mine" {
		t.Fatalf("GET after a refusal = %q, want mine", v)
	}
	if _, err := c.Do("SET", "forever", "x"); err != nil {
		t.Fatal(err)
	}
	if left, err := redis.Int64(redigot.Do(scripts.WaitAcquire, c, timeout, "forever", "theirs", 9000)); err != nil || left != -1 {
		t.Fatalf("on a key without a TTL = %d, %v; want -1", left, err)
	}
	if _, err := c.Do("ACL", "SETUSER", "nopttl", "on", "nopass", "~*", "+@all", "-pttl"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Do("ACL", "LOG", "RESET"); err != nil {
		t.Fatal(err)
	}
	c2 := conn(t, srv)
	if _, err := c2.Do("AUTH", "nopttl", "x"); err != nil {
		t.Fatal(err)
	}
	if left, err := redis.Int64(redigot.Do(scripts.WaitAcquire, c2, timeout, "k", "theirs", 9000)); err != nil || left != -3 {
		t.Fatalf("for a user without PTTL = %d, %v; want -3", left, err)
	}
	if log, err := redis.Values(c.Do("ACL", "LOG")); err != nil || len(log) != 0 {
		t.Fatalf("ACL LOG after the attempt without PTTL: %d entries, %v", len(log), err)
	}
}

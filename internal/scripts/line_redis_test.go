package scripts_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/redigot"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// lineMaster is one real master with the scripts of a plain lock's line
// on the key "lock", its line "line" and deadlines "dl", and a
// subscriber to the channel "ch".
type lineMaster struct {
	t   *testing.T
	c   redis.Conn
	psc redis.PubSubConn
}

func newLineMaster(t *testing.T) *lineMaster {
	t.Helper()
	srv := redistest.StartOne(t)
	m := &lineMaster{t: t, c: conn(t, srv), psc: redis.PubSubConn{Conn: conn(t, srv)}}
	if err := m.psc.Subscribe("ch"); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.psc.ReceiveWithTimeout(timeout).(redis.Subscription); !ok {
		t.Fatal("no subscription")
	}
	return m
}

// attempt runs line_acquire for waiter w with token tok (a 30 s TTL,
// entries kept for entryMS), joining the line when refused; it returns
// "OK" or the refusal's remaining TTL in ms.
func (m *lineMaster) attempt(w, tok string, entryMS int) any {
	m.t.Helper()
	v, err := redigot.Do(scripts.LineAcquire, m.c, timeout, "lock", "line", "dl", tok, 30000, w, "1", entryMS, arrival())
	if err != nil {
		m.t.Fatal(err)
	}
	if s, ok := v.(string); ok {
		return s
	}
	n, err := redis.Int64(v, nil)
	if err != nil {
		m.t.Fatalf("line_acquire replied %v: %v", v, err)
	}
	return n
}

// release runs line_release of tok: heads that waited ageMS hand-overs,
// markers of markerMS; the turn of an earlier hand-over is over.
func (m *lineMaster) release(tok string, ageMS, markerMS int) int {
	m.t.Helper()
	if _, err := m.c.Do("DEL", "turn"); err != nil {
		m.t.Fatal(err)
	}
	return m.releaseInTurn(tok, ageMS, markerMS)
}

// releaseInTurn is release, the turn kept.
func (m *lineMaster) releaseInTurn(tok string, ageMS, markerMS int) int {
	m.t.Helper()
	n, err := redis.Int(redigot.Do(scripts.LineRelease, m.c, timeout, "lock", "line", "dl", "turn", tok, "ch", ageMS, markerMS, "1", ""))
	if err != nil {
		m.t.Fatal(err)
	}
	return n
}

func (m *lineMaster) leave(w string, markerMS int) int {
	m.t.Helper()
	n, err := redis.Int(redigot.Do(scripts.LineLeave, m.c, timeout, "lock", "line", "dl", w, "ch", markerMS))
	if err != nil {
		m.t.Fatal(err)
	}
	return n
}

// value returns what the key holds ("" when absent).
func (m *lineMaster) value() string {
	m.t.Helper()
	v, err := redis.String(m.c.Do("GET", "lock"))
	if err == redis.ErrNil {
		return ""
	}
	if err != nil {
		m.t.Fatal(err)
	}
	return v
}

func (m *lineMaster) line() []string {
	m.t.Helper()
	ws, err := redis.Strings(m.c.Do("ZRANGE", "line", 0, -1))
	if err != nil {
		m.t.Fatal(err)
	}
	return ws
}

// notice returns the last message published since the last call ("":
// none).
func (m *lineMaster) notice() string {
	m.t.Helper()
	if err := m.psc.Ping("end"); err != nil {
		m.t.Fatal(err)
	}
	got := ""
	for {
		switch msg := m.psc.ReceiveWithTimeout(timeout).(type) {
		case redis.Message:
			got = string(msg.Data)
		case redis.Pong:
			return got
		case error:
			m.t.Fatal(msg)
		}
	}
}

// arrival is a waiter's arrival as a client gives it: µs, increasing,
// a second ago (a waiter here has waited a second when it joins).
var arrival = func() func() int64 {
	var last atomic.Int64
	return func() int64 {
		a := time.Now().Add(-time.Second).UnixMicro()
		for {
			l := last.Load()
			if a <= l {
				a = l + 1
			}
			if last.CompareAndSwap(l, a) {
				return a
			}
		}
	}
}()

// A refused attempt joins the line once: a later attempt of the same
// waiter keeps its place, and the refusal says how long the key has left.
func TestLine_refusedWaiterJoinsAndKeepsItsPlace(t *testing.T) {
	m := newLineMaster(t)
	if got := m.attempt("holder-w", "tok-holder", 30000); got != "OK" {
		t.Fatalf("attempt on a free key: %v", got)
	}
	for _, w := range []string{"waiter-a", "waiter-b", "waiter-a"} {
		left, ok := m.attempt(w, "tok-"+w, 30000).(int64)
		if !ok || left <= 0 || left > 30000 {
			t.Fatalf("%s refused with %v, want the holder's remaining TTL", w, left)
		}
	}
	if got := m.line(); strings.Join(got, ",") != "waiter-a,waiter-b" {
		t.Fatalf("line %v, want [waiter-a waiter-b]", got)
	}
	// A join-less attempt (the first, barging one) does not queue.
	if _, err := redigot.Do(scripts.LineAcquire, m.c, timeout, "lock", "line", "dl", "tok-c", 30000, "waiter-c", "", 30000, arrival()); err != nil {
		t.Fatal(err)
	}
	if got := m.line(); len(got) != 2 {
		t.Fatalf("line %v after an attempt that does not join", got)
	}
}

// While the head of the line is younger than the hand-over age, a
// release frees the key (the releaser may take it straight back) and
// names the head as the candidate; once the head has waited that long,
// the release hands the key over to it: only the heir's attempt gets it.
func TestLine_releaseHandsOverOnlyToAHeadThatWaitedLongEnough(t *testing.T) {
	m := newLineMaster(t)
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-a", "tok-a", 30000)
	m.attempt("waiter-b", "tok-b", 30000)
	m.notice()

	if got := m.release("tok-holder", 60000, 200); got != 1 {
		t.Fatalf("release with a young head replied %d, want 1 (deleted)", got)
	}
	if v := m.value(); v != "" {
		t.Fatalf("key holds %q after a release with a young head", v)
	}
	if got := m.notice(); !strings.HasPrefix(got, "tok-hold!cwaiter-a") {
		t.Fatalf("notice %q, want the candidate waiter-a named", got)
	}
	if got := m.attempt("holder-w", "tok-holder2", 30000); got != "OK" {
		t.Fatalf("the releaser's attempt straight after: %v, want OK", got)
	}

	if got := m.release("tok-holder2", 1, 5000); got != 1 {
		t.Fatalf("release with a head that waited replied %d, want 1", got)
	}
	if v := m.value(); v != "h:waiter-a" {
		t.Fatalf("key holds %q, want the marker of waiter-a", v)
	}
	if got := m.notice(); got != "tok-hold!hwaiter-a" {
		t.Fatalf("notice %q, want the heir waiter-a named", got)
	}
	for _, w := range []string{"holder-w", "waiter-b"} {
		if left, ok := m.attempt(w, "tok-x", 30000).(int64); !ok || left <= 0 || left > 5000 {
			t.Fatalf("%s's attempt on a marker: %v, want the marker's remaining TTL", w, left)
		}
	}
	if got := m.attempt("waiter-a", "tok-a", 30000); got != "OK" {
		t.Fatalf("the heir's attempt: %v, want OK", got)
	}
	if v := m.value(); v != "tok-a" {
		t.Fatalf("key holds %q after the heir's attempt, want its token", v)
	}
	if got := m.line(); strings.Join(got, ",") != "waiter-b,holder-w" {
		t.Fatalf("line %v, want [waiter-b holder-w]: the heir left it", got)
	}
	if pttl, err := redis.Int64(m.c.Do("PTTL", "lock")); err != nil || pttl <= 5000 {
		t.Fatalf("the heir's key has PTTL %d (%v), want its own 30 s TTL", pttl, err)
	}
	// A release by anyone but the holder changes nothing.
	if got := m.release("tok-b", 1, 5000); got != 0 || m.value() != "tok-a" {
		t.Fatalf("a foreign release replied %d; the key holds %q", got, m.value())
	}
}

// The scripts of the previous release, which a client not yet upgraded
// runs on the same key, never take or remove a marker: its SET NX and
// waiting acquisition are refused (the latter with the marker's TTL), its
// release and extension match no token. The marker runs out by itself.
func TestLine_markerRefusesTheScriptsOfThePreviousRelease(t *testing.T) {
	m := newLineMaster(t)
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-a", "tok-a", 30000)
	if got := m.release("tok-holder", 1, 300); got != 1 {
		t.Fatalf("release replied %d, want 1", got)
	}
	if ok, err := m.c.Do("SET", "lock", "tok-old", "NX", "PX", 30000); err != nil || ok != nil {
		t.Fatalf("an old client's SET NX on a marker: %v, %v", ok, err)
	}
	if left, err := redis.Int64(redigot.Do(scripts.WaitAcquire, m.c, timeout, "lock", "tok-old", 30000)); err != nil || left <= 0 || left > 300 {
		t.Fatalf("an old client's waiting acquisition on a marker: %d, %v; want the marker's TTL", left, err)
	}
	// A plain lock's token is a UUID: no client's token is a marker.
	for _, tok := range []string{"tok-old", "waiter-a"} {
		if n, err := redis.Int(redigot.Do(scripts.Release, m.c, timeout, "lock", tok, "ch")); err != nil || n != 0 {
			t.Fatalf("an old client's release of %q: %d, %v", tok, n, err)
		}
		if n, err := redis.Int(redigot.Do(scripts.Extend, m.c, timeout, "lock", tok, 30000)); err != nil || n != 0 {
			t.Fatalf("an old client's extension of %q: %d, %v", tok, n, err)
		}
	}
	if v := m.value(); v != "h:waiter-a" {
		t.Fatalf("key holds %q, want the marker still", v)
	}
	redistest.Eventually(t, 10*time.Second, "the marker runs out", func() bool { return m.value() == "" })
	if ok, err := m.c.Do("SET", "lock", "tok-old", "NX", "PX", 30000); err != nil || ok == nil {
		t.Fatalf("an old client's SET NX once the marker ran out: %v, %v", ok, err)
	}
}

// An heir that gives up passes the hand-over on to the next waiter in
// line, and the last one frees the key; each says so on the channel. A
// waiter that leaves without the marker only leaves the line.
func TestLine_leavePassesTheHandOverOn(t *testing.T) {
	m := newLineMaster(t)
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-a", "tok-a", 30000)
	m.attempt("waiter-b", "tok-b", 30000)
	m.attempt("waiter-c", "tok-c", 30000)
	m.release("tok-holder", 1, 5000)
	m.notice()
	if got := m.leave("waiter-c", 5000); got != 1 || m.value() != "h:waiter-a" || m.notice() != "" {
		t.Fatalf("a waiter without the marker left: %d; key %q", got, m.value())
	}
	if got := m.leave("waiter-a", 5000); got != 1 {
		t.Fatalf("the heir's leave replied %d, want 1", got)
	}
	if v, n := m.value(), m.notice(); v != "h:waiter-b" || n != "waiter-a!hwaiter-b" {
		t.Fatalf("after the heir left: key %q, notice %q; want waiter-b's marker, named", v, n)
	}
	if got := m.leave("waiter-b", 5000); got != 1 {
		t.Fatalf("the last heir's leave replied %d, want 1", got)
	}
	if v, n := m.value(), m.notice(); v != "" || n != "waiter-b" {
		t.Fatalf("after the last heir left: key %q, notice %q; want it free and announced", v, n)
	}
	if got := m.leave("waiter-b", 5000); got != 0 {
		t.Fatalf("a second leave replied %d, want 0", got)
	}
	if n, err := redis.Int(m.c.Do("EXISTS", "line", "dl")); err != nil || n != 0 {
		t.Fatalf("%d of the line's keys left behind (%v)", n, err)
	}
}

// A waiter that stopped trying (its entry not refreshed within its
// entry TTL) is dropped from the line by the next release, which hands
// the key over to the next waiter instead: a vanished waiter does not
// hold up the key.
func TestLine_vanishedWaiterIsDroppedAtItsDeadline(t *testing.T) {
	m := newLineMaster(t)
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-gone", "tok-g", 200)
	m.attempt("waiter-b", "tok-b", 30000)
	if got := m.line(); strings.Join(got, ",") != "waiter-gone,waiter-b" {
		t.Fatalf("line %v, want [waiter-gone waiter-b]", got)
	}
	redistest.Eventually(t, 10*time.Second, "the entry's deadline passes on the master's clock", func() bool {
		now, err := redis.Int64s(m.c.Do("TIME"))
		if err != nil {
			t.Fatal(err)
		}
		dl, err := redis.Int64(m.c.Do("ZSCORE", "dl", "waiter-gone"))
		if err != nil {
			t.Fatal(err)
		}
		return now[0]*1000+now[1]/1000 > dl
	})
	if got := m.release("tok-holder", 1, 5000); got != 1 {
		t.Fatalf("release replied %d, want 1", got)
	}
	if v := m.value(); v != "h:waiter-b" {
		t.Fatalf("key holds %q, want waiter-b's marker", v)
	}
	if got := m.line(); len(got) != 0 {
		t.Fatalf("line %v, want the vanished waiter dropped and the heir gone", got)
	}
}

// A rollback's release announces a hand-over but not a free key; a
// release takes the holder's own entry out of the line first, wherever
// the master keeps it.
func TestLine_rollbackAnnouncesOnlyAHandOver(t *testing.T) {
	m := newLineMaster(t)
	rollback := func(tok, holder string, ageMS int) {
		t.Helper()
		if _, err := m.c.Do("DEL", "turn"); err != nil {
			t.Fatal(err)
		}
		if _, err := redigot.Do(scripts.LineRelease, m.c, timeout, "lock", "line", "dl", "turn", tok, "ch", ageMS, 5000, "", holder); err != nil {
			t.Fatal(err)
		}
	}
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-a", "tok-a", 30000)
	m.notice()
	rollback("tok-holder", "", 60000)
	if v, n := m.value(), m.notice(); v != "" || n != "" {
		t.Fatalf("a rollback with a young head: key %q, notice %q; want it free, unannounced", v, n)
	}
	m.attempt("holder-w", "tok-holder", 30000)
	rollback("tok-holder", "", 1)
	if v, n := m.value(), m.notice(); v != "h:waiter-a" || n != "tok-hold!hwaiter-a" {
		t.Fatalf("a rollback with a head that waited: key %q, notice %q; want the hand-over, announced", v, n)
	}
	// waiter-a takes the key; waiter-b waits; waiter-a's release takes
	// waiter-a's stale entry (as another master would keep it) out first.
	m.attempt("waiter-a", "tok-a", 30000)
	m.attempt("waiter-b", "tok-b", 30000)
	if _, err := m.c.Do("ZADD", "line", 0, "waiter-a"); err != nil {
		t.Fatal(err)
	}
	if _, err := m.c.Do("DEL", "turn"); err != nil {
		t.Fatal(err)
	}
	if _, err := redigot.Do(scripts.LineRelease, m.c, timeout, "lock", "line", "dl", "turn", "tok-a", "ch", 1, 5000, "1", "waiter-a"); err != nil {
		t.Fatal(err)
	}
	if v := m.value(); v != "h:waiter-b" {
		t.Fatalf("key holds %q, want waiter-b's marker (not the releaser's own)", v)
	}
}

// After a hand-over, the key is handed over again only once its turn
// (the hand-over age) has passed: a release meanwhile frees the key,
// naming the head as the candidate, and its holder may take it back.
func TestLine_handOverAtMostOncePerTurn(t *testing.T) {
	m := newLineMaster(t)
	m.attempt("holder-w", "tok-holder", 30000)
	m.attempt("waiter-a", "tok-a", 30000)
	m.attempt("waiter-b", "tok-b", 30000)
	m.notice()
	if got := m.release("tok-holder", 500, 5000); got != 1 || m.value() != "h:waiter-a" {
		t.Fatalf("the first release: %d, key %q; want the hand-over to waiter-a", got, m.value())
	}
	m.notice()
	if got := m.attempt("waiter-a", "tok-a", 30000); got != "OK" {
		t.Fatalf("the heir's attempt: %v", got)
	}
	if got := m.releaseInTurn("tok-a", 500, 5000); got != 1 || m.value() != "" {
		t.Fatalf("a release within the turn: %d, key %q; want it free", got, m.value())
	}
	if got := m.notice(); !strings.HasPrefix(got, "tok-a!cwaiter-b") {
		t.Fatalf("notice %q, want waiter-b named the candidate", got)
	}
	if got := m.attempt("waiter-a", "tok-a2", 30000); got != "OK" {
		t.Fatalf("the holder's attempt straight after: %v", got)
	}
	if _, err := m.c.Do("PEXPIRE", "turn", 1); err != nil { // the turn runs out
		t.Fatal(err)
	}
	redistest.Eventually(t, 10*time.Second, "the turn ran out", func() bool {
		n, err := redis.Int(m.c.Do("EXISTS", "turn"))
		return err == nil && n == 0
	})
	if got := m.releaseInTurn("tok-a2", 500, 5000); got != 1 || m.value() != "h:waiter-b" {
		t.Fatalf("a release after the turn: %d, key %q; want the hand-over to waiter-b", got, m.value())
	}
}

package goredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

type result struct {
	v            any
	err          error
	sent, resent bool
}

// newClient returns a go-redis client of s, closed by t.Cleanup.
func newClient(t *testing.T, s *server, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: s.addr}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func newClientB(b *testing.B, s *server) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	b.Cleanup(func() { c.Close() })
	return c
}

func newTestLane(t *testing.T, c redis.UniversalClient) *lane {
	t.Helper()
	l := newLane(c, "test")
	t.Cleanup(l.close)
	return l
}

// connectedLane starts a master and a lane to it whose connection is
// made (a PING answered), so that a frozen master's accept queue is not
// what a test measures.
func connectedLane(t *testing.T, opts ...func(*redis.Options)) (*server, *lane) {
	t.Helper()
	s := startServer(t)
	l := newTestLane(t, newClient(t, s, opts...))
	r, ch := cmd(5*time.Second, "PING")
	l.send(r)
	if res := wait(t, ch); res.err != nil {
		t.Fatalf("PING: %+v", res)
	}
	return s, l
}

// cmd returns a plain request with a deadline d from now, and where its
// result goes.
func cmd(d time.Duration, name string, args ...any) (*req, chan result) {
	ch := make(chan result, 1)
	return &req{
		name:     name,
		args:     args,
		deadline: time.Now().Add(d),
		done:     func(v any, err error, sent, resent bool) { ch <- result{v, err, sent, resent} },
	}, ch
}

func evalReq(d time.Duration, s *script, nkeys int, args ...any) (*req, chan result) {
	r, ch := cmd(d, "", args...)
	r.script, r.nkeys = s, nkeys
	return r, ch
}

func wait(t *testing.T, ch chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no reply within 10s")
		return result{}
	}
}

var echoScript = &script{
	src: "return ARGV[1]",
	sha: "098e0f0d1448c0a81dafe820f66d460eb09263da",
}

func TestLane_commandsReachTheMasterInSendOrder(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	l := newTestLane(t, c)
	const workers, each = 8, 300
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := "list" + strconv.Itoa(w)
			var last chan result
			for i := 0; i < each; i++ {
				// Send never blocks: all of a worker's commands are
				// queued before any reply is read.
				r, ch := cmd(10*time.Second, "RPUSH", key, i)
				l.send(r)
				last = ch
			}
			if res := wait(t, last); res.err != nil || res.v != int64(each) {
				t.Errorf("last RPUSH of %s: %v, %v", key, res.v, res.err)
			}
		}()
	}
	wg.Wait()
	for w := 0; w < workers; w++ {
		got, err := c.LRange(context.Background(), "list"+strconv.Itoa(w), 0, -1).Result()
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != strconv.Itoa(i) {
				t.Fatalf("list%d[%d] = %s: commands reached the master out of order", w, i, v)
			}
		}
		if len(got) != each {
			t.Fatalf("list%d has %d elements, want %d", w, len(got), each)
		}
	}
}

// countHook counts the lane's commands that go-redis runs through its
// hooks (not the HELLO and CLIENT SETINFO of a new connection).
type countHook struct{ single, piped atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if _, ok := cmd.(laneCmd); ok {
			h.single.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if _, ok := c.(laneCmd); ok {
				h.piped.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

func TestLane_hooksSeeEveryCommand(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	h := &countHook{}
	c.AddHook(h)
	l := newTestLane(t, c)
	const n = 500
	chans := make([]chan result, 0, n)
	for i := 0; i < n; i++ {
		var r *req
		var ch chan result
		if i%2 == 0 {
			r, ch = cmd(10*time.Second, "SET", "k"+strconv.Itoa(i), "v", "NX", "PX", 10000)
		} else {
			r, ch = evalReq(10*time.Second, echoScript, 0, "x")
		}
		l.send(r)
		chans = append(chans, ch)
	}
	for i, ch := range chans {
		res := wait(t, ch)
		want := any("OK")
		if i%2 == 1 {
			want = "x"
		}
		if res.err != nil || res.v != want || !res.sent || res.resent {
			t.Fatalf("command %d: %+v", i, res)
		}
	}
	// One SCRIPT LOAD goes ahead of the script's first EVALSHA.
	if got := h.piped.Load() + h.single.Load(); got != n+1 {
		t.Fatalf("hooks saw %d commands, want %d (the %d sent and one SCRIPT LOAD)", got, n+1, n)
	}
}

func TestLane_scriptLoadedOnceThenEvalsha(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	l := newTestLane(t, c)
	for i := 0; i < 3; i++ {
		r, ch := evalReq(5*time.Second, echoScript, 0, "a")
		l.send(r)
		if res := wait(t, ch); res.err != nil || res.v != "a" {
			t.Fatalf("EVALSHA %d: %+v", i, res)
		}
	}
	stats := c.Do(context.Background(), "INFO", "commandstats").Val().(string)
	for _, want := range []string{"cmdstat_script|load:calls=1,", "cmdstat_evalsha:calls=3,"} {
		if !contains(stats, want) {
			t.Errorf("INFO commandstats lacks %q:\n%s", want, stats)
		}
	}
}

func contains(s, sub string) bool {
	return len(sub) == 0 || (len(s) >= len(sub) && indexOf(s, sub) >= 0)
}

func indexOf(s, sub string) int {
	for i := 0; i+len(sub) <= len(s); i++ {
		if s[i:i+len(sub)] == sub {
			return i
		}
	}
	return -1
}

// busy makes the lane's next batch wait about d on the master (BLPOP on
// an empty list), so that what is sent meanwhile forms one batch.
func busy(t *testing.T, l *lane, d time.Duration) chan result {
	r, ch := cmd(10*time.Second, "BLPOP", "nothing:"+t.Name(), fmt.Sprintf("%.3f", d.Seconds()))
	l.send(r)
	taken(t, l, r, false)
	return ch
}

// taken waits until the lane's writer has taken r into the batch it runs
// (with alone, as that batch's only command: an earlier batch may still
// be finishing).
func taken(t *testing.T, l *lane, r *req, alone bool) {
	t.Helper()
	waitFor(t, "the lane's writer took the command", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		if alone {
			return len(l.inflight) == 1 && l.inflight[0] == r
		}
		for _, x := range l.inflight {
			if x == r {
				return true
			}
		}
		return false
	})
}

func TestLane_noscript(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name       string
		after      bool // a command follows the script in its batch
		mayRunLate bool
		wantEval   bool
	}{
		{"alone: EVAL", false, false, true},
		{"followed, may run late: EVAL", true, true, true},
		{"followed: NOSCRIPT delivered", true, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t)
			c := newClient(t, s)
			l := newTestLane(t, c)
			r, ch := evalReq(5*time.Second, echoScript, 0, "a")
			l.send(r)
			if res := wait(t, ch); res.err != nil {
				t.Fatal(res.err)
			}
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			b := busy(t, l, 200*time.Millisecond)
			r, ch = evalReq(5*time.Second, echoScript, 0, "b")
			r.mayRunLate = tc.mayRunLate
			l.send(r)
			var next chan result
			if tc.after {
				var r2 *req
				r2, next = cmd(5*time.Second, "RPUSH", "after", "1")
				l.send(r2)
			}
			wait(t, b)
			res := wait(t, ch)
			if tc.wantEval {
				if res.err != nil || res.v != "b" {
					t.Fatalf("want the EVAL fallback's reply, got %+v", res)
				}
			} else {
				var re redis.Error
				if !errors.As(res.err, &re) || !isNoScript(res.err) {
					t.Fatalf("want the NOSCRIPT error reply, got %+v", res)
				}
			}
			if next != nil {
				if res := wait(t, next); res.err != nil {
					t.Fatal(res.err)
				}
			}
			// The script is loaded again before its next EVALSHA.
			r, ch = evalReq(5*time.Second, echoScript, 0, "c")
			l.send(r)
			if res := wait(t, ch); res.err != nil || res.v != "c" {
				t.Fatalf("after NOSCRIPT: %+v", res)
			}
		})
	}
}

// A frozen master (SIGSTOP): a command in flight makes the lane down
// once its batch has been silent for its budget (commands worthless late
// then fail at once, unsent), and itself waits for its reply until its
// limit (lateBound past its deadline: TestLane_lateReplyIsDelivered),
// where it fails, sent. A command queued while the batch had been silent
// for less than its wait is waited for until its own limit too (the
// master might only be slow: TestLane_queuedBehindASlowMasterIsSentLate),
// and fails then.
func TestLane_deadlineOnAFrozenMaster(t *testing.T) {
	s, l := connectedLane(t)

	s.stop()
	defer s.cont()
	start := time.Now()
	const budget = 100 * time.Millisecond
	first, firstCh := cmd(budget, "SET", "a", "1", "NX", "PX", 10000)
	l.send(first)
	taken(t, l, first, false)
	const queuedBudget = 150 * time.Millisecond
	queued, queuedCh := cmd(queuedBudget, "SET", "b", "1", "NX", "PX", 10000)
	l.send(queued)

	// Down: a command that is worthless late fails at once, unsent.
	if el := untilDown(t, l).Sub(start); el > 300*time.Millisecond {
		t.Errorf("down after %v, deadline 100ms", el)
	}
	drop, dropCh := cmd(budget, "SET", "c", "1", "NX", "PX", 10000)
	drop.dropWhenDown = true
	l.send(drop)
	if res := wait(t, dropCh); !errors.Is(res.err, errDown) || res.sent {
		t.Fatalf("dropWhenDown while down: %+v", res)
	}
	res := wait(t, firstCh)
	el := time.Since(start)
	if !errors.Is(res.err, context.DeadlineExceeded) || !res.sent {
		t.Fatalf("in flight past its limit: %+v, want a timeout, sent", res)
	}
	if limit := budget + lateBound(budget); el < limit-50*time.Millisecond || el > limit+300*time.Millisecond {
		t.Errorf("in-flight command settled after %v, limit %v", el, limit)
	}
	res = wait(t, queuedCh)
	el = time.Since(start)
	if !errors.Is(res.err, context.DeadlineExceeded) {
		t.Fatalf("queued behind a frozen master: %+v, want a timeout", res)
	}
	if limit := queuedBudget + lateBound(queuedBudget); el < limit-50*time.Millisecond || el > limit+300*time.Millisecond {
		t.Errorf("queued command settled after %v, limit %v", el, limit)
	}
	s.cont()
	// The master answers again: the lane is up.
	r, ch := cmd(5*time.Second, "PING")
	l.send(r)
	if res := wait(t, ch); res.err != nil || res.v != "PONG" {
		t.Fatalf("after the master woke: %+v", res)
	}
}

// untilDown waits until the lane counts its master down, and returns
// when it saw it so.
func untilDown(t *testing.T, l *lane) time.Time {
	t.Helper()
	var at time.Time
	waitForWithin(t, 5*time.Second, "the lane counts its master down", func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		at = time.Now()
		return l.down
	})
	return at
}

// freeze keeps the lane's watchdog from running for d, as a stopped
// process would (it holds the lane's mu), then records the stall as the
// watchdog's late firing would have.
func freeze(l *lane, d time.Duration) {
	l.mu.Lock()
	time.Sleep(d) // the subject: a process that does not run for d
	l.stallLocked(d, time.Now())
	l.mu.Unlock()
}

// everyBeat records a stall of d as the watchdog's firing late would,
// every laneBeat (d of it in each: a process that is always late), until
// the returned stop is called. long reports the stall from what passed
// since start instead (a process that never runs).
func everyBeat(l *lane, d time.Duration, long bool) (stop func()) {
	done, exited := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(exited)
		tick := time.NewTicker(laneBeat)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				now := time.Now()
				if long {
					d = now.Sub(start)
				}
				l.mu.Lock()
				l.stallLocked(d, now)
				l.mu.Unlock()
			}
		}
	}()
	return func() { close(done); <-exited }
}

// A stall of this process (here: the watchdog kept from running, then
// the stall recorded as its late firing would) pushes back the deadline of
// the commands waiting then: a reply that comes after the deadline but
// within the stall is delivered. A stall that never ends pushes it back
// only so far: a master that does not answer still fails the command,
// lateBound past its deadline.
func TestLane_stallsPushTheDeadlineBackUpToABound(t *testing.T) {
	s, l := connectedLane(t)

	s.stop()
	start := time.Now()
	late, lateCh := cmd(300*time.Millisecond, "SET", "a", "1", "NX", "PX", 10000)
	l.send(late)
	taken(t, l, late, false)
	time.Sleep(20 * time.Millisecond) // the subject: the master wakes 20 ms past the command's deadline
	freeze(l, 300*time.Millisecond)   // due 300 ms later
	s.cont()                          // past the deadline, before the stall's end
	if res := wait(t, lateCh); res.err != nil || res.v != "OK" {
		t.Fatalf("a reply after the deadline, within the stall: %+v, want OK", res)
	}
	if el := time.Since(start); el < 320*time.Millisecond {
		t.Fatalf("answered after %v, before the master woke", el)
	}

	s.stop()
	defer s.cont()
	start = time.Now()
	hung, hungCh := cmd(100*time.Millisecond, "SET", "b", "1", "NX", "PX", 10000)
	l.send(hung)
	stop := everyBeat(l, 0, true)
	res := wait(t, hungCh)
	stop()
	el := time.Since(start)
	if !errors.Is(res.err, context.DeadlineExceeded) || !res.sent {
		t.Fatalf("hung master under a stall that does not end: %+v, want a timeout, sent", res)
	}
	if bound := 100*time.Millisecond + lateBound(100*time.Millisecond); el < bound-50*time.Millisecond || el > bound+300*time.Millisecond {
		t.Fatalf("hung master under a stall that does not end: failed after %v, want about %v", el, bound)
	}
}

// A process that is always a few milliseconds late (here: a stall of
// 4 ms recorded at every beat, 5 ms) does not excuse a hung master
// (SIGSTOP): it is down at about its command's deadline plus one such
// stall. With the stalls summed the command waited 4 ms more for every
// 5 ms: five times its 100 ms, 505 ms here.
func TestLane_shortStallsDoNotAddUp(t *testing.T) {
	s, l := connectedLane(t)
	s.stop()
	defer s.cont()
	stop := everyBeat(l, 4*time.Millisecond, false)
	defer stop()
	start := time.Now()
	hung, _ := cmd(100*time.Millisecond, "SET", "a", "1", "NX", "PX", 10000)
	l.send(hung)
	el := untilDown(t, l).Sub(start)
	// 100 ms and one stall; the rest is room for a loaded machine.
	if el > 300*time.Millisecond {
		t.Fatalf("hung master, process always 4 ms late: down after %v, deadline 100 ms", el)
	}
}

// Silence (transport.Silencer): 0 with nothing in flight; on a frozen
// master it grows with the time its batch waits, less the stalls of this
// process seen meanwhile; once the master answers, 0 again.
func TestLane_silence(t *testing.T) {
	s, l := connectedLane(t)
	quiet := func(what string) { // the batch ends just after its replies are settled
		t.Helper()
		waitFor(t, "silence is 0 "+what, func() bool { return l.silence() == 0 })
	}
	quiet("with nothing in flight")

	s.stop()
	resumed := false
	defer func() {
		if !resumed {
			s.cont()
		}
	}()
	hung, hungCh := cmd(5*time.Second, "SET", "a", "1", "NX", "PX", 10000)
	sent := time.Now()
	l.send(hung)
	time.Sleep(200 * time.Millisecond) // the subject: silence grows with the time the master is frozen
	// The silence leaves out what of the wait this process did not run:
	// at most its latest stall, or how late its timer is. On a busy host
	// that can be most of the 200 ms, so the length is judged only when
	// the process ran nearly on time; where the silence began always is.
	l.mu.Lock()
	now := time.Now()
	got, began, excused := l.silenceLocked(now), l.batchAt, l.lastStall
	if !l.timerAt.IsZero() {
		excused = max(excused, now.Sub(l.timerAt))
	}
	l.mu.Unlock()
	switch {
	case began.IsZero() || began.Before(sent):
		t.Fatalf("silence on a frozen master began at %v, the command was sent at %v", began, sent)
	case got > now.Sub(began):
		t.Fatalf("silence %v, longer than the %v since its batch was written", got, now.Sub(began))
	case excused < 50*time.Millisecond && got < 150*time.Millisecond:
		t.Fatalf("silence after 200ms on a frozen master: %v (this process was at most %v late)", got, excused)
	}
	t.Logf("silence after 200ms on a frozen master: %v; this process was up to %v late", got, excused)
	// Many short stalls (a process always a few milliseconds late) do
	// not excuse a hung master: only the latest counts.
	before := l.silence()
	l.mu.Lock()
	for range 50 {
		l.stallLocked(3*time.Millisecond, time.Now())
	}
	l.mu.Unlock()
	if got := l.silence(); got < before-10*time.Millisecond {
		t.Fatalf("silence %v after 150ms of stalls of 3ms each (before: %v): they excused the master", got, before)
	}
	// A long stall the watchdog saw is this process's, not the master's.
	before = l.silence()
	l.mu.Lock()
	l.stallLocked(150*time.Millisecond, time.Now())
	l.mu.Unlock()
	if got := l.silence(); got > before-100*time.Millisecond {
		t.Fatalf("silence %v after a stall of 150ms was seen (before: %v)", got, before)
	}
	s.cont()
	resumed = true
	if res := wait(t, hungCh); res.err != nil {
		t.Fatalf("once the master answered: %+v", res)
	}
	quiet("once the master answered")
}

func TestLane_boundedQueueAndClose(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	l := newLane(c, "test")
	r, ch := cmd(5*time.Second, "PING")
	l.send(r)
	wait(t, ch)
	s.stop()
	defer s.cont()

	var chans []chan result
	first, firstCh := cmd(time.Minute, "PING")
	l.send(first)
	chans = append(chans, firstCh)
	taken(t, l, first, true)
	for i := 0; i < laneQueue; i++ {
		r, ch := cmd(time.Minute, "PING")
		l.send(r)
		chans = append(chans, ch)
	}
	over, overCh := cmd(time.Minute, "PING")
	l.send(over)
	if res := wait(t, overCh); !errors.Is(res.err, errBusy) || res.sent {
		t.Fatalf("beyond the queue: %+v, want busy, unsent", res)
	}
	undo, undoCh := cmd(time.Minute, "DEL", "k")
	undo.undo = true
	l.send(undo)
	chans = append(chans, undoCh)

	closed := make(chan struct{})
	go func() { l.close(); close(closed) }()
	for i, ch := range chans {
		res := wait(t, ch)
		if !errors.Is(res.err, errClosed) || res.sent != (i == 0) {
			t.Fatalf("command %d at close: %+v", i, res)
		}
	}
	s.cont() // the writer's batch returns; close waits for it
	<-closed
	after, afterCh := cmd(time.Minute, "PING")
	l.send(after)
	if res := wait(t, afterCh); !errors.Is(res.err, errClosed) {
		t.Fatalf("after close: %+v", res)
	}
}

func TestLane_resentOnceWhenTheMasterClosesTheConnection(t *testing.T) {
	s := startServer(t)
	c := newClient(t, s)
	admin := newClient(t, s)
	l := newTestLane(t, c)
	r, ch := cmd(5*time.Second, "CLIENT", "SETNAME", "lane")
	l.send(r)
	wait(t, ch)

	// The three commands below go in one batch, behind a short BLPOP.
	b := busy(t, l, 200*time.Millisecond)
	blocked, blockedCh := cmd(5*time.Second, "BLPOP", "nothing", "2")
	blocked.resend = true
	l.send(blocked)
	behind, behindCh := cmd(5*time.Second, "RPUSH", "after", "1")
	behind.resend = true
	l.send(behind)
	noResend, noResendCh := cmd(5*time.Second, "RPUSH", "after", "2")
	l.send(noResend)
	wait(t, b)
	waitFor(t, "the master blocks on the second BLPOP", func() bool {
		return strings.Contains(admin.Info(context.Background(), "clients").Val(), "blocked_clients:1\r")
	})
	// Kill the lane's connection: the master runs nothing more of it.
	n, err := admin.ClientKillByFilter(context.Background(), "TYPE", "normal", "SKIPME", "yes").Result()
	if err != nil || n == 0 {
		t.Fatalf("CLIENT KILL: %d, %v", n, err)
	}
	res := wait(t, blockedCh)
	if res.err != nil || res.v != nil || !res.resent {
		t.Fatalf("BLPOP re-sent: %+v, want a nil reply, resent", res)
	}
	if res := wait(t, behindCh); res.err != nil || !res.resent {
		t.Fatalf("RPUSH re-sent: %+v", res)
	}
	if res := wait(t, noResendCh); res.err == nil || !res.sent || !closedByMaster(res.err) {
		t.Fatalf("RPUSH without resend: %+v, want the connection's error", res)
	}
	got := admin.LRange(context.Background(), "after", 0, -1).Val()
	if len(got) != 1 || got[0] != "1" {
		t.Fatalf("after = %q, want [1]", got)
	}
}

// A command queued behind a batch that a slow master answered late (a
// busy script of 150 ms on the lane's own connection), and sent only
// then, to a master busy again (another connection's script of 120 ms,
// queued meanwhile), is answered after its deadline: the master kept its
// own batch waiting 120 ms, less than the command's 200 ms, so the lane
// delivers the reply (the Client waits on as long as the master is not
// silent, transport.Silencer). Before, it failed at its deadline, sent, and
// the master was counted down. A master that stops answering then (SIGSTOP
// once the command is sent, behind the second script) is down once its
// batch has been silent for the 200 ms: at about 350 ms; the command
// fails at its limit (1.2 s).
func TestLane_sentLateBehindASlowBatch(t *testing.T) {
	const budget = 200 * time.Millisecond
	for _, hang := range []bool{false, true} {
		t.Run(fmt.Sprintf("hung=%v", hang), func(t *testing.T) {
			s, l := connectedLane(t)
			side := newClient(t, s)
			if err := side.Ping(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}

			start := time.Now()
			slow, slowCh := cmd(5*time.Second, "EVAL", busyScript, 0, 150)
			l.send(slow)
			taken(t, l, slow, false)
			late, lateCh := cmd(budget, "SET", "a", "1", "NX", "PX", 10000)
			l.send(late)
			sideDone := make(chan error, 1)
			go func() {
				time.Sleep(25 * time.Millisecond) // runs right after the lane's script
				sideDone <- side.Eval(context.Background(), busyScript, nil, 120).Err()
			}()
			var down time.Duration
			if hang {
				waitFor(t, "the SET sent, behind the second script", func() bool {
					l.mu.Lock()
					defer l.mu.Unlock()
					return late.sent
				})
				s.stop()
				defer s.cont()
				down = untilDown(t, l).Sub(start)
			}
			res := wait(t, lateCh)
			el := time.Since(start)
			if res := wait(t, slowCh); res.err != nil {
				t.Fatalf("the slow batch: %+v", res)
			}
			l.mu.Lock()
			sentAfter := late.sentAt.Sub(start)
			l.mu.Unlock()
			t.Logf("sent after %v, settled after %v: %+v", sentAfter, el, res)
			if sentAfter < 100*time.Millisecond {
				t.Fatalf("the SET was sent after %v, before the slow batch was answered", sentAfter)
			}
			if hang {
				if !errors.Is(res.err, context.DeadlineExceeded) || !res.sent {
					t.Fatalf("hung master: %+v, want a timeout, sent", res)
				}
				// due at its batch's send + 200 ms, about 350 ms; the
				// limit is 1.2 s.
				if down > sentAfter+budget+250*time.Millisecond {
					t.Fatalf("hung master: down after %v, sent after %v, budget %v", down, sentAfter, budget)
				}
				if limit := budget + lateBound(budget); el < limit-50*time.Millisecond {
					t.Fatalf("hung master: failed after %v, before its limit %v", el, limit)
				}
				return
			}
			if err := <-sideDone; err != nil {
				t.Fatal(err)
			}
			if res.err != nil || res.v != "OK" {
				t.Fatalf("sent late behind a slow batch: %+v, want OK", res)
			}
			if el < budget {
				t.Fatalf("answered after %v, within its deadline: the case this test checks did not occur", el)
			}
		})
	}
}

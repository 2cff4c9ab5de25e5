package redlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/resp"
)

// Two addresses, one server.
//
// New rejects a master given twice by the same address, but two different
// addresses can reach one server ("localhost:6379" and "127.0.0.1:6379", a
// DNS alias, a proxy): that master would then count twice toward a quorum,
// and two clients could both hold a lock. Only the server can tell: every
// Redis server has a run_id (INFO server), 40 hex digits drawn at start.
//
// The Client asks each master for it at first contact: the first call
// that would talk to the masters (an acquisition of any kind, a
// Reentrant's too, Do, Inspect, InspectHolder) starts a probe, INFO
// server sent to every master at once through its Transport (Send, as the
// rounds' commands go: on the pipelined connection, the pooled one, the
// go-redis adapter alike), each bounded by the per-master timeout. The
// probe runs beside the call's first round rather than before it, so the
// two share one per-master timeout.
//
// Until a master is identified, its grant does not count: an acquisition
// or extension counts one vote per distinct run_id among the masters that
// granted (countGate), and a master whose probe has not answered counts
// for nothing. A round that started while the first probe ran does not
// succeed before that probe ended (at most the per-master timeout and
// probeGrace after it started), so that a list naming one server twice
// is refused on the first call. A probe's answer read after the probe
// stopped waiting is recorded all the same (a busy process reads late),
// and a grant whose master's INFO is still in flight waits for it within
// the round's own bound (Client.awaitProbe). Once two masters name the
// same run_id, every call that talks to the masters fails at once with
// an error matching ErrInvalid that names both, and a round in flight
// fails with it and rolls back. A master that did not answer the probe
// is asked again in the background, at most once per identifyRetry (once
// per reprobeGranted after it granted); its grants count once it
// answered. A master whose ACL refuses INFO, or whose reply carries no
// well-formed run_id, is not asked again (an error reply that says "not
// now", BUSY say, is no answer: notNow): it cannot be told apart, and
// its grant counts as one vote of its own, as its address does.
// docs/design.md, "Counting distinct servers", gives the argument;
// docs/operations.md says why the check is made at first contact rather
// than in New.

// identifyRetry spaces the probes of a master that did not answer.
const identifyRetry = time.Second

// reprobeGranted spaces the probes of a master that did not answer its
// last probe but granted since (reprobeGranted): it answers, so it is
// asked again sooner than identifyRetry.
const reprobeGranted = 100 * time.Millisecond

// probeGrace is how long past its deadline the probe waits for a
// transport to complete a command (a pipelined one may deliver a reply
// late); an answer later than that is not waited for.
const probeGrace = 100 * time.Millisecond

// identity is what the Client learned of its masters' run_ids.
type identity struct {
	settled atomic.Bool              // every master identified or known unidentifiable
	retryAt atomic.Int64             // unix ns before which no master is due for a probe
	dup     atomic.Pointer[dupError] // two masters are one server
	stopped atomic.Bool              // Close stopped a probe, or a round waiting for one
	all     atomic.Pointer[[]string] // every master's run_id, once all are known (known)

	mu      sync.Mutex    // guards the fields below
	first   chan struct{} // closed when the first probe ended; nil until it started
	ids     []string      // a master's run_id, "" while unknown
	final   []bool        // identified, or cannot be
	tried   []time.Time   // the last probe's start
	probing []bool        // a probe of the master runs
	asking  []int         // INFO commands sent to the master and not completed yet
	news    chan struct{} // closed, and replaced, at each completion of an INFO
}

// known returns every master's run_id, or nil while one is unknown (or
// cannot be known). The caller must not modify it.
func (id *identity) known() []string {
	if p := id.all.Load(); p != nil {
		return *p
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if len(id.ids) == 0 || slices.Contains(id.ids, "") {
		return nil
	}
	ids := slices.Clone(id.ids)
	id.all.Store(&ids)
	return ids
}

// dupError is two masters found to be one server.
type dupError struct{ err error }

// identify is the first-contact check of every call that talks to the
// masters: it returns the duplicate-master error once one is known,
// starts the probe of every master the first time, and starts background
// probes of masters not yet identified. It never waits: the rounds count
// only identified masters (countGate).
func (c *Client) identify() error {
	id := &c.ident
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	if id.settled.Load() || time.Now().UnixNano() < id.retryAt.Load() {
		return nil // nothing to ask, or nothing due: no lock on the hot path
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.first == nil {
		n := len(c.masters)
		id.ids, id.final, id.tried, id.probing = make([]string, n), make([]bool, n), make([]time.Time, n), make([]bool, n)
		id.asking, id.news = make([]int, n), make(chan struct{})
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		first := make(chan struct{})
		if c.probe(all, func() { close(first) }) {
			id.first = first
		}
		return nil // not started: closed, the call fails with ErrClosed
	}
	select {
	case <-id.first:
		var due []int
		for i := range c.masters {
			if !id.final[i] && !id.probing[i] && time.Since(id.tried[i]) >= identifyRetry {
				due = append(due, i)
			}
		}
		if len(due) > 0 {
			c.probe(due, nil)
		}
		id.retryAt.Store(time.Now().Add(identifyRetry).UnixNano())
	default: // the first probe runs
	}
	return nil
}

// identified waits until the first probe has ended, or ctx ends, and
// returns the duplicate-master error if one is known then: for a call
// that counts no grants (Inspect) but refuses one server twice as the
// others do.
func (c *Client) identified(ctx context.Context) error {
	id := &c.ident
	if id.settled.Load() && id.dup.Load() == nil {
		return nil
	}
	id.mu.Lock()
	first := id.first
	id.mu.Unlock()
	if first != nil {
		select {
		case <-first:
		case <-ctx.Done():
		case <-c.closing:
		}
	}
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	return nil
}

// reprobeGranted asks again, in the background, the masters that granted
// in votes but are not identified, unless one is being asked or was less
// than reprobeGranted ago: their grants count once they are identified,
// and a master that grants answers. Nothing is asked while the first
// probe runs.
func (c *Client) reprobeGranted(votes []vote) {
	id := &c.ident
	id.mu.Lock()
	defer id.mu.Unlock()
	if id.first == nil {
		return
	}
	select {
	case <-id.first:
	default:
		return
	}
	var due []int
	for i, v := range votes {
		if v == voteYes && !id.final[i] && !id.probing[i] && time.Since(id.tried[i]) >= reprobeGranted {
			due = append(due, i)
		}
	}
	if len(due) > 0 {
		c.probe(due, nil)
	}
}

// countGate is how a round counts grants while some master is not
// identified (or two are one server): nil on the hot path, once every
// master is. A grant counts when its master's run_id is known and no
// master of a lower index that also granted has the same run_id, or when
// its master answered the probe without a run_id (it cannot be told
// apart, see above). A grant from a master not identified yet waits while
// the first probe runs, and after it while an INFO sent to that master is
// still in flight (the master answers: it granted); it counts for nothing
// once neither is so, or once the round stopped waiting (late).
type countGate struct {
	id    *identity
	first <-chan struct{} // the first probe's end; nil once it ended (or never started)
	news  <-chan struct{} // closed at the next completion of an INFO (identity.news)
	late  bool            // the round waits no more for a probe in flight (awaitProbe)
}

// gate returns the gate of a round that counts grants, or nil when every
// master is identified and distinct.
func (id *identity) gate() *countGate {
	if id.settled.Load() && id.dup.Load() == nil {
		return nil
	}
	id.mu.Lock()
	g := &countGate{id: id, first: id.first}
	id.mu.Unlock()
	g.ended()
	return g
}

// ended reports whether the first probe has ended.
func (g *countGate) ended() bool {
	if g.first == nil {
		return true
	}
	select {
	case <-g.first:
		g.first = nil
		return true
	default:
		return false
	}
}

// count recounts t's grants (t.yes) by the identities known now: the
// grants that count, those that may count once the first probe ends or
// their master's probe in flight answers (pending), and those that never
// will in this round (lost).
func (g *countGate) count(t *tally) {
	ended := g.ended()
	t.yes, t.pending, t.lost, t.probing = 0, 0, 0, !ended
	g.id.mu.Lock()
	defer g.id.mu.Unlock()
	g.news = g.id.news
	for i, v := range t.votes {
		if v != voteYes {
			continue
		}
		switch g.id.grantLocked(i, t.votes) {
		case grantCounts:
			t.yes++
		case grantUnknown:
			if !ended || !g.late && i < len(g.id.asking) && g.id.asking[i] > 0 {
				t.pending++
			} else {
				t.lost++
			}
		default:
			t.lost++
		}
	}
}

// uncounted returns the masters that granted but whose grant does not
// count (yet), for the error of a round that failed.
func (g *countGate) uncounted(votes []vote) []int {
	g.id.mu.Lock()
	defer g.id.mu.Unlock()
	var out []int
	for i, v := range votes {
		if v == voteYes && g.id.grantLocked(i, votes) != grantCounts {
			out = append(out, i)
		}
	}
	return out
}

// grant is how master i's grant counts.
type grant uint8

const (
	grantCounts  grant = iota // identified and distinct, or unidentifiable
	grantUnknown              // its master is not identified
	grantTwice                // its server was counted under another address
)

// grantLocked says how master i's grant counts among votes. id.mu is held.
func (id *identity) grantLocked(i int, votes []vote) grant {
	switch {
	case i < len(id.ids) && id.ids[i] != "":
		for j := range i {
			if votes[j] == voteYes && id.ids[j] == id.ids[i] {
				return grantTwice
			}
		}
		return grantCounts
	case i < len(id.final) && id.final[i]:
		return grantCounts // answered without a run_id: its own vote
	default:
		return grantUnknown
	}
}

// probe starts probing masters idx in the background, then records what
// they answered and calls done (if not nil). It reports false, starting
// nothing, when the client is closed. id.mu is held.
func (c *Client) probe(idx []int, done func()) bool {
	if !c.addWorker() {
		return false
	}
	id := &c.ident
	now := time.Now()
	for _, i := range idx {
		id.tried[i], id.probing[i] = now, true
		id.asking[i]++ // before Send, which may complete it at once
	}
	go func() {
		defer c.workers.Done()
		c.askRunIDs(idx)
		id.mu.Lock()
		if done != nil {
			id.retryAt.Store(time.Now().Add(identifyRetry).UnixNano())
		}
		id.mu.Unlock()
		if done != nil {
			done()
		}
	}()
	return true
}

// probeResult is one master's answer to the probe.
type probeResult struct {
	runID string
	final bool // runID is known, or the master cannot be identified
}

// recordLocked records master i's probe and looks for a master with the
// same run_id. id.mu is held.
func (c *Client) recordLocked(i int, r probeResult) {
	id := &c.ident
	id.ids[i], id.final[i] = r.runID, r.final
	if r.runID != "" {
		for j, other := range id.ids {
			if j != i && other == r.runID {
				a, b := min(i, j), max(i, j)
				err := fmt.Errorf("%w: masters %d (%s) and %d (%s) are the same Redis server (run_id %s): "+
					"a master listed twice counts twice toward a quorum; list each server once",
					ErrInvalid, a, c.masters[a].addr, b, c.masters[b].addr, r.runID)
				id.dup.CompareAndSwap(nil, &dupError{err})
				break
			}
		}
	}
	settled := true
	for _, f := range id.final {
		settled = settled && f
	}
	id.settled.Store(settled)
}

// probeCompleter receives a probe command's outcome (completer) and
// records it (Client.probeAnswered), late too, then tells the probe (ch).
// A transport that completes a command twice (it breaks its contract) is
// heard once.
type probeCompleter struct {
	i    int
	ch   chan<- int
	done atomic.Bool
	// c and sent: the probe's answer, read late too, is a round trip
	// for the adaptive bound (stall.Bound.Note), the first a Client sees.
	c    *Client
	sent time.Time
}

func (p *probeCompleter) complete(reply any, err error, _ SendInfo) {
	if p.done.Swap(true) {
		return
	}
	var rpe ReplyError
	if err == nil || errors.As(err, &rpe) {
		p.c.bound.Note(p.i, p.sent, time.Now())
	}
	p.c.probeAnswered(p.i, probeAnswerResult(reply, err))
	p.ch <- p.i // buffered, one per command: never blocks
}

// probeAnswered records master i's answer to an INFO of a probe, whenever
// it comes: one read after the probe stopped waiting (a busy process
// reads late) identifies the master as well, and a round waiting for it
// (countGate) hears of it. A master identified, or known unidentifiable,
// stays so.
func (c *Client) probeAnswered(i int, r probeResult) {
	id := &c.ident
	id.mu.Lock()
	defer id.mu.Unlock()
	id.asking[i]--
	if r.final && !id.final[i] {
		c.recordLocked(i, r)
	}
	close(id.news)
	id.news = make(chan struct{})
}

// askRunIDs sends INFO server to masters idx through their transports,
// whose answers are recorded as they arrive (probeCompleter), and waits
// for them at most the per-master timeout (and probeGrace), or until the
// client closes; then it takes the rest as not answered (asked again
// later), though an answer still in flight is recorded when it comes.
func (c *Client) askRunIDs(idx []int) {
	id := &c.ident
	ch := make(chan int, len(idx))
	sent := time.Now()
	deadline := sent.Add(c.timeout)
	for _, i := range idx {
		cmd := &Command{Name: "INFO", Args: []any{"server"}, Deadline: deadline, Reply: ReplyInfo,
			Grace: c.timeout, Resend: true, DropWhenDown: true, To: &probeCompleter{i: i, ch: ch, c: c, sent: sent}}
		c.masters[i].t.Send(cmd)
	}
	heard := make([]bool, len(c.masters))
	defer func() {
		id.mu.Lock()
		for _, i := range idx {
			if !heard[i] {
				id.probing[i] = false
			}
		}
		id.mu.Unlock()
	}()
	// The probe is a client's first traffic, which dials its masters: the
	// round beat tells a dial that timed out in a stall of this process
	// from one the master failed (mux.dialer), as it does for a round.
	c.stalls.Rounds.Enter()
	defer c.stalls.Rounds.Leave()
	t := time.NewTimer(time.Until(deadline) + probeGrace)
	defer t.Stop()
	for range idx {
		select {
		case i := <-ch:
			heard[i] = true
			id.mu.Lock()
			id.probing[i] = false
			id.mu.Unlock()
		case <-t.C:
			return
		case <-c.closing:
			id.stopped.Store(true)
			return
		}
	}
}

// probeAnswerResult reads a master's answer to INFO server (untrusted).
func probeAnswerResult(reply any, err error) probeResult {
	if err != nil {
		var rpe ReplyError
		var be *fault.BadBytesError
		var de *fault.DesyncError
		if errors.As(err, &rpe) && notNow(string(rpe)) {
			// "Not now" (a script running, a data set loading): the
			// server answers INFO once that ends, so it is asked again
			// as one that did not answer. Taken for a refusal, one
			// server under two addresses would count twice for good.
			return probeResult{}
		}
		if errors.As(err, &rpe) || errors.As(err, &be) || errors.As(err, &de) || errors.Is(err, errPanic) {
			// It answered: an error reply (an ACL without INFO), or bytes
			// no server sends. Not identified, not asked again.
			return probeResult{final: true}
		}
		return probeResult{} // did not answer: ask again later
	}
	if !ReplyInfo.Fits(reply) {
		return probeResult{final: true}
	}
	return probeResult{runID: resp.RunID(reply), final: true}
}

// notNow reports whether an error reply is one a Redis server sends for a
// while and then stops sending (a script or function running past
// busy-reply-threshold, a data set loading, a cluster or replica link
// down, a full client table), rather than a refusal of INFO itself.
func notNow(msg string) bool {
	for _, code := range []string{"BUSY ", "LOADING ", "MASTERDOWN ", "TRYAGAIN ", "CLUSTERDOWN ", "ERR max number of clients reached"} {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}

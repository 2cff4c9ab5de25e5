package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
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
// Reentrant's too, Do, Inspect, an Election's calls) starts a
// probe, INFO server sent to every master at once through its Transport
// (Send, as the rounds' commands go: on the pipelined connection, the
// pooled one, the go-redis adapter alike), each bounded by the per-master
// timeout. The calls made while it runs wait for it, each at most until
// its own ctx ends (the probe goes on for the others; nothing is sent for
// that call, and it returns an error matching ctx.Err() that names the
// masters the probe still awaited: for an acquisition a *QuorumError
// matching ErrNotAcquired too, as the acquisitions document; Inspect
// reports ctx's end in each master's state instead) or the client is closed (the probe stops). From
// then on, once two masters name the same run_id, every such call fails
// at once with an error matching ErrInvalid that names both masters. A
// master that did not answer the probe is asked again, at most once per
// identifyRetry, in the background: a hung master does not slow the calls
// down. A master whose ACL refuses INFO, or whose reply carries no
// well-formed run_id, is not identified and not asked again: it cannot be
// told apart. docs/operations.md says why the check is made at first
// contact rather than in New.

// identifyRetry spaces the probes of a master that did not answer.
const identifyRetry = time.Second

// maxInfoReply bounds the INFO server reply the probe reads: a server's is
// about 1.5 KB; a master sending more is not identified.
const maxInfoReply = 64 << 10

// probeGrace is how long past its deadline the probe waits for a
// transport to complete a command (a pipelined one may deliver a reply
// late); an answer later than that is not waited for.
const probeGrace = 100 * time.Millisecond

// identity is what the Client learned of its masters' run_ids.
type identity struct {
	settled atomic.Bool              // every master identified or known unidentifiable
	retryAt atomic.Int64             // unix ns before which no master is due for a probe
	dup     atomic.Pointer[dupError] // two masters are one server
	all     atomic.Pointer[[]string] // every master's run_id, once all are known (known)

	mu      sync.Mutex    // guards the fields below
	first   chan struct{} // closed when the first probe ended; nil until it started
	ids     []string      // a master's run_id, "" while unknown
	final   []bool        // identified, or cannot be
	tried   []time.Time   // the last probe's start
	probing []bool        // a probe of the master runs
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

// identWaitError is the error of a call whose ctx ended while it waited
// for the first probe: it matches ctx.Err() and names the masters the
// probe still awaited. An acquisition turns it into a *QuorumError
// matching ErrNotAcquired too (identWaitFailed), as it documents.
type identWaitError struct {
	err     error
	pending []int    // the masters whose answer the probe awaited
	addrs   []string // the masters' addresses
}

func (e *identWaitError) Error() string {
	var b strings.Builder
	b.WriteString("redlock: ")
	b.WriteString(e.detail())
	b.WriteString(": ")
	b.WriteString(e.err.Error())
	return b.String()
}

// detail says what was waited for: "nothing sent: the context ended
// during the masters' identity check (first contact, INFO server), which
// awaited master 2 (127.0.0.1:7003)".
func (e *identWaitError) detail() string {
	var b strings.Builder
	b.WriteString("nothing sent: the context ended during the masters' identity check (first contact, INFO server)")
	if len(e.pending) > 0 {
		b.WriteString(", which awaited ")
		for k, i := range e.pending {
			if k > 0 {
				b.WriteString(", ")
			}
			b.WriteString("master ")
			b.WriteString(strconv.Itoa(i))
			if i < len(e.addrs) {
				b.WriteString(" (")
				b.WriteString(e.addrs[i])
				b.WriteString(")")
			}
		}
	}
	return b.String()
}

func (e *identWaitError) Unwrap() error { return e.err }

// identWaitFailed returns err, or, when it is an identWaitError, the
// *QuorumError of an acquisition of key that ended before anything was
// sent: it matches ErrNotAcquired and ctx.Err(), and its Unanswered are
// the masters the identity check awaited.
func (c *Client) identWaitFailed(err error, key string) error {
	var we *identWaitError
	if !errors.As(err, &we) {
		return err
	}
	return &QuorumError{Op: "acquire", Key: key, Masters: len(c.masters), Quorum: c.quorum,
		Unanswered: we.pending, sentinel: ErrNotAcquired, ctxErr: we.err, addrs: c.addrs, before: we.detail()}
}

// identify is the first-contact check of every call that talks to the
// masters: it returns the duplicate-master error once one is known,
// starts the probe of every master the first time and waits for it (at
// most until ctx ends), and starts background probes of masters not yet
// identified.
func (c *Client) identify(ctx context.Context) error {
	id := &c.ident
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	if id.settled.Load() || time.Now().UnixNano() < id.retryAt.Load() {
		return nil // nothing to ask, or nothing due: no lock on the hot path
	}
	id.mu.Lock()
	if id.first == nil {
		n := len(c.masters)
		id.ids, id.final, id.tried, id.probing = make([]string, n), make([]bool, n), make([]time.Time, n), make([]bool, n)
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		first := make(chan struct{})
		if !c.probe(all, func() { close(first) }) {
			id.mu.Unlock()
			return nil // closed: the call fails with ErrClosed
		}
		id.first = first
	} else {
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
	}
	first := id.first
	id.mu.Unlock()
	select {
	case <-first:
	default:
		select {
		case <-first:
		case <-ctx.Done():
			we := &identWaitError{err: ctx.Err(), addrs: c.addrs}
			id.mu.Lock()
			for i, p := range id.probing {
				if p {
					we.pending = append(we.pending, i)
				}
			}
			id.mu.Unlock()
			return we
		case <-c.closing:
			return nil // the call fails with ErrClosed
		}
	}
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	return nil
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

// probeAnswer is master i's completion of the probe.
type probeAnswer struct {
	i     int
	reply any
	err   error
}

// probeCompleter receives a probe command's outcome (completer). A
// transport that completes a command twice (it breaks its contract) is
// heard once.
type probeCompleter struct {
	i    int
	ch   chan<- probeAnswer
	done atomic.Bool
}

func (p *probeCompleter) complete(reply any, err error, _ SendInfo) {
	if p.done.Swap(true) {
		return
	}
	p.ch <- probeAnswer{p.i, reply, err} // buffered, one per command: never blocks
}

// askRunIDs sends INFO server to masters idx through their transports and
// records what each answers as it arrives, waiting at most the
// per-master timeout (and probeGrace), or until the client closes; then
// it records the rest as not answered (asked again later).
func (c *Client) askRunIDs(idx []int) {
	id := &c.ident
	ch := make(chan probeAnswer, len(idx))
	deadline := time.Now().Add(c.timeout)
	for _, i := range idx {
		cmd := &Command{Name: "INFO", Args: []any{"server"}, Deadline: deadline, Reply: ReplyInfo,
			Resend: true, DropWhenDown: true, To: &probeCompleter{i: i, ch: ch}}
		c.masters[i].t.Send(cmd)
	}
	defer func() {
		id.mu.Lock()
		for _, i := range idx {
			if id.probing[i] {
				id.probing[i] = false
				c.recordLocked(i, probeResult{})
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
		case a := <-ch:
			r := probeAnswerResult(a.reply, a.err)
			id.mu.Lock()
			id.probing[a.i] = false
			c.recordLocked(a.i, r)
			id.mu.Unlock()
		case <-t.C:
			return
		case <-c.closing:
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
	return probeResult{runID: runID(reply), final: true}
}

// runID returns the run_id of an INFO server reply, or "" when the reply
// is not a bulk string ([]byte, or a string as Inspector allows) of bounded size or has no run_id of 40 lowercase
// hex digits. The reply is untrusted.
func runID(reply any) string {
	var b []byte
	switch v := reply.(type) {
	case []byte: // redigo's bulk string
		b = v
	case string: // an Inspector's (the go-redis adapter's) bulk string
		if len(v) > maxInfoReply {
			return ""
		}
		b = []byte(v)
	default:
		return ""
	}
	if len(b) > maxInfoReply {
		return ""
	}
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		v, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r"), []byte("run_id:"))
		if !ok {
			continue
		}
		if len(v) != 40 {
			return ""
		}
		for _, ch := range v {
			if (ch < '0' || ch > '9') && (ch < 'a' || ch > 'f') {
				return ""
			}
		}
		return string(v)
	}
	return ""
}

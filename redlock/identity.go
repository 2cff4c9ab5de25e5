package redlock

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
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
// that would talk to the masters (an acquisition, Do, Inspect) first sends
// INFO server to every master at once, each bounded by the per-master
// timeout, and waits for the answers; concurrent first calls wait for the
// same probe. From then on, once two masters name the same run_id, every
// such call fails at once with an error matching ErrInvalid that names
// both masters. A master that did not answer the probe is asked again, at
// most once per identifyRetry, in the background: a hung master does not
// slow the calls down. A master whose transport cannot run the probe (no
// Inspector ability), whose ACL refuses
// INFO, or whose reply carries no well-formed run_id is not identified and
// not asked again: it cannot be told apart. docs/operations.md says why
// the check is made at first contact rather than in New.

// identifyRetry spaces the probes of a master that did not answer.
const identifyRetry = time.Second

// maxInfoReply bounds the INFO server reply the probe reads: a server's is
// about 1.5 KB; a master sending more is not identified.
const maxInfoReply = 64 << 10

// identity is what the Client learned of its masters' run_ids.
type identity struct {
	settled atomic.Bool              // every master identified or known unidentifiable
	retryAt atomic.Int64             // unix ns before which no master is due for a probe
	dup     atomic.Pointer[dupError] // two masters are one server

	mu      sync.Mutex // serialises the first probe; guards the fields below
	started bool
	ids     []string    // a master's run_id, "" while unknown
	final   []bool      // identified, or cannot be
	tried   []time.Time // the last probe's start
	probing []bool      // a background probe runs
}

// dupError is two masters found to be one server.
type dupError struct{ err error }

// identify is the first-contact check of every call that talks to the
// masters: it returns the duplicate-master error once one is known,
// probes every master the first time, and starts background probes of
// masters not yet identified.
func (c *Client) identify(ctx context.Context) error {
	if d := c.ident.dup.Load(); d != nil {
		return d.err
	}
	if c.ident.settled.Load() || time.Now().UnixNano() < c.ident.retryAt.Load() {
		return nil // nothing to ask, or nothing due: no lock on the hot path
	}
	id := &c.ident
	id.mu.Lock()
	if !id.started {
		id.started = true
		n := len(c.masters)
		id.ids, id.final, id.tried, id.probing = make([]string, n), make([]bool, n), make([]time.Time, n), make([]bool, n)
		var wg sync.WaitGroup
		results := make([]probeResult, n)
		for i := range c.masters {
			id.tried[i] = time.Now()
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				results[i] = c.probe(ctx, &c.masters[i])
			}(i)
		}
		wg.Wait()
		for i, r := range results {
			c.recordLocked(i, r)
		}
		if ctxEnded(ctx) && !id.settled.Load() && id.dup.Load() == nil {
			// The caller's ctx ended during the probe, not the masters'
			// time: what did not answer was not really asked. The next
			// call probes again in the foreground; else calls in the
			// next identifyRetry would go unchecked.
			id.started = false
			id.mu.Unlock()
			return nil
		}
	} else {
		for i := range c.masters {
			if id.final[i] || id.probing[i] || time.Since(id.tried[i]) < identifyRetry {
				continue
			}
			c.mu.Lock()
			closed := c.closed
			if !closed {
				c.workers.Add(1)
			}
			c.mu.Unlock()
			if closed {
				break
			}
			id.tried[i], id.probing[i] = time.Now(), true
			go func(i int) {
				defer c.workers.Done()
				r := c.probe(context.Background(), &c.masters[i])
				id.mu.Lock()
				defer id.mu.Unlock()
				id.probing[i] = false
				c.recordLocked(i, r)
			}(i)
		}
	}
	id.retryAt.Store(time.Now().Add(identifyRetry).UnixNano())
	id.mu.Unlock()
	if d := id.dup.Load(); d != nil {
		return d.err
	}
	return nil
}

// ctxEnded reports whether ctx has ended or its deadline has passed (a
// transport may fail at the deadline before ctx.Err() says so).
func ctxEnded(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ctx.Err() != nil || ok && !time.Now().Before(dl)
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

// probe asks master m for its run_id, within the per-master timeout.
func (c *Client) probe(ctx context.Context, m *master) (r probeResult) {
	in, ok := m.t.(Inspector)
	if !ok {
		return probeResult{final: true} // cannot ask
	}
	defer func() {
		if p := recover(); p != nil { // redigo's parser on a pool that is not guarded
			r = probeResult{final: true}
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	replies, err := in.Inspect(ctx, []layout.Command{{Name: "INFO", Args: []any{"server"}}})
	if err != nil {
		var pe *pool.ProtocolError
		if errors.As(err, &pe) {
			// It answered, with bytes no server sends (a reply over the
			// guard's limits): not identified, not asked again.
			return probeResult{final: true}
		}
		return probeResult{} // did not answer: ask again later
	}
	if len(replies) != 1 {
		return probeResult{final: true}
	}
	// An error reply (an ACL without INFO) is a value of type error in its
	// place: no run_id, not asked again.
	return probeResult{runID: runID(replies[0]), final: true}
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
			if !('0' <= ch && ch <= '9' || 'a' <= ch && ch <= 'f') {
				return ""
			}
		}
		return string(v)
	}
	return ""
}

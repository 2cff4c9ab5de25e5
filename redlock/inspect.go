package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
)

// Inspection is what every master holds for one key (Client.Inspect).
type Inspection struct {
	Key string
	// Masters has one entry per master, in the order given to New.
	Masters []MasterState
}

// MasterState is what one master holds for a key, or why it could not be
// read.
type MasterState struct {
	Index int    // the master's position in the list given to New
	Addr  string // the master's address, never with credentials
	// State is what the master holds (package layout describes it); its
	// strings are as the master sent them, untrusted: escape them before
	// printing. The zero State when Err is set.
	State layout.State
	// RTT is how long the first round trip to the master took.
	RTT time.Duration
	// Err is nil, or a *NodeError naming the master and its failure: it
	// could not be reached or did not answer in time (ErrMasterTimeout),
	// answered with an error, or sent a reply of the wrong shape
	// (layout.ErrMalformed).
	Err error
}

// Inspect reads what each master holds for key (layout.State: the lock's
// kind, holders with tokens and remaining TTLs, readers and writer, a fair
// lock's queue, the fencing counter, metadata), for operators and tests
// (redlock status). It only reads, all masters at once, each within the
// per-master timeout and ctx; the result is a snapshot. A master's failure
// is in its MasterState (errors.ErrUnsupported when its transport is no
// Inspector); Inspect's own error is ErrInvalid (nil ctx, empty key, a
// Client New did not make) or ErrClosed. Replies are untrusted and what is
// kept is bounded: docs/design.md, "What a master holds".
func (c *Client) Inspect(ctx context.Context, key string) (Inspection, error) {
	if err := c.check(ctx); err != nil {
		var we *identWaitError
		if !errors.As(err, &we) {
			return Inspection{}, err
		}
		// ctx ended during the identity check at first contact: each
		// master reports it in its MasterState, as documented.
	}
	if key == "" {
		return Inspection{}, fmt.Errorf("%w: empty key", ErrInvalid)
	}
	if err := c.closedErr("inspect", key); err != nil {
		return Inspection{}, err
	}
	ctx, cancel := c.untilClosed(ctx)
	defer cancel()
	in := Inspection{Key: key, Masters: make([]MasterState, len(c.masters))}
	var wg sync.WaitGroup
	for i := range c.masters {
		wg.Add(1)
		go func(m *master) {
			defer wg.Done()
			in.Masters[m.index] = c.inspect(ctx, m, key)
		}(&c.masters[i])
	}
	wg.Wait()
	if err := c.closedErr("inspect", key); err != nil {
		return Inspection{}, err // what was read may be of after the Close
	}
	return in, nil
}

// inspect reads one master through its transport's Inspector ability.
// (Inspection does not go through the lock's command path: it is rare,
// read-only, and its replies have shapes no lock command has.)
func (c *Client) inspect(ctx context.Context, m *master, key string) (ms MasterState) {
	ms.Index, ms.Addr = m.index, m.addr
	fail := func(err error) MasterState {
		ms.State, ms.Err = layout.State{}, c.nodeError(m, err)
		return ms
	}
	defer func() {
		if p := recover(); p != nil { // redigo's parser on a pool that is not guarded
			ms = fail(panicError(p))
		}
	}()
	in, ok := m.t.(Inspector)
	if !ok {
		return fail(fmt.Errorf("%w: the transport cannot inspect (it is not a transport.Inspector)", errors.ErrUnsupported))
	}
	r := layout.NewReader(key)
	for first := true; ; first = false {
		cmds := r.Next()
		if cmds == nil {
			break
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, c.timeout)
		replies, err := in.Inspect(rctx, cmds)
		cancel()
		if first {
			ms.RTT = time.Since(start)
		}
		if err == nil && len(replies) != len(cmds) {
			err = fmt.Errorf("inspection: %d replies to %d commands", len(replies), len(cmds))
		}
		if err != nil {
			return fail(err)
		}
		if err := r.Feed(replies); err != nil {
			return fail(err)
		}
	}
	ms.State = r.State()
	return ms
}

// inspectPool runs cmds on a connection of p in one round trip, bounded
// by ctx's deadline: the Inspector ability of both redigo transports.
func inspectPool(ctx context.Context, p pool.Pool, cmds []layout.Command) ([]any, error) {
	conn, err := p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	return roundTrip(ctx, conn, cmds)
}

// roundTrip sends cmds on conn in one write and reads their replies, all
// within ctx's deadline (Client.inspect bounds it by the per-master
// timeout). An error reply is returned in its place among the replies; any other failure ends the round trip and
// leaves conn broken (a read past its deadline breaks a redigo
// connection), so that its pool discards it rather than hand its next
// user the replies still due.
func roundTrip(ctx context.Context, conn redis.Conn, cmds []layout.Command) ([]any, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Second) // Inspect always sets one
	}
	for _, cmd := range cmds {
		if err := conn.Send(cmd.Name, cmd.Args...); err != nil {
			return nil, err
		}
	}
	if err := conn.Flush(); err != nil {
		return nil, err
	}
	left := time.Until(deadline)
	if left <= 0 {
		// Past the deadline: replies already buffered are still taken,
		// else the read fails at once and breaks conn.
		left = -time.Nanosecond
	}
	// One read of every reply, by redigo's Do(""), which counts them as
	// read before it reads: when its parser panics on a hostile master (a
	// pool this package did not make), the pool's Close of conn has no
	// replies left to wait for. Received one by one, the replies after the
	// panic stayed due, and Close waited for them without a deadline — for
	// ever, on a master that sent no more.
	v, err := redis.DoWithTimeout(conn, left, "")
	if err != nil {
		return nil, err
	}
	replies, ok := v.([]any)
	if !ok || len(replies) != len(cmds) {
		return nil, fmt.Errorf("inspection: %d commands, replies %T", len(cmds), v)
	}
	return replies, nil // an error reply in its place, as a redis.Error
}

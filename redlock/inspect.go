package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/inspect"
	"github.com/quorumlock/quorumlock/layout"
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
	return c.inspectEach(ctx, key, c.inspect)
}

// inspectEach reads key on every master at once with read, and checks
// what Inspect and InspectHolder check before and after.
func (c *Client) inspectEach(ctx context.Context, key string, read func(context.Context, *master, string) MasterState) (Inspection, error) {
	if err := c.check(ctx); err != nil {
		return Inspection{}, err
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
			in.Masters[m.index] = read(ctx, m, key)
		}(&c.masters[i])
	}
	wg.Wait()
	// Read beside the first probe: one server under two addresses is
	// refused here too once the probe tells (bounded by its timeout).
	if err := c.identified(ctx); err != nil {
		return Inspection{}, err
	}
	if err := c.closedErr("inspect", key); err != nil {
		return Inspection{}, err // what was read may be of after the Close
	}
	return in, nil
}

// inspect reads one master through its transport's Inspector ability
// (internal/inspect's Read). (Inspection does not go through the lock's
// command path: it is rare, read-only, and its replies have shapes no
// lock command has.)
func (c *Client) inspect(ctx context.Context, m *master, key string) MasterState {
	return c.inspectOn(m, func(in Inspector) (layout.State, time.Duration, error) {
		return inspect.Read(ctx, in, key, c.timeout)
	})
}

// inspectOn reads one master with read, given its Inspector: the
// MasterState has the master's index and address, and read's state and
// round trip, or its error (or a panic of redigo's parser on a pool that
// is not guarded) as a *NodeError with the zero State.
func (c *Client) inspectOn(m *master, read func(Inspector) (layout.State, time.Duration, error)) (ms MasterState) {
	ms.Index, ms.Addr = m.index, m.addr
	fail := func(err error) MasterState {
		ms.State, ms.Err = layout.State{}, c.nodeError(m, err)
		return ms
	}
	defer func() {
		if p := recover(); p != nil {
			ms = fail(fault.PanicError(p))
		}
	}()
	in, ok := m.t.(Inspector)
	if !ok {
		return fail(fmt.Errorf("%w: the transport cannot inspect (it is not a transport.Inspector)", errors.ErrUnsupported))
	}
	st, rtt, err := read(in)
	ms.RTT = rtt
	if err != nil {
		return fail(err)
	}
	ms.State = st
	return ms
}

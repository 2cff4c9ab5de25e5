package redigot

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/stall"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// Quorum members that are Redis Clusters, on redigo.
//
// A member written cluster://HOST:PORT[+HOST:PORT...] (NewFromAddrs) is one
// Redis Cluster reached through those seeds. Its transport, a
// clusterTransport, keeps the cluster's slot map (from CLUSTER SLOTS of
// any node that answers) and one pipelined mux per primary, made on first
// use with the member's pool options (TLS, credentials, timeouts apply to
// every node). Each lock command touches the keys of one slot (companion
// keys carry the lock key's hash tag; WithClusterSlots refuses the rest),
// so it goes to the one node that owns that slot:
//
//   - MOVED slot addr: the command did not run. The slot's owner is
//     recorded, a refresh of the whole map is asked for (one at a time),
//     and the command is sent again to addr, within its deadline.
//   - ASK slot addr (a slot being migrated, the key already moved): the
//     command did not run. ASKING and the command are sent back to back
//     on a connection of their own to addr (ASKING holds for the next
//     command of its connection only; a pipelined connection shared by
//     every goroutine cannot promise that without a change to the mux,
//     and an ASK lasts only while a slot migrates).
//   - TRYAGAIN (a multi-key script whose keys are split by a migration):
//     sent again after a short pause, within the deadline.
//   - CLUSTERDOWN, or more than maxRedirects redirections: the member's
//     failure for this command, as any error reply is.
//
// Every address a node names (CLUSTER SLOTS, MOVED, ASK) is untrusted:
// it must be host:port with a valid port, a member names at most
// pool.MaxClusterNodes nodes, and a member given by loopback seeds is
// followed only to loopback addresses (other seeds never to loopback;
// pool.ClusterSpec.Dialable). A redirection elsewhere fails the command,
// naming the node, and nothing is dialed.
//
// The transport is not Ordered: a redirected command may run after one
// sent later, so the Client chains a holder's commands. Subscribe opens
// one subscription on any node that answers (a cluster broadcasts every
// PUBLISH to all its nodes); Inspect runs on the owner of the key's slot.

// maxRedirects bounds the MOVED and ASK redirections one command follows.
const maxRedirects = 5

// tryAgainPause spaces the tries of a command answered TRYAGAIN.
const tryAgainPause = 20 * time.Millisecond

// refreshSpacing spaces the slot map's refreshes: the MOVED replies of a
// migration record their slot at once, so one refresh per spacing is
// enough.
const refreshSpacing = 50 * time.Millisecond

// clusterTransport is the redigo Transport of one quorum member that is a
// Redis Cluster.
type clusterTransport struct {
	addr    string // cluster:// and the seeds, sorted, joined by '+'
	spec    pool.ClusterSpec
	opts    []pool.Option
	timeout time.Duration // the client's per-master timeout
	stalls  *stall.Stalls // the client's stall detector, shared by its nodes' muxes

	slots atomic.Pointer[slotMap] // nil until first read
	done  chan struct{}           // closed by Close
	// life ends at Close (end): an ASK's connection of its own is closed
	// then, so that Close does not wait out its read.
	life context.Context
	end  context.CancelFunc
	wg   sync.WaitGroup // refreshes, ASK tries, TRYAGAIN pauses

	mu          sync.Mutex
	closed      bool
	nodes       map[string]*clusterNode // by address
	order       []string                // nodes' addresses, in the order made
	refreshing  bool
	lastRefresh time.Time
	refreshErr  error // the last refresh's failure, nil after a success
}

// slotMap is a member's slot owners: owner[slot] is 1 + an index into
// addrs, or 0 when the slot's owner is not known. It is not modified once
// stored (copy on write).
type slotMap struct {
	owner [pool.ClusterSlots]uint16
	addrs []string
}

// clusterNode is one primary of the member: its pool (Inspect, ASK,
// CLUSTER SLOTS, subscriptions) and its pipelined connection.
type clusterNode struct {
	addr string
	pool *pool.RedisPool
	mx   *mux
}

// newClusterTransport returns the transport of the member spec
// (cluster://...), whose nodes are dialed with opts.
func newClusterTransport(spec string, opts []pool.Option, timeout time.Duration, st *stall.Stalls) (*clusterTransport, error) {
	cs, err := pool.ParseClusterURL(spec)
	if err != nil {
		return nil, err
	}
	// Check the options once, on the first seed, without dialing.
	p, err := pool.New(cs.Seeds[0], opts...)
	if err != nil {
		return nil, err
	}
	p.Close()
	sorted := slices.Clone(cs.Seeds)
	sort.Strings(sorted)
	sorted = slices.Compact(sorted)
	life, end := context.WithCancel(context.Background())
	return &clusterTransport{addr: pool.ClusterScheme + strings.Join(sorted, "+"), spec: cs,
		opts: slices.Clone(opts), timeout: timeout, stalls: st, done: make(chan struct{}), life: life, end: end,
		nodes: map[string]*clusterNode{}}, nil
}

// Addr names the member: cluster:// and its seeds, sorted (Transport).
func (ct *clusterTransport) Addr() string { return ct.addr }

// node returns the node at addr (checked by pool.CheckNodeAddr), making
// its pool and mux on first use. An address the member may not name
// (Dialable), or one beyond pool.MaxClusterNodes, is refused.
func (ct *clusterTransport) node(addr string) (*clusterNode, error) {
	ct.mu.Lock()
	defer ct.mu.Unlock()
	if ct.closed {
		return nil, transport.ErrClosed
	}
	if n := ct.nodes[addr]; n != nil {
		return n, nil
	}
	if err := ct.spec.Dialable(addr); err != nil {
		return nil, &clusterNodeError{node: addr, err: err}
	}
	if len(ct.nodes) >= pool.MaxClusterNodes {
		return nil, &clusterNodeError{node: addr, err: fmt.Errorf("the member named more than %d nodes: not dialed", pool.MaxClusterNodes)}
	}
	p, err := pool.New(addr, ct.opts...)
	if err != nil {
		return nil, &clusterNodeError{node: addr, err: err}
	}
	n := &clusterNode{addr: addr, pool: p,
		mx: &mux{addr: addr, pool: p, dial: p, redact: p.RedactError, timeout: ct.timeout, stalls: ct.stalls}}
	ct.nodes[addr] = n
	ct.order = append(ct.order, addr)
	return n, nil
}

// clusterNodeError is a failure on one node of a member: the Client names
// the member, this names the node.
type clusterNodeError struct {
	node string
	err  error
}

func (e *clusterNodeError) Error() string { return "cluster node " + e.node + ": " + e.err.Error() }
func (e *clusterNodeError) Unwrap() error { return e.err }

// ownerOf returns the address of slot's owner as last known, or the first
// seed when it is not known (a MOVED then tells). slot -1 (no key) is the
// first seed. A command never written to that seed goes on to the next
// (clusterSend.nextSeed).
func (ct *clusterTransport) ownerOf(slot int) string {
	if m := ct.slots.Load(); m != nil && slot >= 0 {
		if i := m.owner[slot]; i > 0 {
			return m.addrs[i-1]
		}
	}
	return ct.spec.Seeds[0]
}

// ownerKnown reports whether the slot map names slot's owner.
func (ct *clusterTransport) ownerKnown(slot int) bool {
	m := ct.slots.Load()
	return m != nil && slot >= 0 && m.owner[slot] > 0
}

// moved records that addr owns slot (a MOVED), and asks for a refresh.
func (ct *clusterTransport) moved(slot int, addr string) {
	for {
		old := ct.slots.Load()
		m := &slotMap{}
		if old != nil {
			m.owner = old.owner
			m.addrs = old.addrs
		}
		i := slices.Index(m.addrs, addr)
		if i < 0 {
			if len(m.addrs) >= pool.MaxClusterNodes {
				break
			}
			m.addrs = append(slices.Clip(m.addrs), addr)
			i = len(m.addrs) - 1
		}
		m.owner[slot] = uint16(i + 1)
		if ct.slots.CompareAndSwap(old, m) {
			break
		}
	}
	ct.refresh()
}

// refresh reads the slot map again in the background, unless a refresh
// runs or ran within refreshSpacing.
func (ct *clusterTransport) refresh() {
	ct.mu.Lock()
	if ct.closed || ct.refreshing || time.Since(ct.lastRefresh) < refreshSpacing {
		ct.mu.Unlock()
		return
	}
	ct.refreshing = true
	ct.wg.Add(1)
	ct.mu.Unlock()
	go func() {
		defer ct.wg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), max(time.Second, 4*ct.timeout))
		defer cancel()
		go func() {
			select {
			case <-ct.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		err := ct.readSlots(ctx)
		ct.mu.Lock()
		ct.refreshing = false
		ct.lastRefresh = time.Now()
		ct.refreshErr = err
		ct.mu.Unlock()
	}()
}

// candidates are the nodes to ask for what any node can tell: the seeds,
// then the nodes the slot map names.
func (ct *clusterTransport) candidates() []string {
	out := slices.Clone(ct.spec.Seeds)
	if m := ct.slots.Load(); m != nil {
		for _, a := range m.addrs {
			if !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
	}
	return out
}

// readSlots reads CLUSTER SLOTS from the first node that answers and
// stores the slot map.
func (ct *clusterTransport) readSlots(ctx context.Context) error {
	var errs []error
	for _, addr := range ct.candidates() {
		if ctx.Err() != nil {
			break
		}
		m, err := ct.slotsFrom(ctx, addr)
		if err == nil {
			ct.slots.Store(m)
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no node told the slots' owners: %w", errors.Join(errs...))
}

// slotsFrom reads CLUSTER SLOTS from the node at addr, bounded by the
// per-master timeout, on a connection of its pool (whose guard bounds the
// reply's size).
func (ct *clusterTransport) slotsFrom(ctx context.Context, addr string) (*slotMap, error) {
	n, err := ct.node(addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, max(ct.timeout, 200*time.Millisecond))
	defer cancel()
	conn, err := n.pool.GetContext(ctx)
	if err != nil {
		return nil, &clusterNodeError{node: addr, err: n.pool.RedactError(err)}
	}
	defer conn.Close()
	v, err := redis.DoContext(conn, ctx, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, &clusterNodeError{node: addr, err: n.pool.RedactError(err)}
	}
	ranges, err := pool.ParseClusterSlots(v, addr)
	if err != nil {
		return nil, &clusterNodeError{node: addr, err: err}
	}
	m := &slotMap{}
	for _, r := range ranges {
		i := slices.Index(m.addrs, r.Addr)
		if i < 0 {
			m.addrs = append(m.addrs, r.Addr) // ParseClusterSlots bounds them
			i = len(m.addrs) - 1
		}
		for s := r.Lo; s <= r.Hi; s++ {
			m.owner[s] = uint16(i + 1)
		}
	}
	return m, nil
}

// slotOf returns the slot of a command's first key, or -1.
func slotOf(args []any) int {
	if len(args) == 0 {
		return -1
	}
	switch k := args[0].(type) {
	case string:
		return keys.Slot(k)
	case []byte:
		return keys.Slot(string(k))
	}
	return -1
}

// Send hands cmd to the node that owns its key's slot, following MOVED,
// ASK and TRYAGAIN within cmd.Deadline (Transport).
func (ct *clusterTransport) Send(cmd *transport.Command) {
	if ct.slots.Load() == nil {
		ct.refresh()
	}
	s := &clusterSend{ct: ct, cmd: cmd, slot: slotOf(cmd.Args)}
	s.deadline = cmd.Deadline
	if s.deadline.IsZero() {
		s.deadline = time.Now().Add(ct.timeout)
	}
	s.send(ct.ownerOf(s.slot))
}

// clusterSend is one command on its way through a member's nodes. Its
// tries are sequential: only the one in flight touches it.
type clusterSend struct {
	ct           *clusterTransport
	cmd          *transport.Command
	slot         int
	deadline     time.Time
	node         string // where the current try went
	req          muxReq
	redirects    int
	seed         int  // the seed tried while the slot's owner is not known; len(Seeds) once sent to the owner
	tryAgain     bool // a try was answered TRYAGAIN
	sent, resent bool
}

// errTryAgain fails a command whose tries were answered TRYAGAIN until its
// redirections ran out: a script of many keys (a fenced, fair or
// read-write lock) whose slot is being migrated, with its keys not all on
// one side. Redis refuses such a command until the migration ends.
var errTryAgain = errors.New("TRYAGAIN: the lock's keys are split by a slot migration under way; Redis runs no command of many keys in that slot until it ends")

// send tries the command on the node at addr's pipelined connection.
func (s *clusterSend) send(addr string) {
	s.node = addr
	n, err := s.ct.node(addr)
	if err != nil {
		s.finish(nil, err)
		return
	}
	cmd := s.cmd
	s.req.fill(cmd, s)
	n.mx.submit(&s.req)
}

// deliver is the node's reply to the current try (replier).
func (s *clusterSend) deliver(v any, err error) {
	s.sent = s.sent || !s.req.sent.IsZero()
	s.resent = s.resent || s.req.resent
	s.handle(v, err)
}

// handle looks at a try's outcome: a redirection or TRYAGAIN tries
// again; anything else completes the command.
func (s *clusterSend) handle(v any, err error) {
	re, isReply := replyTo(err)
	if !isReply {
		if err != nil && !errors.Is(err, transport.ErrClosed) {
			s.ct.refresh() // the node failed: the slots may have a new owner
			if s.nextSeed() {
				return
			}
			if ne := (*clusterNodeError)(nil); !errors.As(err, &ne) {
				err = &clusterNodeError{node: s.node, err: err}
			}
		}
		s.finish(v, err)
		return
	}
	msg := string(re)
	ask, slot, addr, ok, perr := pool.ParseRedirect(msg, s.node)
	switch {
	case ok && perr != nil:
		s.finish(nil, &clusterNodeError{node: s.node, err: perr})
		return
	case ok:
		if derr := s.ct.spec.Dialable(addr); derr != nil {
			s.finish(nil, &clusterNodeError{node: s.node, err: fmt.Errorf("redirected: %w", derr)})
			return
		}
		s.redirects++
		if s.redirects > maxRedirects && s.tryAgain {
			s.finish(nil, &clusterNodeError{node: s.node, err: errTryAgain})
			return
		}
		if s.redirects > maxRedirects {
			s.finish(nil, &clusterNodeError{node: s.node, err: fmt.Errorf("more than %d redirections (the last to %s): the cluster's slots keep moving", maxRedirects, addr)})
			return
		}
		if time.Now().After(s.deadline) {
			s.finish(nil, &clusterNodeError{node: s.node, err: fmt.Errorf("redirected past the command's deadline: %w", context.DeadlineExceeded)})
			return
		}
		if !ask {
			if slot == s.slot {
				s.ct.moved(slot, addr)
			}
			s.send(addr)
			return
		}
		s.node = addr
		s.later(0, s.asking)
		return
	case strings.HasPrefix(msg, "TRYAGAIN"):
		s.tryAgain = true
		if time.Now().Add(tryAgainPause).Before(s.deadline) {
			s.later(tryAgainPause, func() { s.send(s.ct.ownerOf(s.slot)) })
			return
		}
	}
	s.finish(nil, err)
}

// nextSeed sends the command on when the try that failed was never
// written (a failed dial, a node known down) to a seed chosen because the
// slot's owner was not known (before the slot map is read, or a command
// of no key): one seed's failure is not the member's. It goes to the
// slot's owner when the slot map names one now (a refresh, which passes
// over dead seeds itself, read it meanwhile), else to the next seed: any
// seed that answers will do, and one that does not own the slot answers
// MOVED. A command that was written is not sent elsewhere: it may have
// run. It reports whether it sent the command.
func (s *clusterSend) nextSeed() bool {
	seeds := s.ct.spec.Seeds
	if s.sent || s.redirects > 0 || s.seed >= len(seeds) || s.node != seeds[s.seed] || !time.Now().Before(s.deadline) {
		return false
	}
	if s.ct.ownerKnown(s.slot) {
		owner := s.ct.ownerOf(s.slot)
		if owner == s.node {
			return false // the owner itself failed
		}
		s.seed = len(seeds) // no seed again: the owner's failure is final
		s.send(owner)
		return true
	}
	if s.seed+1 >= len(seeds) {
		return false
	}
	s.seed++
	s.send(seeds[s.seed])
	return true
}

// later runs f on a goroutine of its own after d, unless the transport
// closes first (the command then fails with ErrClosed).
func (s *clusterSend) later(d time.Duration, f func()) {
	ct := s.ct
	ct.mu.Lock()
	if ct.closed {
		ct.mu.Unlock()
		s.finish(nil, transport.ErrClosed)
		return
	}
	ct.wg.Add(1)
	ct.mu.Unlock()
	go func() {
		defer ct.wg.Done()
		if d > 0 {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-t.C:
			case <-ct.done:
				s.finish(nil, transport.ErrClosed)
				return
			}
		}
		f()
	}()
}

// asking sends ASKING and the command back to back on a connection of
// their own to s.node (see the top of this file), reads both replies
// within the command's deadline, and closes the connection. A script
// goes as EVAL: the importing node may not have it cached. Close closes
// the connection at once (the command then fails with ErrClosed): a node
// that never answers does not hold Close up until the deadline.
func (s *clusterSend) asking() {
	n, err := s.ct.node(s.node)
	if err != nil {
		s.finish(nil, err)
		return
	}
	ctx, cancel := context.WithDeadline(s.ct.life, s.deadline)
	defer cancel()
	conn, err := n.pool.Dial(ctx)
	if err != nil {
		s.finishAsking(&clusterNodeError{node: s.node, err: n.pool.RedactError(err)})
		return
	}
	defer conn.Close()
	stop := context.AfterFunc(s.ct.life, func() { conn.Close() })
	defer stop()
	name, args := s.cmd.Name, s.cmd.WireArgs()
	if s.cmd.Script != nil {
		name, args = "EVAL", slices.Clone(args)
		args[0] = s.cmd.Script.Source()
	}
	err = conn.Send("ASKING")
	if err == nil {
		err = conn.Send(name, args...)
	}
	if err == nil {
		err = conn.Flush()
	}
	if err != nil {
		s.finishAsking(&clusterNodeError{node: s.node, err: n.pool.RedactError(err)})
		return
	}
	s.sent = true
	left := time.Until(s.deadline)
	ok, err := receive(conn, max(left, time.Millisecond))
	if err == nil && ok != "OK" {
		err = &fault.DesyncError{Cmd: "ASKING", Reply: fault.Describe(ok)}
	}
	if err != nil {
		if _, isReply := replyTo(err); !isReply {
			s.finishAsking(&clusterNodeError{node: s.node, err: n.pool.RedactError(err)})
			return
		}
		// ASKING refused: the command still comes; its reply says more.
		if _, err2 := receive(conn, max(time.Until(s.deadline), time.Millisecond)); err2 != nil {
			err = err2
		}
		s.handle(nil, err)
		return
	}
	v, err := receive(conn, max(time.Until(s.deadline), time.Millisecond))
	if err == nil && !s.cmd.Reply.Fits(v) {
		err = &fault.DesyncError{Cmd: name, Reply: fault.Describe(v)}
	}
	if err != nil {
		if _, isReply := replyTo(err); !isReply {
			if s.ct.life.Err() != nil {
				s.finish(nil, transport.ErrClosed)
				return
			}
			err = &clusterNodeError{node: s.node, err: n.pool.RedactError(err)}
		}
	}
	s.handle(v, err)
}

// finishAsking fails the command with err, a failure of its ASK
// connection, or with ErrClosed when Close closed that connection.
func (s *clusterSend) finishAsking(err error) {
	if s.ct.life.Err() != nil {
		err = transport.ErrClosed
	}
	s.finish(nil, err)
}

// finish completes the command.
func (s *clusterSend) finish(v any, err error) {
	if re, ok := replyTo(err); ok {
		err = transport.ReplyError(re)
	} else {
		err = answered(err)
	}
	s.cmd.Complete(v, err, transport.SendInfo{Sent: s.sent, Resent: s.resent})
}

// Subscribe opens the release-notice subscription on the first node that
// answers, seeds first: a cluster broadcasts every PUBLISH to all its
// nodes (Transport).
func (ct *clusterTransport) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	var errs []error
	for _, addr := range ct.candidates() {
		n, err := ct.node(addr)
		if err == nil {
			var sub transport.Subscription
			if sub, err = subscribeRedigo(ctx, n.pool, nil, notify); err == nil {
				return sub, nil
			}
			err = &clusterNodeError{node: addr, err: n.pool.RedactError(err)}
		}
		errs = append(errs, err)
		if ctx.Err() != nil || errors.Is(err, transport.ErrClosed) {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// keyless are the commands Inspect may send that name no key: they run on
// any node.
var keyless = map[string]bool{"INFO": true, "CONFIG": true, "CLUSTER": true, "TIME": true, "PING": true, "ROLE": true}

// scriptCalls are the commands Inspect may send whose keys follow the
// script (or its digest) and their count: EVAL script numkeys key ...
var scriptCalls = map[string]bool{"EVAL": true, "EVALSHA": true, "EVAL_RO": true, "EVALSHA_RO": true}

// inspectSlot returns the slot of an Inspect command's first key, or -1:
// a script call's first key is its third argument (Client.InspectHolder's
// leader read), every other command's its first.
func inspectSlot(c layout.Command) int {
	if !scriptCalls[strings.ToUpper(c.Name)] {
		return slotOf(c.Args)
	}
	if len(c.Args) < 3 {
		return -1
	}
	switch n := c.Args[1].(type) {
	case int:
		if n < 1 {
			return -1
		}
	case int64:
		if n < 1 {
			return -1
		}
	}
	return slotOf(c.Args[2:])
}

// Inspect runs Client.Inspect's commands on the owner of their key's slot
// (a script call's first key, after the script and the key count; keyless
// ones on a seed), following one MOVED or ASK (Inspector).
func (ct *clusterTransport) Inspect(ctx context.Context, cmds []layout.Command) ([]any, error) {
	if ct.slots.Load() == nil {
		_ = ct.readSlots(ctx) // the owner is then known; else a MOVED tells
	}
	slot := -1
	for _, c := range cmds {
		if !keyless[strings.ToUpper(c.Name)] {
			slot = inspectSlot(c)
			break
		}
	}
	addr := ct.ownerOf(slot)
	asking := false
	for try := 0; ; try++ {
		n, err := ct.node(addr)
		if err != nil {
			return nil, err
		}
		send := cmds
		if asking {
			send = make([]layout.Command, 0, 2*len(cmds))
			for _, c := range cmds {
				send = append(send, layout.Command{Name: "ASKING"}, c)
			}
		}
		out, err := inspectPool(ctx, n.pool, send)
		if err != nil {
			return nil, &clusterNodeError{node: addr, err: n.pool.RedactError(err)}
		}
		if asking {
			if len(out) != len(send) {
				return nil, &clusterNodeError{node: addr, err: fmt.Errorf("%d replies to %d commands", len(out), len(send))}
			}
			kept := make([]any, 0, len(cmds))
			for i := 1; i < len(out); i += 2 {
				kept = append(kept, out[i])
			}
			out = kept
		}
		if try > 0 {
			return out, nil
		}
		redirected := false
		for _, v := range out {
			re, ok := v.(redis.Error)
			if !ok {
				continue
			}
			ask, rslot, to, isRedir, perr := pool.ParseRedirect(string(re), addr)
			if !isRedir {
				continue
			}
			if perr != nil {
				return nil, &clusterNodeError{node: addr, err: perr}
			}
			if derr := ct.spec.Dialable(to); derr != nil {
				return nil, &clusterNodeError{node: addr, err: fmt.Errorf("redirected: %w", derr)}
			}
			if !ask && rslot == slot {
				ct.moved(rslot, to)
			}
			addr, asking, redirected = to, ask, true
			break
		}
		if !redirected {
			return out, nil
		}
	}
}

// Close fails what the member's nodes still carry with ErrClosed, closes
// their connections and pools and waits for the transport's goroutines
// (Transport).
func (ct *clusterTransport) Close() error {
	ct.mu.Lock()
	if ct.closed {
		ct.mu.Unlock()
		return nil
	}
	ct.closed = true
	close(ct.done)
	ct.end()
	nodes := make([]*clusterNode, 0, len(ct.nodes))
	for _, a := range ct.order {
		nodes = append(nodes, ct.nodes[a])
	}
	ct.mu.Unlock()
	for _, n := range nodes {
		n.mx.Close()
	}
	ct.wg.Wait()
	for _, n := range nodes {
		n.pool.Close()
	}
	return nil
}

// RedactError removes the member's credentials from err (pool.Redactor):
// every node's pool has the same options.
func (ct *clusterTransport) RedactError(err error) error {
	ct.mu.Lock()
	var p *pool.RedisPool
	for _, a := range ct.order {
		p = ct.nodes[a].pool
		break
	}
	ct.mu.Unlock()
	if p == nil {
		return err
	}
	return p.RedactError(err)
}

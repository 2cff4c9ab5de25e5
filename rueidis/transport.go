package rueidis

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

// Transport is a transport.Transport over one rueidis client: one master's
// lock commands (through a lane, see lane.go) and its release notices
// (through a dedicated connection's pub/sub hooks, see pubsub.go). It is
// safe for concurrent use. It does not close the client, which stays the
// caller's.
type Transport struct {
	client  lib.Client
	addr    string
	ordered bool
	cluster bool
	direct  bool // no lane: see lane.sendDirect
	lane    *lane

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	wg     sync.WaitGroup // subscriptions' and inspections' goroutines
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Ordered      = (*Transport)(nil)
	_ transport.Silencer     = (*Transport)(nil)
	_ transport.Inspector    = (*Transport)(nil)
	_ transport.Subscription = (*subscription)(nil)
)

// NewTransport returns a transport over client, which must reach one
// master (or be one member that is a Redis Cluster). It starts one
// goroutine, which Close stops.
func NewTransport(client lib.Client) *Transport {
	t := &Transport{client: client, subs: make(map[*subscription]struct{})}
	addrs := make([]string, 0, 1)
	for a := range client.Nodes() {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	t.addr = strings.Join(addrs, ",")
	switch client.Mode() {
	case lib.ClientModeStandalone:
		t.ordered = true
	case lib.ClientModeCluster:
		t.cluster = true
	}
	if t.addr == "" {
		t.addr = fmt.Sprintf("%s %p", pkg, client)
	}
	t.lane = newLane(client, t.addr)
	return t
}

// Addr returns the master's address as the client knows it (host:port;
// for a cluster, the nodes it knew when the transport was made), never
// credentials.
func (t *Transport) Addr() string { return t.addr }

// Ordered reports whether commands reach the master in the order Send was
// called: true for a client of one master (ClientModeStandalone), whose
// lane's batches run one after another on its auto-pipelined connection;
// false for a cluster or a sentinel-followed master, whose redirections
// and switches may reorder them (the redlock.Client then chains a
// holder's commands itself).
func (t *Transport) Ordered() bool { return t.ordered && !t.direct }

// Silence reports how long the master has kept the lane's batch in
// flight unanswered (transport.Silencer): 0 when none is in flight. It
// does not subtract stalls of this process, so it may report a master
// silent that had answered unread; it never reports a hung master as
// answering.
func (t *Transport) Silence() time.Duration { return t.lane.silence() }

// Send queues cmd for the master and returns at once; cmd.Complete is
// called exactly once (see lane.go for when): with the reply in redigo's
// shapes (see transport.ReplyShape), a transport.ReplyError, or an error
// (matching context.DeadlineExceeded when no reply came in time). A
// command without a deadline (built by other code than a redlock.Client)
// gets defaultBound.
func (t *Transport) Send(cmd *transport.Command) {
	if t.direct {
		t.lane.sendDirect(cmd)
		return
	}
	t.lane.send(cmd)
}

// Close fails the commands still queued or in flight (errors matching
// redlock.ErrClosed), closes the subscriptions, and waits for the
// transport's goroutines: a batch in flight ends when rueidis honours its
// canceled context (at once when it is queued on the pipelined
// connection; at its deadline when rueidis writes and reads it itself),
// and a subscription being opened when rueidis gives up dialing its
// connection (the client's Dialer.Timeout, 5 s by default, on a master
// that accepts connections but does not answer). It does not close the
// client.
func (t *Transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	subs := make([]*subscription, 0, len(t.subs))
	for s := range t.subs {
		subs = append(subs, s)
	}
	t.mu.Unlock()
	t.lane.close()
	for _, s := range subs {
		_ = s.close()
	}
	t.wg.Wait()
	return nil
}

// errClosed is returned for commands sent to, or pending on, a closed
// transport.
var errClosed = fmt.Errorf("%s: transport closed: %w", pkg, redlock.ErrClosed)

// timeoutError is a command's deadline passing before its reply.
type timeoutError = adapter.TimeoutError

// closedByMaster reports whether err says the master closed the
// connection (nothing sent on it runs after that).
func closedByMaster(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

package goredis

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/transport"
)

// Transport is a transport.Transport over one go-redis client: one master's
// lock commands (through a lane, see lane.go) and its release notices
// (through go-redis's PubSub, see pubsub.go). It is safe for concurrent
// use. It does not close the client, which stays the caller's.
type Transport struct {
	client  redis.UniversalClient
	addr    string
	ordered bool
	secrets []string      // credentials the client holds, redacted from errors
	bound   time.Duration // a command's own bound when it comes without a deadline
	lane    *lane

	scripts sync.Map // *transport.Script -> *script

	mu     sync.Mutex
	closed bool
	subs   map[*subscription]struct{}
	wg     sync.WaitGroup // subscriptions' goroutines
}

var (
	_ transport.Transport    = (*Transport)(nil)
	_ transport.Ordered      = (*Transport)(nil)
	_ transport.Silencer     = (*Transport)(nil)
	_ transport.Subscription = (*subscription)(nil)
)

// NewTransport returns a transport over client, which must reach one
// master. It starts one goroutine, which Close stops.
func NewTransport(client redis.UniversalClient) *Transport {
	t := &Transport{client: client, subs: make(map[*subscription]struct{}), bound: defaultBound}
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		t.addr, t.ordered = o.Addr, true
		t.secrets = secrets(o.Username, o.Password)
		t.bound = boundOf(o.ReadTimeout)
	case *redis.ClusterClient:
		o := c.Options()
		t.addr = strings.Join(o.Addrs, ",")
		t.secrets = secrets(o.Username, o.Password)
		t.bound = boundOf(o.ReadTimeout)
	case *redis.Ring:
		o := c.Options()
		t.bound = boundOf(o.ReadTimeout)
		addrs := make([]string, 0, len(o.Addrs))
		for _, a := range o.Addrs {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		t.addr = strings.Join(addrs, ",")
		t.secrets = secrets(o.Username, o.Password)
	default:
		t.addr = fmt.Sprintf("go-redis %T %p", client, client)
	}
	t.lane = newLane(client, t.addr)
	return t
}

// defaultBound is a command's bound when it has no deadline and the
// client's ReadTimeout does not give one: go-redis's default ReadTimeout.
const defaultBound = 5 * time.Second

// boundOf returns the bound of a command without a deadline on a client
// whose ReadTimeout is rt: rt, the longest a healthy master's reply to a
// batch may take, or defaultBound when rt is not a positive duration.
func boundOf(rt time.Duration) time.Duration {
	if rt > 0 {
		return rt
	}
	return defaultBound
}

func secrets(s ...string) []string {
	var out []string
	for _, v := range s {
		if len(v) >= 3 { // shorter ones would redact ordinary words
			out = append(out, v)
		}
	}
	return out
}

// Addr returns the master's address as the client's options give it
// (host:port; for a cluster or a ring, its addresses), never credentials.
func (t *Transport) Addr() string { return t.addr }

// Ordered reports whether commands reach the master in the order Send was
// called: true for a *redis.Client (one master), whose batches run one
// after another; false for a cluster or a ring, whose redirections and
// shards may reorder them (the redlock.Client then chains a holder's
// commands itself).
func (t *Transport) Ordered() bool { return t.ordered }

// Silence reports how long the master has kept the transport's batch in
// flight waiting, less the time this process was seen not to run meanwhile
// (transport.Silencer; see lane.go): a redlock.Client then waits on for a
// master whose reply may only not have been read yet, rather than count it
// failed at its timeout.
func (t *Transport) Silence() time.Duration { return t.lane.silence() }

// Send queues cmd for the master and returns at once; cmd.Complete is called
// exactly once, with the reply in redigo's shapes (transport.ReplyShape), a
// transport.ReplyError, or an error: matching context.DeadlineExceeded when
// it waited in the queue past its end — its limit, or cmd.Grace past
// cmd.Deadline (pushed back by this process's stalls) when the master had
// been silent for longer than cmd's wait when it was queued, not before
// a command kept ahead of it unless cmd is DropWhenDown (see lane.go)
// — or was sent and no reply came by its limit, max(its timeout, 1 s)
// past cmd.Deadline (a reply read before that is delivered, late),
// or at once when too much is queued or the master is down and cmd is
// worthless late. A command without a deadline
// is bounded by the client's ReadTimeout (5 s when it has none). How a
// batch's silence is judged: lane.go and docs/design.md, "A busy process
// is not a silent master".
func (t *Transport) Send(cmd *transport.Command) {
	deadline := cmd.Deadline
	if deadline.IsZero() {
		// The transport's own bound is the client's ReadTimeout; past it
		// the command fails and the master is taken for down (see
		// lane.go).
		deadline = time.Now().Add(t.bound)
	}
	r := &req{
		args:         cmd.Args,
		deadline:     deadline,
		grace:        cmd.Grace,
		resend:       cmd.Resend,
		mayRunLate:   cmd.MayRunLate,
		undo:         cmd.Undo,
		dropWhenDown: cmd.DropWhenDown,
	}
	if cmd.Script != nil {
		r.script, r.nkeys = t.script(cmd.Script), cmd.NumKeys
	} else {
		r.name = cmd.Name
	}
	shape := cmd.Reply
	r.done = func(v any, err error, sent, resent bool) {
		info := transport.SendInfo{Sent: sent, Resent: resent}
		if err != nil {
			cmd.Complete(nil, t.replyError(err), info)
			return
		}
		v, err = reply(shape, v)
		if err != nil {
			cmd.Complete(nil, t.RedactError(err), info)
			return
		}
		cmd.Complete(v, nil, info)
	}
	t.lane.send(r)
}

// script returns the lane's form of s.
func (t *Transport) script(s *transport.Script) *script {
	if v, ok := t.scripts.Load(s); ok {
		return v.(*script)
	}
	v, _ := t.scripts.LoadOrStore(s, &script{sha: s.SHA(), src: s.Source()})
	return v.(*script)
}

// reply turns a normalized go-redis reply into redigo's shape for shape:
// go-redis gives status and bulk strings alike as string; SET's "OK" is a
// status, every other string the lock reads is a bulk string ([]byte).
func reply(shape transport.ReplyShape, v any) (any, error) {
	if s, ok := v.(string); ok && shape != transport.ReplySet {
		v = []byte(s)
	}
	if !shape.Fits(v) {
		return nil, &desyncError{err: errors.New("reply that does not fit the command")}
	}
	return v, nil
}

// replyError maps the lane's errors to the seam's: error replies become
// transport.ReplyError.
func (t *Transport) replyError(err error) error {
	var re redis.Error
	if errors.As(err, &re) {
		return transport.ReplyError(t.RedactError(err).Error())
	}
	return t.RedactError(err)
}

// RedactError returns err unchanged when its text shows none of the
// client's credentials, else an error whose text has them replaced by
// "[redacted]" (errors.Is and errors.As still see err). It implements
// pool.Redactor.
func (t *Transport) RedactError(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	redacted := msg
	for _, s := range t.secrets {
		redacted = strings.ReplaceAll(redacted, s, "[redacted]")
	}
	if redacted == msg {
		return err
	}
	return &redactedError{msg: redacted, err: err}
}

type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Subscribe opens a release-notice subscription on a go-redis PubSub of
// its own (one connection, dialed with the client's options); it returns
// once the master answered a PING there, or when ctx ends.
func (t *Transport) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	t.mu.Unlock()
	s, err := subscribe(ctx, t.client, t.addr, notify, &t.wg)
	if err != nil {
		return nil, t.RedactError(err)
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = s.close()
		return nil, errClosed
	}
	t.subs[s] = struct{}{}
	s.owner = t
	t.mu.Unlock()
	return s, nil
}

// Close fails the commands still queued or in flight (errors matching
// redlock.ErrClosed), closes the subscriptions, and waits for the
// transport's goroutines: a batch in flight ends at the latest when
// go-redis gives up on it (the client's ReadTimeout, or with
// Options.ContextTimeoutEnabled its context's deadline: max(the command's
// timeout, 1 s) past the latest deadline in it, see lane.go; go-redis
// does not end a read when Close cancels that context). It does not
// close the client.
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

// Set makes the subscribed channels equal to channels; see
// transport.Subscription.
func (s *subscription) Set(ctx context.Context, channels []string) error {
	return s.set(ctx, channels)
}

// Live reports whether the master acknowledged channel; see
// transport.Subscription.
func (s *subscription) Live(channel string) bool { return s.live(channel) }

// Done is closed when the subscription broke or was closed.
func (s *subscription) Done() <-chan struct{} { return s.done }

// Close ends the subscription and waits for its goroutine.
func (s *subscription) Close() error {
	err := s.close()
	if t := s.owner; t != nil {
		t.mu.Lock()
		delete(t.subs, s)
		t.mu.Unlock()
	}
	return err
}

package redigot

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/pool"
	"github.com/quorumlock/quorumlock/transport"
)

// redigoSub is the release-notice subscription of both redigo transports
// (Transport.Subscribe): a connection of its own, dialed as the pipelined
// connections are (dialerOf), else one borrowed from the pool for as long
// as the subscription lives. Its reader goroutine hands each message to
// notify and records the master's acknowledgements (Live).
type redigoSub struct {
	conn     redis.Conn
	borrowed bool // conn is a pooled connection, not one of its own
	notify   func(channel, payload string)

	// bmu orders the breaking of a borrowed connection (breakConn) with
	// its return to the pool; returned is set once it went back.
	bmu      sync.Mutex
	returned bool

	wmu  sync.Mutex      // serializes Set
	have map[string]bool // the channels subscribed (under wmu)

	mu sync.Mutex
	// want: the channels asked for by the latest Set; acked: those whose
	// latest acknowledgement was a subscribe; pend: per channel, the
	// SUBSCRIBEs and UNSUBSCRIBEs sent and not yet acknowledged. A
	// channel is live only when wanted, acknowledged, with nothing
	// pending (Live): an acknowledgement of an earlier SUBSCRIBE, read
	// after a later UNSUBSCRIBE and SUBSCRIBE were sent, does not count.
	want  map[string]bool
	acked map[string]bool
	pend  map[string]int
	ended bool  // the reader stopped: nothing more is heard
	err   error // why it broke, when the connection was whole (Err)

	done       chan struct{} // closed once broken or closed
	doneOnce   sync.Once
	readerDone chan struct{}
	closeOnce  sync.Once
}

// subscribeRedigo opens a subscription on a connection dial makes, or, when
// dial is nil, on one borrowed from p.
func subscribeRedigo(ctx context.Context, dial pool.Dialer, p pool.Pool, notify func(channel, payload string)) (transport.Subscription, error) {
	var conn redis.Conn
	var err error
	borrowed := dial == nil
	if borrowed {
		conn, err = borrowBreakable(ctx, p)
	} else {
		conn, err = dial.Dial(ctx)
	}
	if err != nil {
		return nil, err
	}
	s := &redigoSub{conn: conn, borrowed: borrowed, notify: notify, have: map[string]bool{},
		want: map[string]bool{}, acked: map[string]bool{}, pend: map[string]int{},
		done: make(chan struct{}), readerDone: make(chan struct{})}
	go s.read()
	return s, nil
}

// errNoticesRefused is matched by the errors of a subscription that the
// master or the pool refuses while the connection stays whole (isRefusal):
// NOPERM to SUBSCRIBE, a connection that cannot read without a deadline,
// a pool whose connections cannot carry one (with ErrInvalid). It is
// transport.ErrNoticesRefused, which the Client checks (subscriber.fail).
var errNoticesRefused = transport.ErrNoticesRefused

// errNoTimeout is redigo's error for a connection that cannot read with a
// timeout (redis.ConnWithTimeout), as it returns it.
var errNoTimeout = func() error {
	_, err := redis.ReceiveWithTimeout(struct{ redis.Conn }{}, 0)
	return err
}()

// isRefusal reports whether err, read on a connection still whole, refuses
// the subscription for good rather than telling of a master in trouble:
// an ACL refusal, or a connection that cannot read without a deadline.
func isRefusal(err error) bool {
	var re redis.Error
	return errors.Is(err, errNoTimeout) || errors.As(err, &re) && strings.HasPrefix(string(re), "NOPERM")
}

// borrowBreakable borrows a connection from p for a subscription, once it
// knows that p's connections can be broken under their reader
// (breakPooled). Their methods alone do not tell: a pool's or a logging
// wrapper's connection has them all and passes each call on to the
// connection it wraps, which may lack them (a user's dial wrapper older
// than ReceiveContext); its reader could then never be stopped, and Close
// would wait for it for ever. So the first connection borrowed, whole, is
// broken as Close would break it, and given back (the pool discards it);
// only if the break is what failed it is a second one borrowed for the
// subscription. (That one is assumed to be of the same kind: a pool that
// lends connections of several kinds is not caught. An inner connection
// that cannot read without a deadline fails the reader's first read, and
// the subscription is refused then.)
func borrowBreakable(ctx context.Context, p pool.Pool) (redis.Conn, error) {
	probe, err := p.GetContext(ctx)
	if err != nil {
		return nil, err
	}
	if err := probe.Err(); err != nil {
		closeQuietly(probe)
		return nil, err // a pool that lends a failed connection (a dial that failed)
	}
	if _, ok := probe.(redis.ConnWithTimeout); !ok {
		closeQuietly(probe)
		return nil, fmt.Errorf("%w: %w: the pool's connections (%T) cannot read without a deadline (redis.ConnWithTimeout), which a release-notice subscription needs; waiters poll", fault.ErrInvalid, errNoticesRefused, probe)
	}
	err = breakPooled(probe)
	broke := errors.Is(err, context.DeadlineExceeded) && probe.Err() != nil
	closeQuietly(probe)
	if !broke {
		// err is shown, not wrapped: a refusal must not match
		// context.DeadlineExceeded, which says the caller's ctx ended.
		return nil, fmt.Errorf("%w: %w: the pool's connections (%T) cannot be broken under their reader (a receive whose context has ended left one whole: %v), which a release-notice subscription needs; waiters poll", fault.ErrInvalid, errNoticesRefused, probe, err) //nolint:errorlint // see above
	}
	return p.GetContext(ctx)
}

// breakPooled breaks a pooled connection without reading from it, the way
// redigo breaks a connection whose context ended: a receive whose deadline
// has already passed marks the connection failed and closes its network
// connection before it reads anything (the pool then discards it). A
// connection that cannot receive with a context is left as it was. It
// returns the receive's error: context.DeadlineExceeded where it broke.
func breakPooled(conn redis.Conn) error {
	ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
	defer cancel()
	_, err := redis.ReceiveContext(conn, ctx)
	return err
}

func (s *redigoSub) broken() { s.doneOnce.Do(func() { close(s.done) }) }

// breakConn breaks the connection under its reader and any write under
// way, without reading from it: a connection of its own is closed; a
// borrowed one, which must not be closed while read (a pooled
// connection's Close unsubscribes and reads the replies itself), is
// broken by breakPooled, which borrowBreakable found to work on its pool.
func (s *redigoSub) breakConn() {
	if !s.borrowed {
		s.conn.Close()
		return
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if !s.returned {
		_ = breakPooled(s.conn)
	}
}

// Done is closed once the subscription broke or was closed.
func (s *redigoSub) Done() <-chan struct{} { return s.done }

var _ transport.Breakable = (*redigoSub)(nil)

// Err reports why the subscription broke while its connection was whole
// (transport.Breakable): its reply parser panicked (ErrPanic), it was
// refused (NOPERM, or a connection that cannot read without a deadline:
// errNoticesRefused), or it read what is not a notice (an error reply
// such as BUSY, a stray value). It is nil when the connection failed or
// was closed.
func (s *redigoSub) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Live reports whether the master acknowledged the subscription to
// channel, with no SUBSCRIBE or UNSUBSCRIBE of it pending since, on a
// connection that is still read. A channel whose UNSUBSCRIBE was sent is
// not live, even before the master acknowledges it: a release announced
// then may reach nobody.
func (s *redigoSub) Live(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended && s.want[channel] && s.acked[channel] && s.pend[channel] == 0
}

// Set subscribes the channels not yet subscribed and unsubscribes the
// others. A failed write breaks the subscription.
func (s *redigoSub) Set(ctx context.Context, channels []string) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	select {
	case <-s.done:
		return transport.ErrClosed
	default:
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// A write that blocks (a master that does not read) ends with ctx.
	stop := context.AfterFunc(ctx, s.breakConn)
	defer stop()
	want := make(map[string]bool, len(channels))
	var sub, unsub []any
	for _, ch := range channels {
		want[ch] = true
		if !s.have[ch] {
			sub = append(sub, ch)
		}
	}
	for ch := range s.have {
		if !want[ch] {
			unsub = append(unsub, ch)
		}
	}
	// Counted pending before they are written: their acknowledgements
	// may be read before the writes return.
	s.mu.Lock()
	for _, ch := range sub {
		s.pend[ch.(string)]++
	}
	for _, ch := range unsub {
		s.pend[ch.(string)]++
	}
	s.want = want
	s.mu.Unlock()
	psc := redis.PubSubConn{Conn: s.conn}
	var err error
	if len(sub) > 0 {
		err = psc.Subscribe(sub...)
	}
	if err == nil && len(unsub) > 0 {
		err = psc.Unsubscribe(unsub...)
	}
	if err != nil {
		s.breakConn()
		s.broken()
		return err
	}
	s.have = want
	return nil
}

// read wakes the waiters of each released channel until the connection
// closes or breaks (breakConn). It is the connection's only reader until
// it returns. A panic of the parser (a hostile master, on a pool this
// package did not make) breaks the subscription.
func (s *redigoSub) read() {
	defer close(s.readerDone)
	defer s.broken()
	var failed error // a reply the reader cannot take, on a connection still whole
	defer func() {
		p := recover()
		s.mu.Lock()
		s.ended = true // nothing more is heard on this connection
		clear(s.acked)
		if p != nil {
			s.err = fault.PanicError(p)
		} else if failed != nil {
			s.err = failed
		}
		s.mu.Unlock()
	}()
	psc := redis.PubSubConn{Conn: s.conn}
	for {
		// No read deadline: the connection is idle while nobody
		// releases. (Not ReceiveContext: cancelled, it returns while
		// the read it started goes on, which then races the pool's
		// Close.)
		switch v := psc.ReceiveWithTimeout(0).(type) {
		case redis.Message:
			s.notify(v.Channel, string(v.Data))
		case redis.Subscription:
			s.ack(v)
		case error:
			// A connection that failed, or that Close broke, says why
			// through its own errors. One still whole was refused the
			// subscription (NOPERM: an ACL user without +subscribe or the
			// channel; a connection that cannot read without a deadline),
			// or handed a reply that is not a notice (BUSY, a hostile
			// master's stray value): the first is a refusal, the second a
			// failure of the master.
			if s.conn.Err() == nil {
				if isRefusal(v) {
					failed = fmt.Errorf("%w: %w", errNoticesRefused, v)
				} else {
					failed = fmt.Errorf("release-notice subscription: %w", v)
				}
			}
			return
		}
	}
}

// ack records an acknowledgement. One that answers nothing sent (a
// hostile master) never makes a channel live; an unsubscribe of it still
// makes it not live.
func (s *redigoSub) ack(v redis.Subscription) {
	s.mu.Lock()
	defer s.mu.Unlock()
	pending := s.pend[v.Channel] > 0
	switch v.Kind {
	case "subscribe":
		if pending {
			s.acked[v.Channel] = true
		}
	case "unsubscribe":
		delete(s.acked, v.Channel)
	default:
		return
	}
	if pending {
		if s.pend[v.Channel]--; s.pend[v.Channel] == 0 {
			delete(s.pend, v.Channel)
		}
	}
}

// Close breaks the connection, which ends the reader and any Set under
// way, and waits for the reader; only then does a borrowed connection go
// back to its pool, which reads from it as it takes it back.
func (s *redigoSub) Close() error {
	s.closeOnce.Do(func() {
		s.breakConn()
		s.wmu.Lock() // a Set under way ends (its write fails on a broken connection)
		defer s.wmu.Unlock()
		<-s.readerDone
		s.bmu.Lock()
		s.returned = true
		closeQuietly(s.conn)
		s.bmu.Unlock()
		s.broken()
	})
	return nil
}

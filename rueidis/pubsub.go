package rueidis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	lib "github.com/redis/rueidis"

	"github.com/quorumlock/quorumlock/internal/adapter"
	"github.com/quorumlock/quorumlock/transport"
)

// Release notices through a dedicated connection's pub/sub hooks.
//
// A subscription is one connection of the client's own (Dedicate), whose
// pub/sub messages and acknowledgements rueidis hands to hooks
// (SetPubSubHooks) on its reader goroutine. A channel is live once the
// master acknowledged the last SUBSCRIBE sent for it, with no SUBSCRIBE
// or UNSUBSCRIBE of it still unacknowledged: only then is a notice on it
// sure to arrive. The hooks' error channel reports the connection's end;
// the subscription then ends (Done), and its owner subscribes anew and
// polls meanwhile: notices sent while no connection listened are lost.

// subscription is one master's release-notice subscription.
type subscription struct {
	addr   string
	notify func(channel, payload string)
	owner  *Transport // set once by Transport.Subscribe, before the caller sees it

	mu     sync.Mutex
	dc     lib.DedicatedClient // set once the connection is taken
	chans  *adapter.Channels
	err    error // why it ended
	ended  bool
	ready  chan struct{} // closed when the master answered the first PING
	done   chan struct{} // closed when it ended
	exited chan struct{} // closed when the goroutine returned
}

// Subscribe opens a release-notice subscription on a connection of the
// client's own (Dedicate); it returns once the master answered a PING
// there, or when ctx ends. The connection is closed when the
// subscription ends.
func (t *Transport) Subscribe(ctx context.Context, notify func(channel, payload string)) (transport.Subscription, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, errClosed
	}
	s := &subscription{
		addr:   t.addr,
		notify: notify,
		owner:  t,
		chans:  adapter.NewChannels(),
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	t.subs[s] = struct{}{}
	t.wg.Add(1)
	t.mu.Unlock()
	go func() {
		defer t.wg.Done()
		s.run(ctx, t.client)
	}()
	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
	case <-ctx.Done():
		s.end(ctx.Err())
	}
	_ = s.Close()
	return nil, s.cause()
}

// run takes a connection, pings the master on it and waits for the
// subscription's end; then it closes the connection. Taking the
// connection may dial (bounded by the client's Dialer and
// ConnWriteTimeout, not by ctx).
func (s *subscription) run(ctx context.Context, client lib.Client) {
	defer close(s.exited)
	dc, release := client.Dedicate()
	defer release()
	defer dc.Close()
	broke := dc.SetPubSubHooks(lib.PubSubHooks{OnMessage: s.message, OnSubscription: s.ack})
	s.mu.Lock()
	s.dc = dc
	s.mu.Unlock()
	if err := dc.Do(ctx, dc.B().Ping().Build()).Error(); err != nil {
		s.end(err)
		return
	}
	close(s.ready)
	select {
	case err := <-broke:
		if err == nil {
			err = errors.New("connection closed")
		}
		s.end(err)
	case <-s.done:
	}
}

// message hands a notice on a wanted channel to notify.
func (s *subscription) message(m lib.PubSubMessage) {
	s.mu.Lock()
	want := s.chans.Wanted(m.Channel) && !s.ended
	s.mu.Unlock()
	if want && m.Pattern == "" {
		s.notify(m.Channel, m.Message)
	}
}

// ack records an acknowledgement; one that answers nothing sent ends the
// subscription.
func (s *subscription) ack(m lib.PubSubSubscription) {
	s.mu.Lock()
	ok := s.chans.Ack(m.Kind, m.Channel)
	s.mu.Unlock()
	if !ok {
		s.end(fmt.Errorf("unexpected %s acknowledgement", m.Kind))
	}
}

// Set makes the subscribed channels equal to channels (see
// transport.Subscription); it returns once rueidis wrote the commands.
func (s *subscription) Set(ctx context.Context, channels []string) error {
	s.mu.Lock()
	if s.ended {
		err := s.err
		s.mu.Unlock()
		return err
	}
	add, drop := s.chans.Set(channels)
	dc := s.dc
	s.mu.Unlock()
	if len(add) > 0 {
		if err := dc.Do(ctx, dc.B().Subscribe().Channel(add...).Build()).Error(); err != nil {
			s.end(err)
			return s.cause()
		}
	}
	if len(drop) > 0 {
		if err := dc.Do(ctx, dc.B().Unsubscribe().Channel(drop...).Build()).Error(); err != nil {
			s.end(err)
			return s.cause()
		}
	}
	return nil
}

// Live reports whether the master acknowledged channel, with nothing
// about it pending, on a subscription still read.
func (s *subscription) Live(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended && s.chans.Live(channel)
}

// Done is closed when the subscription broke or was closed.
func (s *subscription) Done() <-chan struct{} { return s.done }

// Close ends the subscription and waits for its goroutine, which closes
// the connection.
func (s *subscription) Close() error {
	err := s.close()
	t := s.owner
	t.mu.Lock()
	delete(t.subs, s)
	t.mu.Unlock()
	return err
}

func (s *subscription) close() error {
	s.end(errClosed)
	<-s.exited
	return nil
}

// end ends the subscription for err (the first cause wins).
func (s *subscription) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	s.err = fmt.Errorf("subscription to %s: %w", s.addr, err)
	s.chans.Lost()
	close(s.done)
}

func (s *subscription) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

package goredis

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/quorumlock/quorumlock/internal/adapter"
)

// Release notices through go-redis's PubSub.
//
// A subscription is one go-redis PubSub (one connection of its own, dialed
// with the client's options) read by one goroutine. A channel is live once
// the master acknowledged the last SUBSCRIBE sent for it, with no
// SUBSCRIBE or UNSUBSCRIBE of it still unacknowledged: only then is a
// notice on it sure to arrive.
//
// go-redis reconnects a broken PubSub by itself and subscribes again, but
// notices published meanwhile are lost, silently. So the first error the
// reader sees (a read that fails, a reply go-redis cannot parse, a
// SUBSCRIBE that cannot be written) ends the subscription: Done is closed,
// every channel stops being live, and its owner subscribes anew and polls
// meanwhile. go-redis's reply parsing asserts types on what the master
// sent and panics on some malformed replies; the reader recovers such a
// panic and ends the subscription the same way.

// subscription is one master's release-notice subscription.
type subscription struct {
	ps     *redis.PubSub
	addr   string
	notify func(channel, payload string)
	owner  *Transport // set once by Transport.Subscribe, before the caller sees it

	mu     sync.Mutex
	chans  *adapter.Channels
	err    error // why it ended
	ended  bool
	opened bool          // the first PING was written: ps holds no lock of the opening
	ready  chan struct{} // closed when the master answered the first PING
	done   chan struct{} // closed when it ended
	exited chan struct{} // closed when the reader returned
}

// subscribe opens a subscription on client: it dials, and returns once
// the master answered a PING on the new connection, or ctx ended. The
// subscription's goroutine is counted in wg; when ctx ends first, it still
// runs until go-redis gives up the dial or the handshake (its DialTimeout,
// ReadTimeout), and the owner's Close waits for it through wg.
func subscribe(ctx context.Context, client redis.UniversalClient, addr string, notify func(channel, payload string), wg *sync.WaitGroup) (*subscription, error) {
	ps := client.Subscribe(ctx) // no channels: nothing dialed yet
	s := &subscription{
		ps:     ps,
		addr:   addr,
		notify: notify,
		chans:  adapter.NewChannels(),
		ready:  make(chan struct{}),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		s.run(ctx)
	}()
	select {
	case <-s.ready:
		return s, nil
	case <-s.done:
		return nil, s.cause()
	case <-ctx.Done():
		s.end(ctx.Err())
		return nil, s.cause()
	}
}

// run opens the connection and reads it.
func (s *subscription) run(ctx context.Context) {
	defer close(s.exited)
	err := s.ps.Ping(ctx) // dials, bounded by ctx and go-redis's timeouts
	s.mu.Lock()
	s.opened = true
	ended := s.ended
	s.mu.Unlock()
	if err != nil || ended {
		s.end(err)
		_ = s.ps.Close()
		return
	}
	s.read()
}

// read reads the subscription's messages until it ends.
func (s *subscription) read() {
	pinged := false
	for {
		msg, err := receive(s.ps)
		if err != nil {
			s.end(err)
			return
		}
		switch m := msg.(type) {
		case *redis.Message:
			s.mu.Lock()
			want := s.chans.Wanted(m.Channel) && !s.ended
			s.mu.Unlock()
			if want && m.Pattern == "" {
				s.notify(m.Channel, m.Payload)
			}
		case *redis.Subscription:
			if !s.ack(m) {
				s.end(fmt.Errorf("unexpected %s acknowledgement", m.Kind))
				return
			}
		case *redis.Pong:
			if !pinged {
				pinged = true
				close(s.ready)
			}
		default:
			s.end(fmt.Errorf("unexpected pub/sub reply %T", msg))
			return
		}
	}
}

// receive reads one message, turning a panic in go-redis's parsing of a
// malformed reply into an error.
func receive(ps *redis.PubSub) (msg any, err error) {
	defer func() {
		if p := recover(); p != nil {
			msg, err = nil, errors.New("malformed pub/sub reply")
		}
	}()
	return ps.Receive(context.Background())
}

// ack records an acknowledgement; it reports false for one that answers
// nothing sent.
func (s *subscription) ack(m *redis.Subscription) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.chans.Ack(m.Kind, m.Channel)
}

// set makes the subscribed channels equal to channels.
func (s *subscription) set(ctx context.Context, channels []string) error {
	s.mu.Lock()
	if s.ended {
		err := s.err
		s.mu.Unlock()
		return err
	}
	add, drop := s.chans.Set(channels)
	s.mu.Unlock()
	// Never call go-redis with no channels: an UNSUBSCRIBE of none is one
	// of every channel.
	if len(add) > 0 {
		if err := s.ps.Subscribe(ctx, add...); err != nil {
			s.end(err)
			return s.cause()
		}
	}
	if len(drop) > 0 {
		if err := s.ps.Unsubscribe(ctx, drop...); err != nil {
			s.end(err)
			return s.cause()
		}
	}
	return nil
}

// live reports whether the master acknowledged channel, with nothing about
// it pending, on a subscription still read.
func (s *subscription) live(channel string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended && s.chans.Live(channel)
}

// end ends the subscription for err (the first cause wins).
func (s *subscription) end(err error) {
	s.mu.Lock()
	if s.ended {
		s.mu.Unlock()
		return
	}
	s.ended = true
	s.err = fmt.Errorf("subscription to %s: %w", s.addr, err)
	s.chans.Lost()
	opened := s.opened
	s.mu.Unlock()
	close(s.done)
	if opened {
		// Closing the connection ends a Receive. Before the first PING
		// returned, the opening holds ps's lock: run closes it then.
		_ = s.ps.Close()
	}
}

func (s *subscription) cause() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// close ends the subscription and waits for its reader.
func (s *subscription) close() error {
	s.end(errClosed)
	<-s.exited
	return nil
}

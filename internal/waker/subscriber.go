package waker

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
)

// subscriber follows the release channels on one master, through its
// transport's Subscription: a goroutine opens it and keeps the subscribed
// channels equal to the wanted ones as the waited-for keys change, until
// stopped or the subscription breaks.
type subscriber struct {
	w       *Waker
	i       int // the master's index
	started time.Time

	kick chan struct{} // size 1: the wanted channels changed
	// ctx ends with stop: it ends the opening of the subscription and a
	// Set under way.
	ctx  context.Context
	stop context.CancelFunc

	mu   sync.Mutex
	sub  transport.Subscription // nil until open
	dead bool
}

// isLive reports whether the master acknowledged the subscription to
// channel on a connection that is still read.
func (s *subscriber) isLive(channel string) bool {
	s.mu.Lock()
	sub, dead := s.sub, s.dead
	s.mu.Unlock()
	return !dead && sub != nil && sub.Live(channel)
}

func (w *Waker) startSubscriber(i int) *subscriber {
	s := &subscriber{w: w, i: i, started: time.Now(), kick: make(chan struct{}, 1)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if !w.host.AddWorker() {
		s.stop()
		return nil
	}
	go s.run()
	return s
}

func (s *subscriber) isDead() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dead
}

func (s *subscriber) poke() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// fail marks the subscriber dead (it is restarted while waiters need it),
// and reports err: a subscription the master or the pool refused
// (transport.ErrNoticesRefused: the master serves locks, its waiters poll) is
// logged, once a minute at most per master, without counting the master
// as failing, since a restart every second would refuse again; any other
// error is a failure of the master.
func (s *subscriber) fail(err error) {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	switch {
	case err == nil:
	case errors.Is(err, transport.ErrNoticesRefused):
		s.w.refused(s.i, err)
	default:
		s.w.host.Failed(s.i, err)
	}
}

// refused logs that master i refused release notices, unless the same
// refusal of i was logged within the Reminder.
func (w *Waker) refused(i int, err error) {
	if w.cfg.Logger == nil {
		return
	}
	now := time.Now()
	msg := err.Error()
	w.mu.Lock()
	if w.refusals == nil {
		w.refusals = make(map[int]refusal)
	}
	last := w.refusals[i]
	quiet := last.msg == msg && now.Sub(last.at) < w.cfg.Reminder
	if !quiet {
		w.refusals[i] = refusal{msg, now}
	}
	w.mu.Unlock()
	if !quiet {
		w.cfg.Logger.LogAttrs(context.Background(), slog.LevelWarn, "redlock: master refuses release notices; its waiters poll",
			slog.Int("master", i), slog.String("addr", w.cfg.Addrs[i]), slog.Any("error", err),
			slog.String("note", "the same refusal is logged again after a minute at most"))
	}
}

// brokenErr is why sub broke, as master i's error, when it says
// (transport.Breakable).
func (w *Waker) brokenErr(i int, sub transport.Subscription) error {
	if e, ok := sub.(transport.Breakable); ok && e.Err() != nil {
		return w.host.NodeError(i, e.Err())
	}
	return nil
}

// run opens the subscription, then keeps its channels equal to the wanted
// ones until stopped or the subscription breaks; it closes the
// subscription as it ends. A panic (a hostile master's reply, on a pool
// the Client did not make) fails the subscriber: the waiters fall back
// on their timers until it is restarted.
func (s *subscriber) run() {
	w := s.w
	defer w.host.WorkerDone()
	defer func() {
		if p := recover(); p != nil {
			s.fail(w.host.NodeError(s.i, fault.PanicError(p)))
		}
	}()
	ctx, cancel := context.WithTimeout(s.ctx, w.cfg.Timeout)
	sub, err := w.host.Subscribe(ctx, s.i, func(channel, payload string) {
		if key, ok := strings.CutPrefix(channel, keys.WakePrefix); ok {
			w.Notify(key, payload, s.i)
		}
	})
	cancel()
	if err != nil {
		s.fail(w.host.NodeError(s.i, err))
		return
	}
	defer sub.Close()
	s.mu.Lock()
	s.sub = sub
	s.mu.Unlock()
	// expiry fires when a lingering key's time is up (lingerFor).
	expiry := time.NewTimer(lingerFor)
	defer expiry.Stop()
	for {
		select {
		case <-expiry.C:
			if next := w.expire(); !next.IsZero() {
				expiry.Reset(time.Until(next))
			}
			continue // expire pokes the subscribers when it unsubscribed keys
		case <-s.ctx.Done():
			return
		case <-sub.Done():
			s.fail(w.brokenErr(s.i, sub))
			return
		case <-s.kick:
		}
		if err := sub.Set(s.ctx, w.wantedList()); err != nil {
			switch {
			case s.ctx.Err() != nil:
				s.fail(nil)
			case errors.Is(err, transport.ErrClosed):
				// Broken before this Set (kick and Done were both
				// ready): why it broke, not the Set's ErrClosed.
				s.fail(w.brokenErr(s.i, sub))
			default:
				s.fail(w.host.NodeError(s.i, err))
			}
			return
		}
		if next := w.nextExpiry(); !next.IsZero() {
			expiry.Reset(time.Until(next))
		}
	}
}

// wantedList returns the channels the subscribers should follow.
func (w *Waker) wantedList() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	waited, lingering := w.keys.Counts()
	chans := w.keys.AppendKeys(make([]string, 0, waited+lingering))
	for i, key := range chans {
		chans[i] = layout.WakeChannel(key)
	}
	return chans
}

package redlock

import (
	"context"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gomodule/redigo/redis"
)

// Waiting without polling.
//
// The release script PUBLISHes on a channel named after the key when it
// deletes the lock. A client keeps, per master, one subscriber connection
// shared by all its waiters, subscribed to the channels of the keys they
// wait for. Each release (told apart by a prefix of its token, since every
// master announces it) wakes one waiter of that key, the one that has
// waited longest, which retries at once: no herd of retries per release.
// Notices can be lost (a master restarts, a connection drops, a waiter
// subscribes just after the release): waiters always keep their backoff
// timer, so correctness never depends on a message.

// wakeChannel is the channel the release of key publishes on.
func wakeChannel(key string) string { return wakePrefix + key }

const wakePrefix = "quorumlock:released:"

// subscriberRestartDelay spaces the restarts of a subscriber whose
// connection failed.
const subscriberRestartDelay = time.Second

// waker keeps a client's waiters and its subscribers.
type waker struct {
	c *Client

	mu      sync.Mutex
	waiters map[string]*keyWaiters // by key
	subs    []*subscriber          // by master; nil until needed
	closed  bool
}

// keyWaiters are the waiters of one key, longest waiting first, and the
// releases recently announced for it.
type keyWaiters struct {
	queue  []*waiter
	recent [8]announced // ring of releases recently announced
	next   int
}

// announced is one release and how many masters have announced it.
type announced struct {
	id      string
	notices int
}

// announce counts a master's notice of release id and reports whether it
// should wake a waiter: the first notice does (the quickest hand-off),
// and so does the one that completes a quorum, for a waiter woken by the
// first whose attempt reached masters that had not yet run the release
// (it failed there, and would otherwise sleep through their notices of
// the same release).
func (k *keyWaiters) announce(id string, quorum int) bool {
	for j := range k.recent {
		if r := &k.recent[j]; r.id == id {
			r.notices++
			return r.notices == quorum
		}
	}
	k.recent[k.next] = announced{id: id, notices: 1}
	k.next = (k.next + 1) % len(k.recent)
	return true
}

// waiter is one Acquire waiting for a key. Its channel holds at most one
// pending notice.
type waiter struct {
	key string
	ch  chan struct{}
}

func newWaker(c *Client) *waker {
	return &waker{c: c, waiters: map[string]*keyWaiters{}, subs: make([]*subscriber, len(c.masters))}
}

// registerOn adds a waiter for key, notified on ch, and makes sure every master's subscriber
// is (or will shortly be) subscribed to the key's channel.
func (w *waker) registerOn(key string, ch chan struct{}) *waiter {
	wt := &waiter{key: key, ch: ch}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[key]
	if kw == nil {
		kw = &keyWaiters{}
		w.waiters[key] = kw
	}
	kw.queue = append(kw.queue, wt)
	w.syncLocked()
	return wt
}

// waiting is one Acquire waiting for the release of any of its keys (a
// multi-key lock has several): ch gets a notice when one is announced.
type waiting struct {
	w  *waker
	ch chan struct{}
	ws []*waiter
}

// wait registers a waiter for each key, all on one channel.
func (w *waker) wait(keys []string) *waiting {
	wg := &waiting{w: w, ch: make(chan struct{}, 1)}
	for _, k := range keys {
		wg.ws = append(wg.ws, w.registerOn(k, wg.ch))
	}
	return wg
}

// stop unregisters the waiters.
func (wg *waiting) stop() {
	for _, wt := range wg.ws {
		wg.w.unregister(wt)
	}
}

// unregister removes a waiter; the last waiter of a key unsubscribes it.
func (w *waker) unregister(wt *waiter) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[wt.key]
	if kw == nil {
		return
	}
	kw.queue = slices.DeleteFunc(kw.queue, func(x *waiter) bool { return x == wt })
	if len(kw.queue) == 0 {
		delete(w.waiters, wt.key)
		w.syncLocked()
	}
}

// revive restarts subscribers whose connection failed, for the waiters
// still waiting.
func (w *waker) revive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.syncLocked()
}

// syncLocked starts missing subscribers and tells each the set of keys
// to follow.
func (w *waker) syncLocked() {
	if w.closed {
		return
	}
	for i, s := range w.subs {
		if s == nil || (s.isDead() && time.Since(s.started) > subscriberRestartDelay) {
			if len(w.waiters) == 0 {
				continue
			}
			s = w.startSubscriber(i)
			if s == nil {
				return // client closed
			}
			w.subs[i] = s
		}
		s.poke()
	}
}

// wanted returns the channels the subscribers should follow.
func (w *waker) wanted() map[string]bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	chans := make(map[string]bool, len(w.waiters))
	for key := range w.waiters {
		chans[wakeChannel(key)] = true
	}
	return chans
}

// notify wakes the longest-waiting waiter of key for release id at the
// release's first notice and at the notice that completes a quorum. The
// woken waiter goes to the back of the queue: if it loses the race it
// waits its turn again.
func (w *waker) notify(key, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[key]
	if kw == nil || !kw.announce(id, w.c.quorum) {
		return
	}
	wt := kw.queue[0]
	copy(kw.queue, kw.queue[1:])
	kw.queue[len(kw.queue)-1] = wt
	select {
	case wt.ch <- struct{}{}:
	default:
	}
}

// close stops every subscriber; the client waits for their goroutines.
func (w *waker) close() {
	w.mu.Lock()
	w.closed = true
	subs := w.subs
	w.mu.Unlock()
	for _, s := range subs {
		if s != nil {
			s.stop()
		}
	}
}

// subscriber is the connection to one master on which a client follows
// the release channels. A writer goroutine (un)subscribes as the waited-for
// keys change; a reader goroutine turns messages into wake-ups.
type subscriber struct {
	w       *waker
	m       *master
	started time.Time

	kick chan struct{} // size 1: the wanted channels changed
	quit chan struct{}

	mu      sync.Mutex
	conn    redis.Conn
	dead    bool
	stopped bool
}

func (w *waker) startSubscriber(i int) *subscriber {
	c := w.c
	s := &subscriber{w: w, m: &c.masters[i], started: time.Now(),
		kick: make(chan struct{}, 1), quit: make(chan struct{})}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.workers.Add(1)
	c.mu.Unlock()
	go s.write()
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

func (s *subscriber) stop() {
	s.mu.Lock()
	if !s.stopped {
		s.stopped = true
		close(s.quit)
	}
	conn := s.conn
	s.mu.Unlock()
	if conn != nil {
		conn.Close() // unblocks the reader
	}
}

func (s *subscriber) fail(err error) {
	s.mu.Lock()
	s.dead = true
	s.mu.Unlock()
	if err != nil {
		s.w.c.logFailure(opWait, "", s.m, err)
	}
}

// write connects, starts the reader, then keeps the subscriptions equal to
// the wanted channels until stopped or the connection fails.
func (s *subscriber) write() {
	c := s.w.c
	defer c.workers.Done()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	conn, err := dialDedicated(ctx, s.m)
	cancel()
	if err != nil {
		s.fail(c.nodeError(s.m, err))
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		conn.Close()
		return
	}
	s.conn = conn
	s.mu.Unlock()
	c.workers.Add(1)
	readerDone := make(chan struct{})
	go s.read(conn, readerDone)

	psc := redis.PubSubConn{Conn: conn}
	have := map[string]bool{}
	for {
		select {
		case <-s.quit:
			<-readerDone
			return
		case <-readerDone:
			s.fail(nil)
			return
		case <-s.kick:
		}
		want := s.w.wanted()
		var sub, unsub []any
		for ch := range want {
			if !have[ch] {
				sub = append(sub, ch)
			}
		}
		for ch := range have {
			if !want[ch] {
				unsub = append(unsub, ch)
			}
		}
		if len(sub) > 0 {
			err = psc.Subscribe(sub...)
		}
		if err == nil && len(unsub) > 0 {
			err = psc.Unsubscribe(unsub...)
		}
		if err != nil {
			s.fail(c.nodeError(s.m, err))
			conn.Close()
			<-readerDone
			return
		}
		have = want
	}
}

// read wakes the waiters of each released key until the connection closes.
func (s *subscriber) read(conn redis.Conn, done chan struct{}) {
	defer s.w.c.workers.Done()
	defer close(done)
	psc := redis.PubSubConn{Conn: conn}
	for {
		// No read deadline: the connection is idle while nobody releases.
		switch v := psc.ReceiveWithTimeout(0).(type) {
		case redis.Message:
			if key, ok := strings.CutPrefix(v.Channel, wakePrefix); ok {
				s.w.notify(key, string(v.Data))
			}
		case error:
			return
		}
	}
}

// dialDedicated returns a connection of its own for subscribing: from the
// pool's dialer when it has one, else borrowed from the pool for as long as
// the subscriber lives.
func dialDedicated(ctx context.Context, m *master) (redis.Conn, error) {
	if d, ok := m.pool.(dialer); ok {
		return d.Dial(ctx)
	}
	return m.pool.GetContext(ctx)
}

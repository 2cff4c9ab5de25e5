package redlock

import (
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/layout"
)

// Waiting without polling.
//
// The release script PUBLISHes on a channel named after the key when it
// deletes the lock. A client keeps, per master, one subscriber connection
// shared by all its waiters, subscribed to the channels of the keys they
// wait for. Each release (told apart by a prefix of its token, since every
// master announces it) wakes one waiter of that key, the one that has
// waited longest, which retries at once: no herd of retries per release.
// Whom each notice wakes is package internal/wake's decision
// (wake.Decide); this file keeps the waiters of every key, and the
// subscribers (wake_subscriber.go) bring the notices.
// Notices can be lost (a master restarts, a connection drops, a waiter
// subscribes just after the release): waiters always keep a timer (their
// backoff, or the fallback poll below), so correctness never depends on a
// message.
//
// A release between a waiter's refused first attempt and its subscription
// is not lost: a waiter whose keys' channels were not all live on every
// master before that attempt, or on which a notice came since, tries once
// more as soon as they are (see Acquire and docs/design.md). A key's
// channel stays subscribed for lingerFor after its last waiter left (at
// most maxLinger keys), so the waiters of a busy key neither SUBSCRIBE and
// UNSUBSCRIBE per wait nor need that second attempt.

// wakeChannel is the channel the release of key publishes on.
func wakeChannel(key string) string { return layout.WakeChannel(key) }

const wakePrefix = keys.WakePrefix

// lingerFor is how long a key's channel stays subscribed after its last
// waiter left; maxLinger bounds the keys kept so per client.
const (
	lingerFor = time.Second
	maxLinger = 256
)

// subscriberRestartDelay spaces the restarts of a subscriber whose
// connection failed.
const subscriberRestartDelay = time.Second

// waker keeps a client's waiters and its subscribers.
type waker struct {
	c *Client

	// mu comes before the identity's mutex (ident.Identity), which
	// notify takes through leadFor (Known) with mu held.
	mu sync.Mutex
	// keys are the waiters by key, and the keys that linger; its
	// generation counts the keys' births and notices heard: a waiter
	// compares it with the value it read before its first attempt.
	keys     wake.Table
	subs     []*subscriber // by master; nil until needed
	closed   bool
	refusals map[int]refusal // by master: the latest refusal of notices logged
}

// refusal is a refusal of release notices that was logged, and when.
type refusal struct {
	msg string
	at  time.Time
}

// waiterKind returns the wake.Kind of a waiter of a lock on n keys (a
// multi-key lock has several), a waiting writer when ahead, fair when
// arrival ≠ 0 (its place in the key's queue, fairness.arrival), a reader
// when shared.
func waiterKind(n int, ahead, shared bool, arrival int64) wake.Kind {
	switch {
	case n > 1:
		return wake.Multi
	case ahead:
		return wake.Writer
	case arrival != 0:
		return wake.Fair
	case shared:
		return wake.Reader
	}
	return wake.Plain
}

func newWaker(c *Client) *waker {
	return &waker{c: c, subs: make([]*subscriber, len(c.masters))}
}

// mark is what a waiter reads before its first attempt: the waker's
// generation, and whether each of keys had its channel live on every
// master then.
type mark struct {
	gen  uint64
	live bool
}

// mark reads the mark of the keys of a lock of kind k on key (see mark).
// It asks k for the keys only when some key is followed: no allocation
// on the path of a client that waits for nothing.
func (w *waker) mark(key string, k kind) mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := mark{gen: w.keys.Gen(), live: !w.keys.Empty()}
	if !m.live {
		return m
	}
	for _, each := range k.keys(key) {
		if !w.keys.Followed(each) || w.liveLocked(each) < len(w.subs) {
			m.live = false
			break
		}
	}
	return m
}

// registerOn adds a waiter of kind wk for key, notified on ch (arrival: a
// fair waiter's place, else 0), and makes sure every master's subscriber
// is (or will shortly be) subscribed to the key's channel. It reports
// whether the key was followed since gen with no notice heard: a key's
// entry (and its subscriptions) older than gen, no notice since.
func (w *waker) registerOn(key string, ch chan struct{}, gen uint64, wk wake.Kind, arrival int64) (*wake.Waiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt, quiet := w.keys.Add(key, ch, gen, wk, arrival)
	w.syncLocked()
	return wt, quiet
}

// waiting is one Acquire waiting for the release of any of its keys (a
// multi-key lock has several): ch gets a notice when one is announced.
type waiting struct {
	w  *waker
	ch chan struct{}
	ws []*wake.Waiter
	// recheck: a release between the refusal of the first attempt and
	// the registration may have gone unheard — a key's channel was not
	// live on every master before that attempt, or was unsubscribed
	// since, or a notice of a key came meanwhile. The waiter tries once
	// more as soon as every key's channel is live (Acquire).
	recheck bool
	// attempt is the waiter of ws whose attempt, made for a notice, is
	// under way (trying), or nil.
	attempt *wake.Waiter
}

// wait registers a waiter of a lock of kind k for each of keys, all on
// one channel, and compares the keys with m, read before the first
// attempt (see waiting.recheck).
func (w *waker) wait(keys []string, m mark, k kind) *waiting {
	wg := &waiting{w: w, ch: make(chan struct{}, 1), recheck: !m.live}
	arrival := arrivalOf(k)
	wk := waiterKind(len(keys), k.leaves() && !k.queued(), k.shared(), arrival)
	for _, key := range keys {
		wt, quiet := w.registerOn(key, wg.ch, m.gen, wk, arrival)
		wg.ws = append(wg.ws, wt)
		wg.recheck = wg.recheck || !quiet
	}
	return wg
}

// asking records lead, the pilot of key, as the master a woken attempt of
// a single-key waiter asks first (wake.Notice.FromAsked). A multi-key
// waiter records nothing: it hears every notice of each of its keys
// (notify), and the record of its first key is another waiter's.
func (wg *waiting) asking(key string, lead int) {
	if len(wg.ws) != 1 {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.keys.Queue(key); q != nil {
		q.Asking(lead)
	}
}

// trying records that the waiter, woken by a notice, begins its attempt
// on its key: a notice that wakes another waiter of the key meanwhile
// makes the attempt, should it fail after a master granted it, wake the
// next waiter as it ends (wake.Tried). A multi-key waiter records
// nothing: it hears every notice of each of its keys.
func (wg *waiting) trying() {
	if len(wg.ws) != 1 {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	wg.tryingLocked(wg.ws[0])
}

func (wg *waiting) tryingLocked(wt *wake.Waiter) {
	wg.attempt = wt
	wg.w.keys.Trying(wt)
}

// tried records the end of the attempt begun with trying, if any; err is
// its outcome (nil: it got the lock). A failed attempt that some master
// granted, or may have, undid that grant as it ended (wake.Tried); one
// that every master it asked refused undid nothing.
func (wg *waiting) tried(err error) {
	if wg.attempt == nil {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys.Tried(wg.attempt, err != nil && !refusedWhereAsked(err))
	wg.attempt = nil
}

// refusedWhereAsked reports whether err, a failed acquisition's, says
// that every master it asked refused it: none granted it, failed or went
// unanswered. A led attempt the pilot refused asked no other master.
func refusedWhereAsked(err error) bool {
	var qe *QuorumError
	if !asQuorumError(err, &qe) || qe.Op != opAcquire.String() {
		return false
	}
	return qe.Succeeded == 0 && len(qe.Refused)+len(qe.NotAsked) == qe.Masters
}

// live reports whether every key's channel is live on every master.
func (wg *waiting) live() bool {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		if w.liveLocked(wt.Key) < len(w.subs) {
			return false
		}
	}
	return true
}

// stop unregisters the waiters; acquired tells whether the Acquire got
// the lock.
func (wg *waiting) stop(acquired bool) {
	for _, wt := range wg.ws {
		wg.w.unregister(wt, acquired)
	}
}

// unregister removes a waiter, which hands on what it leaves
// (wake.Leave): a notice it was woken by and gives up, or, a reader that
// got in, a wake-up. With no next waiter, the notice is kept as heard: a
// waiter registering next, whose first attempt it may have come after,
// tries again (mark). The key's channel stays subscribed for lingerFor;
// beyond maxLinger such keys, the one idle longest is unsubscribed at
// once.
func (w *waker) unregister(wt *wake.Waiter, acquired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys.Remove(wt, acquired, time.Now(), maxLinger) {
		w.syncLocked() // the subscribers arm their expiry timers
	}
}

// expire unsubscribes the keys that lingered for lingerFor, and returns
// when the next one will have (zero: none lingers).
func (w *waker) expire() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	next, dropped := w.keys.Expire(time.Now(), lingerFor)
	if dropped {
		w.syncLocked()
	}
	return next
}

// nextExpiry returns when the next lingering key's time is up (zero:
// none lingers).
func (w *waker) nextExpiry() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys.NextExpiry(lingerFor)
}

// liveLocked counts the masters on which key's channel is subscribed and
// the subscription acknowledged, on a connection still read.
func (w *waker) liveLocked(key string) int {
	ch := wakeChannel(key)
	n := 0
	for _, s := range w.subs {
		if s != nil && s.isLive(ch) {
			n++
		}
	}
	return n
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
			if !w.keys.Waiting() {
				continue // no waiter: lingering keys do not restart one
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

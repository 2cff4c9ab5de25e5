package waker

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/clock"
	"github.com/quorumlock/quorumlock/internal/wake"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
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
// subscribers (subscriber.go) bring the notices.
// Notices can be lost (a master restarts, a connection drops, a waiter
// subscribes just after the release): waiters always keep a timer (their
// backoff, or the fallback poll of poll.go), so correctness never depends
// on a message.
//
// A release between a waiter's refused first attempt and its subscription
// is not lost: a waiter whose keys' channels were not all live on every
// master before that attempt, or on which a notice came since, tries once
// more as soon as they are (see the core's Acquire and docs/design.md). A
// key's channel stays subscribed for lingerFor after its last waiter left
// (at most MaxLinger keys), so the waiters of a busy key neither SUBSCRIBE
// and UNSUBSCRIBE per wait nor need that second attempt.

// lingerFor is how long a key's channel stays subscribed after its last
// waiter left.
const lingerFor = time.Second

// MaxLinger bounds the keys whose channel stays subscribed for lingerFor
// after their last waiter left, per client: beyond it, the one idle
// longest is unsubscribed at once.
const MaxLinger = 256

// subscriberRestartDelay spaces the restarts of a subscriber whose
// connection failed.
const subscriberRestartDelay = time.Second

// Host is what a Waker asks of its Client. Its methods are called from
// the subscribers' goroutines and the waiters' as well, some with the
// Waker's lock held (see Waker): they must not call back into the Waker.
type Host interface {
	// AddWorker counts one more goroutine that the Client's Close waits
	// for, unless the Client is closed; it reports whether it did.
	// WorkerDone ends one so counted.
	AddWorker() bool
	WorkerDone()
	// Subscribe opens master i's release-notice subscription
	// (transport.Transport.Subscribe).
	Subscribe(ctx context.Context, i int, notify func(channel, payload string)) (transport.Subscription, error)
	// NodeError returns err as master i's error (the Client's NodeError).
	NodeError(i int, err error) error
	// Failed records a failure of master i outside a round: the Client
	// counts and logs it as it does a command's.
	Failed(i int, err error)
	// LeadFor returns the master a woken waiter's attempt on key asks
	// first (its pilot), or -1 for none.
	LeadFor(key string) int
	// RefusedWhereAsked reports whether err, a failed acquisition's, says
	// that every master it asked refused it: none granted it, failed or
	// went unanswered.
	RefusedWhereAsked(err error) bool
}

// Config is what a Waker is made with: values its Client has at
// construction.
type Config struct {
	// Addrs are the masters' addresses, by index, as logs name them; their
	// number is the number of masters.
	Addrs []string
	// Quorum is the Client's quorum; Timeout its per-master timeout.
	Quorum  int
	Timeout time.Duration
	// Clock times a waiter's delay (its backoff or fallback poll); the
	// rest of the waits are in real time.
	Clock clock.Clock
	// Closing is closed when the Client closes: it ends every pause.
	Closing <-chan struct{}
	// Logger, when not nil, logs a master's refusal of release notices,
	// at most once per Reminder for the same refusal of one master.
	Logger   *slog.Logger
	Reminder time.Duration
	// Jitter returns a random duration in [0, d), d positive: the
	// Client's random source.
	Jitter func(d time.Duration) time.Duration
	Host   Host
}

// Waker keeps a client's waiters and its subscribers. It is safe for
// concurrent use; make one with New.
type Waker struct {
	cfg  Config
	host Host
	// settled, when set (tests), runs as a waiter begins a pause with no
	// re-check pending: its latest attempt is over.
	settled func()

	// mu guards the fields below. Lock order: mu, then a subscriber's mu
	// (isLive, isDead), then its Subscription's own lock (Live); mu, then
	// the Client's lock that Host.AddWorker takes as a subscriber starts;
	// mu, then the Client's identity lock that Host.LeadFor takes (the
	// run_ids it hashes) as Notify works out a key's pilot. Nothing that
	// holds one of those calls into the Waker.
	mu sync.Mutex
	// keys are the waiters by key, and the keys that linger; its
	// generation counts the keys' births and notices heard: a waiter
	// compares it with the value it read before its first attempt.
	keys     wake.Table
	subs     []*subscriber // by master; nil until needed
	closed   bool
	refusals map[int]refusal // by master: the latest refusal of notices logged
}

// New returns the Waker of a Client made with cfg. It starts nothing: a
// master's subscriber starts once a waiter needs it.
func New(cfg Config) *Waker {
	return &Waker{cfg: cfg, host: cfg.Host, subs: make([]*subscriber, len(cfg.Addrs))}
}

// refusal is a refusal of release notices that was logged, and when.
type refusal struct {
	msg string
	at  time.Time
}

// KindOf returns the wake.Kind of a waiter of a lock on n keys (a
// multi-key lock has several), a waiting writer when ahead, fair when
// arrival ≠ 0 (its place in the key's queue), a reader when shared.
func KindOf(n int, ahead, shared bool, arrival int64) wake.Kind {
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

// Mark is what a waiter reads before its first attempt: the Waker's
// generation, and whether each of its keys had its channel live on every
// master then (Waker.Mark). The zero Mark is the mark of nothing live.
type Mark struct {
	Gen  uint64
	Live bool
}

// Mark reads the mark of the keys keysOf(key) returns. It calls keysOf
// only when some key is followed: no allocation on the path of a client
// that waits for nothing.
func (w *Waker) Mark(key string, keysOf func(string) []string) Mark {
	w.mu.Lock()
	defer w.mu.Unlock()
	m := Mark{Gen: w.keys.Gen(), Live: !w.keys.Empty()}
	if !m.Live {
		return m
	}
	for _, each := range keysOf(key) {
		if !w.keys.Followed(each) || w.liveLocked(each) < len(w.subs) {
			m.Live = false
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
func (w *Waker) registerOn(key string, ch chan struct{}, gen uint64, wk wake.Kind, arrival int64) (*wake.Waiter, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt, quiet := w.keys.Add(key, ch, gen, wk, arrival)
	w.syncLocked()
	return wt, quiet
}

// Waiting is one Acquire waiting for the release of any of its keys (a
// multi-key lock has several, a semaphore one per slot): its channel gets
// a notice when one is announced. It is used by the goroutine of that
// Acquire alone.
type Waiting struct {
	w  *Waker
	ch chan struct{}
	ws []*wake.Waiter
	// Recheck: a release between the refusal of the first attempt and
	// the registration may have gone unheard — a key's channel was not
	// live on every master before that attempt, or was unsubscribed
	// since, or a notice of a key came meanwhile. The waiter tries once
	// more as soon as every key's channel is live (WaitOut ends with
	// ResumeRecheck, and clears it).
	Recheck bool
	// attempt is the waiter of ws whose attempt, made for a notice, is
	// under way (trying), or nil.
	attempt *wake.Waiter
}

// Wait registers a waiter of kind wk (arrival: a fair waiter's place,
// else 0) for each of keys, all on one channel, and compares the keys
// with m, read before the first attempt (see Waiting.Recheck). The
// caller ends the wait with Stop or StopAt.
func (w *Waker) Wait(keys []string, m Mark, wk wake.Kind, arrival int64) *Waiting {
	wg := &Waiting{w: w, ch: make(chan struct{}, 1), Recheck: !m.Live}
	for _, key := range keys {
		wt, quiet := w.registerOn(key, wg.ch, m.Gen, wk, arrival)
		wg.ws = append(wg.ws, wt)
		wg.Recheck = wg.Recheck || !quiet
	}
	return wg
}

// InLine records id as the waiter's ID in its key's line on the masters
// (a plain waiter's: wake.Waiter.ID), by which a release that hands the
// key over to it names it.
func (wg *Waiting) InLine(id string) {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		wt.ID = id
	}
}

// heir reports, and clears, whether the waiter's latest wake-up handed
// it the key (wake.Waiter.Heir).
func (wg *Waiting) heir() bool {
	if len(wg.ws) != 1 {
		return false
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	h := wg.ws[0].Heir
	wg.ws[0].Heir = false
	return h
}

// asking records lead, the pilot of key, as the master a woken attempt of
// a single-key waiter asks first (wake.Notice.FromAsked). A multi-key
// waiter records nothing: it hears every notice of each of its keys
// (Notify), and the record of its first key is another waiter's.
func (wg *Waiting) asking(key string, lead int) {
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
func (wg *Waiting) trying() {
	if len(wg.ws) != 1 {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	wg.tryingLocked(wg.ws[0])
}

func (wg *Waiting) tryingLocked(wt *wake.Waiter) {
	wg.attempt = wt
	wg.w.keys.Trying(wt)
}

// Tried records the end of the attempt begun by Pause (or TakeOne), if
// any; err is its outcome (nil: it got the lock). A failed attempt that
// some master granted, or may have (Host.RefusedWhereAsked is false),
// undid that grant as it ended (wake.Tried); one that every master it
// asked refused undid nothing.
func (wg *Waiting) Tried(err error) {
	if wg.attempt == nil {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	w.keys.Tried(wg.attempt, err != nil && !w.host.RefusedWhereAsked(err))
	wg.attempt = nil
}

// TakeOne returns the index of a key the waiter was woken for and takes
// its notice, or -1 when none is left; the others it hands on
// (wake.Table.TakeOne), looking from draw(len(keys)) on, round. The
// attempt on that key begins: its end is told with Tried. It is for a
// waiter of one key among several (a semaphore's slots), registered with
// wake.Plain.
func (wg *Waiting) TakeOne(draw func(n int) int) int {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	i := w.keys.TakeOne(wg.ws, draw(len(wg.ws)))
	if i >= 0 {
		wg.tryingLocked(wg.ws[i])
	}
	return i
}

// One returns the waiter of keys[i] alone, on the same channel, for the
// attempt on that key that TakeOne began (Woken). Its Stop, StopAt and
// Tried are not for use: the Waiting it came from ends the wait.
func (wg *Waiting) One(i int) *Waiting {
	return &Waiting{w: wg.w, ch: wg.ch, ws: wg.ws[i : i+1]}
}

// live reports whether every key's channel is live on every master.
func (wg *Waiting) live() bool {
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

// Stop unregisters the waiters; acquired tells whether the Acquire got
// the lock.
func (wg *Waiting) Stop(acquired bool) {
	for _, wt := range wg.ws {
		wg.w.unregister(wt, acquired)
	}
}

// StopAt unregisters the waiters of a call that needed one of its keys
// (a semaphore's slots): got is the index of the key it took, or -1. The
// notice of a key it was woken for and has not tried goes to the next
// waiter of that key (Waker.unregister).
func (wg *Waiting) StopAt(got int) {
	for i, each := range wg.ws {
		wg.w.unregister(each, i == got)
	}
}

// unregister removes a waiter, which hands on what it leaves
// (wake.Leave): a notice it was woken by and gives up, or, a reader that
// got in, a wake-up. With no next waiter, the notice is kept as heard: a
// waiter registering next, whose first attempt it may have come after,
// tries again (Mark). The key's channel stays subscribed for lingerFor;
// beyond MaxLinger such keys, the one idle longest is unsubscribed at
// once.
func (w *Waker) unregister(wt *wake.Waiter, acquired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.keys.Remove(wt, acquired, time.Now(), MaxLinger) {
		w.syncLocked() // the subscribers arm their expiry timers
	}
}

// expire unsubscribes the keys that lingered for lingerFor, and returns
// when the next one will have (zero: none lingers).
func (w *Waker) expire() time.Time {
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
func (w *Waker) nextExpiry() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys.NextExpiry(lingerFor)
}

// liveLocked counts the masters on which key's channel is subscribed and
// the subscription acknowledged, on a connection still read.
func (w *Waker) liveLocked(key string) int {
	ch := layout.WakeChannel(key)
	n := 0
	for _, s := range w.subs {
		if s != nil && s.isLive(ch) {
			n++
		}
	}
	return n
}

// Revive restarts subscribers whose connection failed, for the waiters
// still waiting.
func (w *Waker) Revive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.syncLocked()
}

// syncLocked starts missing subscribers and tells each the set of keys
// to follow.
func (w *Waker) syncLocked() {
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

// Close stops every subscriber; the Client waits for their goroutines
// (Host.AddWorker). Nothing is subscribed after it.
func (w *Waker) Close() {
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

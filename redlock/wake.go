package redlock

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/keys"
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

	mu      sync.Mutex
	waiters map[string]*keyWaiters // by key, with waiters or lingering
	// lingering holds the keys without waiters whose channel stays
	// subscribed until their idle time plus lingerFor.
	lingering map[string]*keyWaiters
	subs      []*subscriber // by master; nil until needed
	closed    bool
	refusals  map[int]refusal // by master: the latest refusal of notices logged
	// gen counts the keys' births and notices: a waiter compares the
	// stamps of its keys with the value it read before its first attempt.
	gen uint64
}

// refusal is a refusal of release notices that was logged, and when.
type refusal struct {
	msg string
	at  time.Time
}

// keyWaiters are the waiters of one key, longest waiting first, and the
// releases recently announced for it.
type keyWaiters struct {
	queue  []*waiter
	recent [8]announced // ring of releases recently announced
	next   int
	subs   int // clients waiting on the master of the latest notice, by that notice; 0: not told
	// asked is the master the latest piloted attempt of a waiter of the key
	// asked first (-1: none yet): its notice wakes a waiter (announce).
	asked int
	born  uint64    // waker.gen when the entry was made
	heard uint64    // waker.gen at its latest notice that woke nobody
	idle  time.Time // when its last waiter left; zero while it has waiters
}

// announced is one release, how many masters have announced it, and
// whether the key's pilot has (lead.go).
type announced struct {
	id       string
	notices  int
	leadSeen bool
}

// announce counts master from's notice of release id and reports whether
// it should wake a waiter: the first notice does (the quickest hand-off).
// A woken waiter asks the key's pilot first (lead.go), which may
// not have run the release yet when another master's notice came first:
// the pilot's own notice wakes a waiter again. So does the notice of the
// master asked, the pilot a woken attempt asked first: the pilot can change
// between that attempt and the master's notice (leadFor passes over a
// master that failed a command lately, and takes it back after
// leadQuiet), and a notice judged by the pilot of its own time only would
// wake nobody from a master that refused the attempt as its pilot. So does
// the notice that completes a quorum, for a waiter woken earlier whose attempt reached
// masters that had not yet run the release: it failed there, and would
// otherwise sleep through their notices of the same release. That holds
// for a piloted attempt too: a pilot that ran the release first grants it,
// and the others, asked next, may still hold the released token.
func (k *keyWaiters) announce(id string, from, lead, asked, quorum int) bool {
	for j := range k.recent {
		if r := &k.recent[j]; r.id == id {
			r.notices++
			if from == lead && !r.leadSeen {
				r.leadSeen = true
				return true
			}
			return from == asked || r.notices == quorum
		}
	}
	k.recent[k.next] = announced{id: id, notices: 1, leadSeen: from == lead}
	k.next = (k.next + 1) % len(k.recent)
	return true
}

// waiter is one Acquire waiting for a key. Its channel holds at most one
// pending notice.
type waiter struct {
	key string
	ch  chan struct{}
	// woken: a release's notice was handed to this waiter (guarded by
	// waker.mu). Should it give up without the lock, the notice is passed
	// on to the next waiter of the key, which might otherwise sleep until
	// its fallback poll.
	woken bool
	// multi: the waiter waits for several keys (a multi-key lock). Woken
	// by the release of one, it may fail on another still held and go on
	// waiting, neither taking this key nor giving up: a notice that wakes
	// it cannot be counted on to hand the key over (notify).
	multi bool
	// ahead: a waiting writer. It is woken before this client's other
	// waiters of the key, whatever their places: its intent turns its
	// readers away, so a notice that woke one of them instead would be
	// spent, and the writer, last in the queue after an attempt it lost,
	// might hear none of the release's notices (a waiter on a clock that
	// does not run, or whose backoff is long, would sleep on).
	ahead bool
	// arrival: a fair waiter's place in the key's queue (µs since the
	// epoch, fairness.arrival), 0 for any other. Fair waiters keep arrival
	// order in the local queue and are never sent to its back (wakeFirst).
	arrival int64
}

func newWaker(c *Client) *waker {
	return &waker{c: c, waiters: map[string]*keyWaiters{}, lingering: map[string]*keyWaiters{},
		subs: make([]*subscriber, len(c.masters))}
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
	m := mark{gen: w.gen, live: len(w.waiters) > 0}
	if !m.live {
		return m
	}
	for _, each := range k.keys(key) {
		if w.waiters[each] == nil || w.liveLocked(each) < len(w.subs) {
			m.live = false
			break
		}
	}
	return m
}

// registerOn adds a waiter for key, notified on ch, and makes sure every
// master's subscriber is (or will shortly be) subscribed to the key's
// channel. It reports whether the key was followed since gen with no
// notice heard: a key's entry (and its subscriptions) older than gen,
// no notice since.
func (w *waker) registerOn(key string, ch chan struct{}, gen uint64, multi, ahead bool, arrival int64) (*waiter, bool) {
	wt := &waiter{key: key, ch: ch, multi: multi, ahead: ahead, arrival: arrival}
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[key]
	if kw == nil {
		w.gen++
		kw = &keyWaiters{born: w.gen, asked: -1}
		w.waiters[key] = kw
	}
	if !kw.idle.IsZero() {
		kw.idle = time.Time{}
		delete(w.lingering, key)
	}
	kw.queue = append(kw.queue, wt)
	if arrival != 0 {
		// A fair waiter takes its place by arrival: one that arrived
		// earlier may register later (its first attempt took longer).
		for i := len(kw.queue) - 1; i > 0 && kw.queue[i-1].arrival > arrival; i-- {
			kw.queue[i-1], kw.queue[i] = kw.queue[i], kw.queue[i-1]
		}
	}
	w.syncLocked()
	return wt, kw.born <= gen && kw.heard <= gen
}

// waiting is one Acquire waiting for the release of any of its keys (a
// multi-key lock has several): ch gets a notice when one is announced.
type waiting struct {
	w  *waker
	ch chan struct{}
	ws []*waiter
	// recheck: a release between the refusal of the first attempt and
	// the registration may have gone unheard — a key's channel was not
	// live on every master before that attempt, or was unsubscribed
	// since, or a notice of a key came meanwhile. The waiter tries once
	// more as soon as every key's channel is live (Acquire).
	recheck bool
}

// wait registers a waiter for each key, all on one channel, and compares
// the keys with m, read before the first attempt (see waiting.recheck).
// arrival is a fair waiter's place in the queue (waiter.arrival), else 0.
func (w *waker) wait(keys []string, m mark, ahead bool, arrival int64) *waiting {
	wg := &waiting{w: w, ch: make(chan struct{}, 1), recheck: !m.live}
	for _, k := range keys {
		wt, quiet := w.registerOn(k, wg.ch, m.gen, len(keys) > 1, ahead, arrival)
		wg.ws = append(wg.ws, wt)
		wg.recheck = wg.recheck || !quiet
	}
	return wg
}

// asking records lead, the pilot of key, as the master a woken attempt of
// a single-key waiter asks first (keyWaiters.asked). A multi-key waiter
// records nothing: it hears every notice of each of its keys (notify),
// and the record of its first key is another waiter's.
func (wg *waiting) asking(key string, lead int) {
	if len(wg.ws) != 1 {
		return
	}
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if kw := w.waiters[key]; kw != nil {
		kw.asked = lead
	}
}

// live reports whether every key's channel is live on every master.
func (wg *waiting) live() bool {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		if w.liveLocked(wt.key) < len(w.subs) {
			return false
		}
	}
	return true
}

// stop unregisters the waiters; acquired tells whether the Acquire got
// the lock, shared whether others may hold it along (a reader).
func (wg *waiting) stop(acquired, shared bool) {
	for _, wt := range wg.ws {
		wg.w.unregister(wt, acquired, shared)
	}
}

// unregister removes a waiter; the last waiter of a key leaves it lingering
// (lingerLocked).
// A waiter that was woken and gives up without the lock passes the notice
// on to the next waiter of its key, and so does a reader that got in: the
// next one may be a reader that can get in too (a release's notices wake
// only one or two waiters per client). With no next waiter, the notice is
// kept as heard: a waiter registering next, whose first attempt it may
// have come after, tries again (mark).
func (w *waker) unregister(wt *waiter, acquired, shared bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[wt.key]
	if kw == nil {
		return
	}
	kw.queue = slices.DeleteFunc(kw.queue, func(x *waiter) bool { return x == wt })
	if len(kw.queue) == 0 {
		if wt.woken && !acquired {
			w.gen++
			kw.heard = w.gen
		}
		w.lingerLocked(wt.key, kw)
		return
	}
	if wt.woken && !acquired || acquired && shared {
		kw.wakeFirst()
	}
}

// lingerLocked keeps the channel of key, whose last waiter left,
// subscribed for lingerFor; beyond maxLinger such keys, the one idle
// longest is unsubscribed at once.
func (w *waker) lingerLocked(key string, kw *keyWaiters) {
	kw.idle = time.Now()
	w.lingering[key] = kw
	defer w.syncLocked() // the subscribers arm their expiry timers
	if len(w.lingering) <= maxLinger {
		return
	}
	var oldest string
	for k, x := range w.lingering {
		if oldest == "" || x.idle.Before(w.lingering[oldest].idle) {
			oldest = k
		}
	}
	delete(w.lingering, oldest)
	delete(w.waiters, oldest)
}

// expire unsubscribes the keys that lingered for lingerFor, and returns
// when the next one will have (zero: none lingers).
func (w *waker) expire() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	var next time.Time
	changed := false
	for k, kw := range w.lingering {
		at := kw.idle.Add(lingerFor)
		if !at.After(now) {
			delete(w.lingering, k)
			delete(w.waiters, k)
			changed = true
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if changed {
		w.syncLocked()
	}
	return next
}

// nextExpiry returns when the next lingering key's time is up (zero:
// none lingers).
func (w *waker) nextExpiry() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	var next time.Time
	for _, kw := range w.lingering {
		if at := kw.idle.Add(lingerFor); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// Fallback poll.
//
// A waiter is woken by the release's notice, and its backoff timer is only
// a fallback for the keys that are freed without one: a holder that
// vanished frees its key at its TTL, and the rollbacks of a split vote are
// not announced. While the backoff climbs (contention, a split vote, a
// notice that came before the masters that had not yet run the release)
// the waiter retries at the backoff; once the backoff has reached its
// maximum, the last attempt was refused by a quorum's worth of masters
// that hold the key for another, and the release of each of its keys
// would reach this client —
// the key's channel is subscribed, acknowledged, on enough masters that
// every quorum includes one of them (N − quorum + 1) — the waiter polls
// only every fallbackPoll(TTL) instead.

// maxFallbackPoll bounds the fallback poll.
const maxFallbackPoll = 2 * time.Second

// fallbackPoll is how long a waiter with live subscriptions sleeps between
// attempts unless woken: half the lock's TTL (a vanished holder with the
// same TTL frees the key at most that long before the waiter notices), at
// most maxFallbackPoll, and never less than the maximum backoff.
func fallbackPoll(ttl, backoffMax time.Duration) time.Duration {
	return max(backoffMax, min(ttl/2, maxFallbackPoll))
}

// delay returns how long the waiter sleeps before its next attempt
// (number attempt+1), which failed with failed, unless woken: the jittered
// backoff, or the jittered fallback poll once the backoff is at its
// maximum, the attempt was refused by so many masters holding the key for
// another that no quorum was possible (masters that failed or timed out
// announce nothing when they come back), and every key's subscription is
// live on enough masters. A waiter that leaves a mark (a fair queue entry,
// a writer's intent) keeps the backoff: its attempts refresh the mark,
// which would expire otherwise.
func (wg *waiting) delay(lc *lockConfig, attempt int, leaves bool, failed error) time.Duration {
	d := backoff(wg.w.c.jit, lc.backoffMin, lc.backoffMax, attempt)
	if leaves || attempt < 30 && lc.backoffMin<<attempt < lc.backoffMax && lc.backoffMin<<attempt > 0 {
		return d
	}
	var qe *QuorumError
	if !asQuorumError(failed, &qe) || len(qe.Refused) <= qe.Masters-qe.Quorum {
		return d
	}
	w := wg.w
	need := len(w.c.masters) - w.c.quorum + 1
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, wt := range wg.ws {
		if w.liveLocked(wt.key) < need {
			return d
		}
	}
	p := fallbackPoll(lc.ttl, lc.backoffMax)
	return p/2 + wg.w.c.jit.n(p-p/2+1)
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
			if len(w.waiters) == len(w.lingering) {
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

// notify wakes the longest-waiting waiter for key alone for master
// from's notice of release id when announce says the notice should wake
// one. The woken waiter goes to the back of the queue: if it loses the
// race it waits its turn again; a fair waiter keeps its place (wakeFirst).
//
// A multi-key waiter is woken by every notice of each of its keys, from
// every master, whether announce says the notice wakes or not: a master
// may refuse its attempt for another of its keys, still held there, and
// that master's notice of that key's release may come neither first, nor
// from that key's pilot, nor complete a quorum (it ran the release after
// the others): announce's three would all have been spent on attempts the
// master refused, and the waiter would sleep until its timer. The masters
// release its keys in orders of their own, so no one notice of a release
// can stand for a master's: every master's is heard. Such a waiter may
// fail on another of its keys and keep waiting, neither taking this key
// nor passing the notice on, so the notice also counts as heard: a waiter
// registering now tries again (mark).
func (w *waker) notify(key, id string, from int) {
	id, subs := keys.ParseNotice(id)
	w.mu.Lock()
	defer w.mu.Unlock()
	kw := w.waiters[key]
	if kw == nil {
		return
	}
	kw.subs = subs
	if len(kw.queue) == 0 {
		// Nobody here is woken by it: a waiter registering now, whose
		// attempt it may have come after, must try again (mark).
		w.gen++
		kw.heard = w.gen
	}
	// The pilot is worked out only for a key waited on here: leadFor takes
	// no lock of the waker's (lead.go).
	if kw.announce(id, from, w.c.leadFor(key), kw.asked, w.c.quorum) {
		kw.wakeFirst()
	}
	// Every multi-key waiter hears every notice (see above), in its place.
	multi := false
	for _, wt := range kw.queue {
		if wt.multi {
			kw.wake(wt)
			multi = true
		}
	}
	if multi {
		w.gen++
		kw.heard = w.gen
	}
}

// rivals returns how many clients waited, by the latest notice of one of
// the waiter's keys, on the master that sent it (this one among them), or
// 0 when it is not known.
func (wg *waiting) rivals() int {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wt := range wg.ws {
		if kw := w.waiters[wt.key]; kw != nil {
			if kw.subs == 0 {
				return 0
			}
			n = max(n, kw.subs)
		}
	}
	return n
}

// wakeFirst wakes the key's longest-waiting waiter for this key alone
// and sends it to the back of the queue: if it loses the race it waits
// its turn again. A fair waiter keeps its place: only the head of the
// key's queue can win, and of this client's fair waiters that can only be
// the one that arrived first; sent back, the next release would wake one
// behind it, which cannot win, while it slept until its backoff.
// Multi-key waiters are left out: they hear every notice (notify). The
// caller holds waker.mu. It returns the waiter woken, or nil when none
// waits for this key alone.
func (k *keyWaiters) wakeFirst() *waiter {
	i := -1
	for j, q := range k.queue {
		if q.multi {
			continue
		}
		if i < 0 {
			i = j
		}
		if q.ahead {
			i = j // a waiting writer goes first (waiter.ahead)
			break
		}
	}
	if i < 0 {
		return nil
	}
	wt := k.queue[i]
	if wt.arrival == 0 {
		copy(k.queue[i:], k.queue[i+1:])
		k.queue[len(k.queue)-1] = wt
	}
	k.wake(wt)
	return wt
}

// wake hands a notice of the key to wt, in its place in the queue. The
// caller holds waker.mu.
func (k *keyWaiters) wake(wt *waiter) {
	wt.woken = true
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

// subscriber follows the release channels on one master, through its
// transport's Subscription: a goroutine opens it and keeps the subscribed
// channels equal to the wanted ones as the waited-for keys change, until
// stopped or the subscription breaks.
type subscriber struct {
	w       *waker
	m       *master
	started time.Time

	kick chan struct{} // size 1: the wanted channels changed
	// ctx ends with stop: it ends the opening of the subscription and a
	// Set under way.
	ctx  context.Context
	stop context.CancelFunc

	mu   sync.Mutex
	sub  Subscription // nil until open
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

func (w *waker) startSubscriber(i int) *subscriber {
	c := w.c
	s := &subscriber{w: w, m: &c.masters[i], started: time.Now(), kick: make(chan struct{}, 1)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	if !c.addWorker() {
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
		s.w.refused(s.m, err)
	default:
		s.w.c.logFailure(opWait, "", s.m, err)
	}
}

// refused logs that master m refused release notices, unless the same
// refusal of m was logged within failureReminder.
func (w *waker) refused(m *master, err error) {
	c := w.c
	if c.logger == nil {
		return
	}
	now := time.Now()
	msg := err.Error()
	w.mu.Lock()
	if w.refusals == nil {
		w.refusals = make(map[int]refusal)
	}
	last := w.refusals[m.index]
	quiet := last.msg == msg && now.Sub(last.at) < failureReminder
	if !quiet {
		w.refusals[m.index] = refusal{msg, now}
	}
	w.mu.Unlock()
	if !quiet {
		c.logger.LogAttrs(context.Background(), slog.LevelWarn, "redlock: master refuses release notices; its waiters poll",
			slog.Int("master", m.index), slog.String("addr", m.addr), slog.Any("error", err),
			slog.String("note", "the same refusal is logged again after a minute at most"))
	}
}

// brokenErr is why sub broke, as a master's error, when it says
// (transport.Breakable).
func brokenErr(c *Client, m *master, sub Subscription) error {
	if e, ok := sub.(transport.Breakable); ok && e.Err() != nil {
		return c.nodeError(m, e.Err())
	}
	return nil
}

// run opens the subscription, then keeps its channels equal to the wanted
// ones until stopped or the subscription breaks; it closes the
// subscription as it ends. A panic (a hostile master's reply, on a pool
// this package did not make) fails the subscriber: the waiters fall back
// on their timers until it is restarted.
func (s *subscriber) run() {
	c := s.w.c
	defer c.workers.Done()
	defer func() {
		if p := recover(); p != nil {
			s.fail(c.nodeError(s.m, fault.PanicError(p)))
		}
	}()
	ctx, cancel := context.WithTimeout(s.ctx, c.timeout)
	sub, err := s.m.t.Subscribe(ctx, func(channel, payload string) {
		if key, ok := strings.CutPrefix(channel, wakePrefix); ok {
			s.w.notify(key, payload, s.m.index)
		}
	})
	cancel()
	if err != nil {
		s.fail(c.nodeError(s.m, err))
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
			if next := s.w.expire(); !next.IsZero() {
				expiry.Reset(time.Until(next))
			}
			continue // expire pokes the subscribers when it unsubscribed keys
		case <-s.ctx.Done():
			return
		case <-sub.Done():
			s.fail(brokenErr(c, s.m, sub))
			return
		case <-s.kick:
		}
		if err := sub.Set(s.ctx, s.w.wantedList()); err != nil {
			switch {
			case s.ctx.Err() != nil:
				s.fail(nil)
			case errors.Is(err, ErrClosed):
				// Broken before this Set (kick and Done were both
				// ready): why it broke, not the Set's ErrClosed.
				s.fail(brokenErr(c, s.m, sub))
			default:
				s.fail(c.nodeError(s.m, err))
			}
			return
		}
		if next := s.w.nextExpiry(); !next.IsZero() {
			expiry.Reset(time.Until(next))
		}
	}
}

// wantedList returns the channels the subscribers should follow.
func (w *waker) wantedList() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	chans := make([]string, 0, len(w.waiters))
	for key := range w.waiters {
		chans = append(chans, wakeChannel(key))
	}
	return chans
}

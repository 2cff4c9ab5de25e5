package redlock

import (
	"context"
	"time"

	"github.com/quorumlock/quorumlock/internal/health"
	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/waker"
	"github.com/quorumlock/quorumlock/layout"
	"github.com/quorumlock/quorumlock/transport"
)

// Waiting without polling.
//
// The release script PUBLISHes on a channel named after the key when it
// deletes the lock, and a waiter is woken by it; its backoff timer, or
// the fallback poll, is only a bound (docs/design.md, "Waiting without
// polling"). The waiters, the subscriptions that bring the notices and
// the pause between two attempts are package internal/waker's: this file
// gives it what it needs of the Client (wakeHost) and puts the Client's
// lock kinds and errors in its terms.

// wakeChannel is the channel the release of key publishes on.
func wakeChannel(key string) string { return layout.WakeChannel(key) }

const wakePrefix = keys.WakePrefix

// newWaker returns the waker of c, whose masters, clock and jitter are
// set.
func newWaker(c *Client) *waker.Waker {
	return waker.New(waker.Config{
		Addrs:    c.addrs,
		Quorum:   c.quorum,
		Timeout:  c.timeout,
		Clock:    c.clock,
		Closing:  c.closing,
		Logger:   c.logger,
		Reminder: health.Reminder,
		Jitter:   c.jit.N,
		Host:     wakeHost{c},
	})
}

// wakeHost is what the waker asks of its Client (waker.Host). The waker
// calls LeadFor with its lock held (waker.Waker.Notify), and AddWorker
// too: the order is the waker's lock, then the Client's identity lock
// (leadFor, through identity.known), and the waker's lock, then
// Client.mu (addWorker).
type wakeHost struct{ c *Client }

func (h wakeHost) AddWorker() bool { return h.c.addWorker() }
func (h wakeHost) WorkerDone()     { h.c.workers.Done() }
func (h wakeHost) Subscribe(ctx context.Context, i int, notify func(channel, payload string)) (transport.Subscription, error) {
	return h.c.masters[i].t.Subscribe(ctx, notify)
}
func (h wakeHost) NodeError(i int, err error) error { return h.c.nodeError(&h.c.masters[i], err) }
func (h wakeHost) Failed(i int, err error)          { h.c.logFailure(opWait, "", &h.c.masters[i], err) }
func (h wakeHost) LeadFor(key string) int           { return h.c.leadFor(key) }
func (h wakeHost) RefusedWhereAsked(err error) bool { return refusedWhereAsked(err) }

// wait registers a waiter of a lock of kind k for each of keys, all on
// one channel, and compares the keys with m, read before the first
// attempt (waker.Waiting.Recheck).
func (c *Client) wait(keys []string, m waker.Mark, k kind) *waker.Waiting {
	arrival := arrivalOf(k)
	return c.waker.Wait(keys, m, waker.KindOf(len(keys), k.leaves() && !k.queued(), k.shared(), arrival), arrival)
}

// pause is Acquire's wait between a failed attempt and the next, for a
// waiter registered as wt on key, of a lock of kind k (waitFrom: when,
// in real time, it first registered): see waker.Waiting.Pause. It
// returns why it ended, and for waker.ResumeReleased the master the next
// attempt asks first (lead.go), or -1. The woken attempt begins with it;
// Acquire tells its end (waker.Waiting.Tried).
func (c *Client) pause(ctx context.Context, wt *waker.Waiting, key string, k kind, delay time.Duration, waitFrom time.Time) (waker.Resume, int) {
	return wt.Pause(ctx, key, k.queued(), delay, waitFrom)
}

// delay returns how long the waiter wt sleeps before its next attempt
// (number attempt+1), which failed with failed, unless woken: the jittered
// backoff, or the jittered fallback poll (waker.Waiting.Poll) once the
// backoff is at its maximum, the attempt was refused by so many masters
// holding the key for another that no quorum was possible (masters that
// failed or timed out announce nothing when they come back), and every
// key's subscription is live on enough masters. A waiter that leaves a
// mark (a fair queue entry, a writer's intent) keeps the backoff: its
// attempts refresh the mark, which would expire otherwise.
func (c *Client) delay(wt *waker.Waiting, lc *lockConfig, attempt int, leaves bool, failed error) time.Duration {
	d := jitter.Backoff(c.jit, lc.backoffMin, lc.backoffMax, attempt)
	if leaves || attempt < 30 && lc.backoffMin<<attempt < lc.backoffMax && lc.backoffMin<<attempt > 0 {
		return d
	}
	var qe *QuorumError
	if !asQuorumError(failed, &qe) || len(qe.Refused) <= qe.Masters-qe.Quorum {
		return d
	}
	if p, ok := wt.Poll(lc.ttl, lc.backoffMax); ok {
		return p
	}
	return d
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

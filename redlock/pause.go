package redlock

import (
	"context"
	"time"
)

// resume is why a waiter's pause between two attempts ended (pause).
type resume uint8

const (
	resumeDelay    resume = iota // its delay (backoff or fallback poll) passed
	resumeRecheck                // its subscriptions are live: a release before them may have gone unheard
	resumeReleased               // a release of its key was announced
	resumeClosing                // the client is closing: the next attempt fails at once with ErrClosed
	resumeCtx                    // ctx ended: the waiter gives up
)

// pause is Acquire's wait between a failed attempt and the next, for a
// waiter registered as wt (waitFrom: when, in real time, it first
// registered). It ends at the first of: delay passed (on the client's
// clock); the recheck of a new waiter — once every key's channel is live
// on every master (checked every recheckPoll, real time, for at most the
// per-master timeout), since a release between the first refusal and the
// registration may have gone unheard; a release announced; Close; ctx.
// It returns why, and for resumeReleased the master the next attempt asks
// first (lead.go), or -1. Before a woken attempt it waits the woken
// waiter's delay (spread or leadDelay); it sends nothing itself. The
// woken attempt begins with it (waiting.trying); Acquire tells its end.
func (c *Client) pause(ctx context.Context, wt *waiting, key string, k kind, delay time.Duration, waitFrom time.Time) (why resume, lead int) {
	if why = c.waitOut(ctx, wt, k, delay); why == resumeReleased {
		wt.trying()
		return why, c.woken(ctx, wt, key, k, waitFrom)
	}
	return why, -1
}

// waitOut is the wait of pause and of a semaphore's waiter
// (Semaphore.pause): it ends at the first of delay, the recheck of a new
// waiter (then after the spread of a waiter of kind k), a release
// announced to wt, Close and ctx, and says which.
func (c *Client) waitOut(ctx context.Context, wt *waiting, k kind, delay time.Duration) resume {
	t := c.clock.NewTimer(delay)
	defer t.Stop()
	var poll <-chan time.Time
	var pollT *time.Timer
	var pollEnd time.Time
	if c.settled != nil && !wt.recheck {
		c.settled()
	}
	if wt.recheck {
		wt.recheck = false
		pollT, pollEnd = time.NewTimer(0), time.Now().Add(c.timeout)
		defer pollT.Stop()
		poll = pollT.C
	}
	for {
		select {
		case <-poll:
			if !wt.live() && time.Now().Before(pollEnd) {
				pollT.Reset(recheckPoll)
				continue
			}
			t.Stop()
			c.spread(ctx, k)
			return resumeRecheck
		case <-t.C():
			return resumeDelay
		case <-wt.ch:
			return resumeReleased
		case <-c.closing:
			return resumeClosing
		case <-ctx.Done():
			return resumeCtx
		}
	}
}

// recheckPoll spaces the checks of a new waiter's subscriptions before
// its second attempt.
const recheckPoll = 500 * time.Microsecond

// woken prepares the attempt of a waiter a release woke, and returns the
// master it asks first, or -1. With several masters, contenders of other
// clients were woken by the same release: the attempt asks the key's lead
// master first (lead.go), which grants it to one of them, and the rest of
// the masters only once it granted. When no master can lead (each failed
// lately), a short random spread (real time, shorter than a few round
// trips) lets one of them reach a quorum before the others split the
// vote. On a single master there is no pilot, but the waiter waits the
// same age-weighted delay (leadDelay) when it has rivals in other
// clients. In fair mode only the head of the queue can win: a fair waiter is
// not led (no vote to split, and its attempts must refresh its place on
// every master). A waiting writer is led; its backoff attempts, never
// led, renew its intent on every master (docs/design.md, "Waiters that
// leave a mark").
func (c *Client) woken(ctx context.Context, wt *waiting, key string, k kind, waitFrom time.Time) int {
	if len(c.masters) == 1 && !k.queued() {
		// One master, no pilot: the woken waiters of every client race to
		// it all the same, and the age-weighted delay keeps the client
		// told first from winning every race.
		if wt.rivals() != 1 {
			c.leadDelay(ctx, time.Since(waitFrom))
		}
		return -1
	}
	lead := c.leadFor(key)
	if lead < 0 || k.queued() {
		c.spread(ctx, k)
		return -1
	}
	// That master's notice wakes a waiter, should the lead have changed
	// by then (wake.Decide).
	wt.asking(key, lead)
	if wt.rivals() != 1 {
		// Others in other clients were woken too (or may have been: the
		// notice did not say).
		c.leadDelay(ctx, time.Since(waitFrom))
	}
	return lead
}

// wakeSpread bounds the random delay of a woken waiter on several masters.
const wakeSpread = time.Millisecond

// spread waits the random moment of a woken waiter on several masters
// (at most wakeSpread, real time), unless its lock is queued (fair).
func (c *Client) spread(ctx context.Context, k kind) {
	if len(c.masters) == 1 || k.queued() {
		return
	}
	j := time.NewTimer(c.jit.N(wakeSpread))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

// leadAge is the wait after which a woken waiter's delay before it asks
// the lead master is halved (leadDelay).
const leadAge = time.Millisecond

// leadDelay waits before an attempt that asks the lead master first
// (lead.go), real time: at random between half and all of
// wakeSpread×leadAge/(leadAge+waited), so that of the waiters one release
// woke, in any process, those that have waited longest tend to ask first,
// and none is favoured for being told first (Redis tells the subscribers
// of a channel in the order they subscribed). A client whose own release
// of the key a waiter heard (waited 0) waits the longest.
func (c *Client) leadDelay(ctx context.Context, waited time.Duration) {
	d := time.Duration(float64(wakeSpread) * float64(leadAge) / float64(leadAge+max(waited, 0)))
	j := time.NewTimer(d/2 + c.jit.N(d-d/2+1))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

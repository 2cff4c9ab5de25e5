package waker

import (
	"context"
	"time"
)

// Resume is why a waiter's pause between two attempts ended (Pause).
type Resume uint8

const (
	// ResumeDelay means its delay (backoff or fallback poll) passed.
	ResumeDelay Resume = iota
	// ResumeRecheck means its subscriptions are live: a release before them
	// may have gone unheard.
	ResumeRecheck
	// ResumeReleased means a release of its key was announced.
	ResumeReleased
	// ResumeClosing means the client is closing: the next attempt fails at
	// once with the Client's ErrClosed.
	ResumeClosing
	// ResumeCtx means ctx ended: the waiter gives up.
	ResumeCtx
)

// Pause is Acquire's wait between a failed attempt and the next, for the
// waiter of key (waitFrom: when, in real time, it first registered;
// queued: its lock is fair, only the head of the key's queue can win).
// It ends at the first of: delay passed (on the Config's Clock); the
// recheck of a new waiter — once every key's channel is live on every
// master (checked every recheckPoll, real time, for at most the
// per-master timeout), since a release between the first refusal and the
// registration may have gone unheard; a release announced; the Client's
// closing; ctx. It returns why, and for ResumeReleased the master the
// next attempt asks first (Host.LeadFor), or -1. Before a woken attempt
// it waits the woken waiter's delay (spread or leadDelay); it sends
// nothing itself. The woken attempt begins with it (trying); the caller
// tells its end with Tried.
func (wg *Waiting) Pause(ctx context.Context, key string, queued bool, delay time.Duration, waitFrom time.Time) (why Resume, lead int) {
	if why = wg.WaitOut(ctx, queued, delay); why == ResumeReleased {
		wg.trying()
		return why, wg.Woken(ctx, key, queued, waitFrom)
	}
	return why, -1
}

// WaitOut is the wait of Pause and of a semaphore's waiter: it ends at
// the first of delay, the recheck of a new waiter (then after the spread
// of a woken waiter, unless queued), a release announced to the waiter,
// the Client's closing and ctx, and says which. A release announced by
// the time the recheck is due is taken first; the recheck stays due
// until it is made (Recheck is cleared only by ResumeRecheck), so that a
// woken attempt that fails is followed by the full one: the release the
// recheck is for may be of another key of the waiter's (a semaphore's
// other slot), or free the key on masters that a led attempt, refused by
// its lead, does not ask.
func (wg *Waiting) WaitOut(ctx context.Context, queued bool, delay time.Duration) Resume {
	w := wg.w
	t := w.cfg.Clock.NewTimer(delay)
	defer t.Stop()
	var poll <-chan time.Time
	var pollT *time.Timer
	var pollEnd time.Time
	if w.settled != nil && !wg.Recheck {
		w.settled()
	}
	if wg.Recheck {
		pollT, pollEnd = time.NewTimer(0), time.Now().Add(w.cfg.Timeout)
		defer pollT.Stop()
		poll = pollT.C
	}
	for {
		select {
		case <-poll:
			if !wg.live() && time.Now().Before(pollEnd) {
				pollT.Reset(recheckPoll)
				continue
			}
			t.Stop()
			select {
			case <-wg.ch:
				// A release announced meanwhile: the woken attempt
				// rather than a recheck.
				return ResumeReleased
			default:
			}
			wg.Recheck = false
			w.spread(ctx, queued)
			return ResumeRecheck
		case <-t.C():
			return ResumeDelay
		case <-wg.ch:
			return ResumeReleased
		case <-w.cfg.Closing:
			return ResumeClosing
		case <-ctx.Done():
			return ResumeCtx
		}
	}
}

// recheckPoll spaces the checks of a new waiter's subscriptions before
// its second attempt.
const recheckPoll = 500 * time.Microsecond

// Woken prepares the attempt of a waiter a release woke, on key, and
// returns the master it asks first, or -1. A waiter the release handed
// the key over to (wake.Waiter.Heir) asks every master at once, at once:
// the key waits for it alone. Otherwise, with several masters,
// contenders of other clients were woken by the same release: the
// attempt asks the key's lead master first (Host.LeadFor), which grants
// it to one of them, and the rest of the masters only once it granted.
// When no master can lead (each failed lately), a short random spread
// (real time, shorter than a few round trips) lets one of them reach a
// quorum before the others split the vote. On a single master there is
// no pilot, but the waiter waits the same age-weighted delay (leadDelay)
// when it has rivals in other clients. In fair mode (queued) only the
// head of the queue can win: a fair waiter is not led (no vote to split,
// and its attempts must refresh its place on every master). A waiting
// writer is led; its backoff attempts, never led, renew its intent on
// every master (docs/design.md, "Waiters that leave a mark").
func (wg *Waiting) Woken(ctx context.Context, key string, queued bool, waitFrom time.Time) int {
	w := wg.w
	if wg.heir() {
		// The key was handed over to this waiter on a quorum of masters:
		// no rival can take it there, so no pilot and no delay.
		return -1
	}
	if len(w.subs) == 1 && !queued {
		// One master, no pilot: the woken waiters of every client race to
		// it all the same, and the age-weighted delay keeps the client
		// told first from winning every race.
		if wg.rivals() != 1 {
			w.leadDelay(ctx, time.Since(waitFrom))
		}
		return -1
	}
	lead := w.host.LeadFor(key)
	if lead < 0 || queued {
		w.spread(ctx, queued)
		return -1
	}
	// That master's notice wakes a waiter, should the lead have changed
	// by then (wake.Decide).
	wg.asking(key, lead)
	if wg.rivals() != 1 {
		// Others in other clients were woken too (or may have been: the
		// notice did not say).
		w.leadDelay(ctx, time.Since(waitFrom))
	}
	return lead
}

// WakeSpread bounds the random delay of a woken waiter on several
// masters when no master can lead, and the age-weighted delay before a
// woken attempt asks the lead master (leadDelay).
const WakeSpread = time.Millisecond

// spread waits the random moment of a woken waiter on several masters
// (at most WakeSpread, real time), unless its lock is queued (fair).
func (w *Waker) spread(ctx context.Context, queued bool) {
	if len(w.subs) == 1 || queued {
		return
	}
	j := time.NewTimer(w.cfg.Jitter(WakeSpread))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

// leadAge is the wait after which a woken waiter's delay before it asks
// the lead master is halved (leadDelay).
const leadAge = time.Millisecond

// leadDelay waits before an attempt that asks the lead master first,
// real time: at random between half and all of
// WakeSpread×leadAge/(leadAge+waited), so that of the waiters one release
// woke, in any process, those that have waited longest tend to ask first,
// and none is favoured for being told first (Redis tells the subscribers
// of a channel in the order they subscribed). A client whose own release
// of the key a waiter heard (waited 0) waits the longest.
func (w *Waker) leadDelay(ctx context.Context, waited time.Duration) {
	d := time.Duration(float64(WakeSpread) * float64(leadAge) / float64(leadAge+max(waited, 0)))
	j := time.NewTimer(d/2 + w.cfg.Jitter(d-d/2+1))
	defer j.Stop()
	select {
	case <-j.C:
	case <-ctx.Done():
	}
}

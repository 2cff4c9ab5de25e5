package redlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lost returns a channel that is closed as soon as the lock can no longer
// be trusted: its validity ran out, an extension found a quorum no longer
// holding it, it was held for its maximum hold time, its client was
// closed, or it was released. Err then says why.
//
// For a lock without auto-extension, the first call starts a timer that
// fires at Until(); Release stops it.
//
// A Lock that no acquisition returned (nil, or the zero value) counts as
// lost from the start.
func (l *Lock) Lost() <-chan struct{} {
	if l == nil || l.c == nil {
		return closedChan
	}
	l.startMonitor()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostChanLocked()
}

// lostChanLocked returns the Lost channel, made on first use: most locks
// are released without anyone asking for it, and a channel per lock was
// an allocation of every acquisition. The caller holds l.mu.
func (l *Lock) lostChanLocked() chan struct{} {
	if l.lost == nil {
		if l.lostErr != nil {
			return closedChan
		}
		l.lost = make(chan struct{})
	}
	return l.lost
}

// closeLostLocked closes the Lost channel if it was made (lostErr is set
// first, so that a later Lost gets a closed one). The caller holds l.mu.
func (l *Lock) closeLostLocked() {
	if l.lost != nil {
		close(l.lost)
	}
}

// closedChan is the Lost channel of a Lock no acquisition returned.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Err returns nil while the lock is trusted, and once Lost is closed the
// reason, an error matching ErrLockLost (ErrReleased after Release,
// ErrMaxHold after the maximum hold time, ErrClosed as well when the client
// was closed).
func (l *Lock) Err() error {
	if l == nil || l.c == nil {
		return fmt.Errorf("%w: this Lock was not returned by an acquisition", ErrInvalid)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lostErr
}

// markLost records the first reason the lock was lost, ends its validity
// and closes Lost.
func (l *Lock) markLost(err error) { l.markLostCtx(context.Background(), err) }

// markLostCtx is markLost with the context of the call that found the
// loss, for the logger and the observer. It reports whether err was the
// first reason (the loss, or the release, ended the lock).
func (l *Lock) markLostCtx(ctx context.Context, err error) bool {
	l.mu.Lock()
	if l.lostErr != nil {
		l.mu.Unlock()
		return false
	}
	l.lostErr = err
	l.endValidity()
	l.closeLostLocked()
	cb := l.onLost
	l.mu.Unlock()
	if !errors.Is(err, ErrReleased) {
		l.reportLoss(ctx, err)
	}
	if cb != nil {
		cb(err)
	}
	return true
}

// endValidity ends the lock's validity now, if it had not ended: a lost or
// released lock promises nothing. The caller holds l.mu.
func (l *Lock) endValidity() {
	if now := l.c.clock.Now(); now.Before(l.until) {
		l.until = now
	}
}

// monitor is the goroutine that watches a lock: it extends it when
// auto-extension is on, and closes Lost when it can no longer be trusted.
type monitor struct {
	stop     chan struct{}
	stopOnce sync.Once     // concurrent Release calls both stop it
	done     chan struct{} // closed when the goroutine has exited
	wake     chan struct{} // (1) the validity changed: recompute the deadline
}

// wakeMonitor tells the running monitor, if any, that the validity
// changed. The caller holds l.mu.
func (l *Lock) wakeMonitor() {
	if l.mon == nil {
		return
	}
	select {
	case l.mon.wake <- struct{}{}:
	default: // a wake-up is pending already
	}
}

// startMonitor starts the lock's monitor unless one runs or the lock is
// already lost.
func (l *Lock) startMonitor() {
	if err := l.startMonitorLocked(); err != nil {
		l.reportLoss(context.Background(), err) // outside l.mu: the observer may call the lock
	}
}

// startMonitorLocked starts the monitor under l.mu; it returns the loss
// it found instead (the client is closed).
func (l *Lock) startMonitorLocked() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mon != nil || l.lostErr != nil || l.released {
		return nil
	}
	if !l.c.addWorker() {
		l.lostErr = newKeyError(ErrLockLost, l.key, "", ErrClosed)
		l.endValidity()
		l.closeLostLocked()
		return l.lostErr
	}
	m := &monitor{stop: make(chan struct{}), done: make(chan struct{}), wake: make(chan struct{}, 1)}
	l.mon = m
	go l.watch(m)
	return nil
}

// stopMonitor stops the monitor, if one runs, and waits for it to exit.
func (l *Lock) stopMonitor() {
	l.mu.Lock()
	m := l.mon
	l.mu.Unlock()
	if m == nil {
		return
	}
	m.stopOnce.Do(func() { close(m.stop) })
	<-m.done
}

// maxExtendRetries bounds the retries of an extension that reached no
// quorum: after them the lock counts as lost, well before its validity ends.
const maxExtendRetries = 2

// watch runs the monitor. With auto-extension it extends the lock every
// period; an extension that reached no quorum is retried after a quarter
// of the period, at most maxExtendRetries times, and then the lock is
// lost: within one and a half periods of the failure. It closes Lost when
// the lock is lost. Whenever the validity changes (an Extend, a failed
// one that limited it, a reentrant lock taken again) it is woken and
// recomputes its deadline from the new Until, earlier or later.
func (l *Lock) watch(m *monitor) {
	c := l.c
	defer c.workers.Done()
	defer close(m.done)
	next := l.acquired.Add(l.autoPeriod)
	var lastErr error
	retries := 0
	for {
		until := l.Until()
		deadline := until
		auto := l.autoPeriod > 0
		var holdEnd time.Time
		if l.maxHold > 0 {
			holdEnd = l.acquired.Add(l.maxHold)
			if holdEnd.Before(deadline) {
				deadline = holdEnd
			}
		}
		if auto && next.Before(deadline) {
			deadline = next
		}
		t := c.clock.NewTimer(deadline.Sub(c.clock.Now()))
		select {
		case <-m.stop:
			t.Stop()
			return
		case <-c.closing:
			t.Stop()
			l.markLost(newKeyError(ErrLockLost, l.key, "", ErrClosed))
			return
		case <-m.wake:
			t.Stop()
			continue
		case <-t.C():
		}
		now := c.clock.Now()
		until = l.Until() // as it is now, not as it was before the wait
		switch {
		case !holdEnd.IsZero() && !now.Before(holdEnd):
			l.markLost(newKeyError(ErrMaxHold, l.key, "("+l.maxHold.String()+")", nil))
			return
		case !now.Before(until):
			err := newKeyError(ErrLockLost, l.key, "validity ran out", nil)
			if lastErr != nil {
				err = newKeyError(ErrLockLost, l.key, "validity ran out after a failed extension", lastErr)
			}
			l.markLost(err)
			return
		case !auto || now.Before(next):
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*c.timeout)
		err := l.Extend(ctx, l.ttl)
		cancel()
		select {
		case <-m.wake: // its own change: the loop reads Until anew anyway
		default:
		}
		switch {
		case err == nil:
			lastErr, retries = nil, 0
			next = now.Add(l.autoPeriod)
		case errors.Is(err, ErrNotExtended) && retries < maxExtendRetries:
			// Too few masters answered; the lock is still valid. Try again
			// shortly, a bounded number of times.
			retries++
			lastErr = err
			next = c.clock.Now().Add(l.autoPeriod / 4)
		case errors.Is(err, ErrNotExtended):
			// The lock cannot be kept alive: stop trusting it now rather
			// than when its validity runs out.
			l.markLost(newKeyError(ErrLockLost, l.key,
				strconv.Itoa(retries+1)+" extensions in a row reached no quorum", err))
			return
		case errors.Is(err, ErrNotHeld):
			// Released meanwhile: Release marks it lost itself.
			return
		default:
			// Lost (Extend marked it already), or the client closed.
			if !errors.Is(err, ErrLockLost) {
				err = newKeyError(ErrLockLost, l.key, "", err)
			}
			l.markLost(err)
			return
		}
	}
}

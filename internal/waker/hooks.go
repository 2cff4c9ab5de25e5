package waker

import "github.com/quorumlock/quorumlock/internal/wake"

// What the core's tests read and drive of a Waker. None of it is used on
// a Client's own paths.

// Counts returns how many keys have waiters, and how many linger after
// their last waiter left.
func (w *Waker) Counts() (waited, lingering int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys.Counts()
}

// Live counts the masters on which key's channel is subscribed and the
// subscription acknowledged, on a connection still read.
func (w *Waker) Live(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.liveLocked(key)
}

// Gen returns the Waker's generation (see Mark).
func (w *Waker) Gen() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.keys.Gen()
}

// WakeNext wakes the next waiter of key, as a notice that wakes one does,
// or nobody when key is not followed.
func (w *Waker) WakeNext(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if q := w.keys.Queue(key); q != nil {
		q.WakeNext()
	}
}

// SetSettled sets a hook that runs as a waiter begins a pause (WaitOut)
// with no re-check pending: its latest attempt is over, and its timer is
// set. Set it while no waiter runs.
func (w *Waker) SetSettled(f func()) { w.settled = f }

// C returns the channel the waiter's wake-ups come on (it holds one at
// most): a test sends on it to wake the waiter, or reads whether it was.
func (wg *Waiting) C() chan struct{} { return wg.ch }

// Waiters returns the waiter's entries, one per key, in the order of the
// keys it registered.
func (wg *Waiting) Waiters() []*wake.Waiter { return wg.ws }

package waker

// Notify hands master from's notice msg of a release of key to the key's
// waiters here, which wake whom wake.Decide says: one waiter of the key
// alone at the release's first notice, the pilot's, the notice of the
// master a woken attempt asked first and the one completing a quorum;
// every multi-key waiter at every notice. A notice that finds no waiter
// to count on counts as heard: a waiter registering now, whose attempt it
// may have come after, tries again (Mark). The subscribers call it for
// each notice they read.
func (w *Waker) Notify(key, msg string, from int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// The pilot is worked out only for a key followed here: Host.LeadFor
	// takes no lock of the waker's (see Waker.mu for the order).
	w.keys.Notify(key, msg, from, w.cfg.Quorum, w.host.LeadFor)
}

// rivals returns how many clients waited, by the latest notice of one of
// the waiter's keys, on the master that sent it (this one among them), or
// 0 when it is not known.
func (wg *Waiting) rivals() int {
	w := wg.w
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, wt := range wg.ws {
		if q := w.keys.Queue(wt.Key); q != nil {
			if q.Rivals() == 0 {
				return 0
			}
			n = max(n, q.Rivals())
		}
	}
	return n
}

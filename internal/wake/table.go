package wake

import "time"

// Table is one client's waiters, by key: a Queue for each key waited for,
// and the keys whose last waiter left, kept followed a while (lingering)
// so that the waiters of a busy key do not subscribe and unsubscribe per
// wait. Its generation counts the keys' births and notices heard: a
// waiter reads it before its first attempt and compares after it
// registered (Add). The zero value is ready; it is not safe for
// concurrent use.
type Table struct {
	keys map[string]*entry // with waiters or lingering
	// lingering holds the keys without waiters, until their idle time
	// plus the linger time.
	lingering map[string]*entry
	gen       uint64
}

// entry is one key's queue, and when it was born, last heard and left
// idle, in the table's generations and real time.
type entry struct {
	Queue
	born  uint64    // gen when the entry was made
	heard uint64    // gen at its latest notice heard (Decision.Heard, Leave)
	idle  time.Time // when its last waiter left; zero while it has waiters
}

// Gen returns the table's generation.
func (t *Table) Gen() uint64 { return t.gen }

// Followed reports whether key is followed: it has waiters, or lingers.
func (t *Table) Followed(key string) bool { return t.keys[key] != nil }

// Empty reports whether no key is followed.
func (t *Table) Empty() bool { return len(t.keys) == 0 }

// Waiting reports whether some key has waiters (lingering keys do not
// count).
func (t *Table) Waiting() bool { return len(t.keys) > len(t.lingering) }

// Counts returns how many keys have waiters, and how many linger.
func (t *Table) Counts() (waited, lingering int) {
	return len(t.keys) - len(t.lingering), len(t.lingering)
}

// AppendKeys appends every key followed to dst.
func (t *Table) AppendKeys(dst []string) []string {
	for key := range t.keys {
		dst = append(dst, key)
	}
	return dst
}

// Add adds a waiter of kind k for key, woken on ch (arrival: a fair
// waiter's place, else 0). It reports whether the key was followed since
// generation gen with no notice heard: an entry no newer than gen, no
// notice counted as heard since.
func (t *Table) Add(key string, ch chan struct{}, gen uint64, k Kind, arrival int64) (w *Waiter, quiet bool) {
	e := t.keys[key]
	if e == nil {
		if t.keys == nil {
			t.keys, t.lingering = map[string]*entry{}, map[string]*entry{}
		}
		t.gen++
		e = &entry{born: t.gen}
		t.keys[key] = e
	}
	if !e.idle.IsZero() {
		e.idle = time.Time{}
		delete(t.lingering, key)
	}
	return e.Add(key, ch, k, arrival), e.born <= gen && e.heard <= gen
}

// Remove takes w out of its key's queue, which hands on what it leaves
// (Queue.Remove). A notice nobody is left to take counts as heard. The
// key, left without waiters at now, lingers (idle reports it); beyond
// maxLinger such keys, the one idle longest is dropped at once.
func (t *Table) Remove(w *Waiter, acquired bool, now time.Time, maxLinger int) (idle bool) {
	e := t.keys[w.Key]
	if e == nil {
		return false
	}
	if e.Remove(w, acquired) {
		t.heard(e)
	}
	if e.Len() > 0 {
		return false
	}
	e.idle = now
	t.lingering[w.Key] = e
	if len(t.lingering) <= maxLinger {
		return true
	}
	var oldest string
	for k, x := range t.lingering {
		if oldest == "" || x.idle.Before(t.lingering[oldest].idle) {
			oldest = k
		}
	}
	delete(t.lingering, oldest)
	delete(t.keys, oldest)
	return true
}

// Expire drops the keys that lingered for linger by now. It returns
// whether it dropped any, and when the next one will have (zero: none
// lingers).
func (t *Table) Expire(now time.Time, linger time.Duration) (next time.Time, dropped bool) {
	for k, e := range t.lingering {
		at := e.idle.Add(linger)
		if !at.After(now) {
			delete(t.lingering, k)
			delete(t.keys, k)
			dropped = true
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next, dropped
}

// NextExpiry returns when the next lingering key's linger is up (zero:
// none lingers).
func (t *Table) NextExpiry(linger time.Duration) time.Time {
	var next time.Time
	for _, e := range t.lingering {
		if at := e.idle.Add(linger); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return next
}

// Notify hands master from's notice msg of a release of key to the key's
// queue (Queue.Notify), if the key is followed; a notice heard raises the
// generation. pilot returns the key's pilot; it is called only for a key
// followed.
func (t *Table) Notify(key, msg string, from, quorum int, pilot func(key string) int) {
	e := t.keys[key]
	if e == nil {
		return
	}
	if e.Notify(msg, from, pilot(key), quorum) {
		t.heard(e)
	}
}

// Queue returns key's queue, or nil when the key is not followed.
func (t *Table) Queue(key string) *Queue {
	if e := t.keys[key]; e != nil {
		return &e.Queue
	}
	return nil
}

// TakeOne returns the index of one of ws, the waiters of one call on
// several keys (a semaphore's slots), that a notice woke, and takes its
// notice; -1 when none is left. It looks from start on, round. The
// notices of the others it hands on at once to the next waiter of each
// key, as if it had tried them and failed, so that no freed key waits for
// this call's attempt; a waiter that is its key's only one hears its
// notice again itself (and is signalled).
func (t *Table) TakeOne(ws []*Waiter, start int) int {
	got := -1
	for j := range ws {
		i := (start + j) % len(ws)
		w := ws[i]
		if !w.Woken {
			continue
		}
		w.Woken = false
		if got < 0 {
			got = i // its attempt begins (Trying)
			continue
		}
		w.pending, w.crossed = false, false
		if q := t.Queue(w.Key); q != nil {
			q.WakeNext()
		}
	}
	return got
}

// Trying records that w, woken by a notice, begins its attempt on its
// key (Queue.Trying).
func (t *Table) Trying(w *Waiter) {
	if q := t.Queue(w.Key); q != nil {
		q.Trying(w)
	}
}

// Tried records the end of w's attempt begun with Trying (Queue.Tried):
// one whose grants were undone (undone) after a notice woke another
// waiter of its key meanwhile wakes the next waiter.
func (t *Table) Tried(w *Waiter, undone bool) {
	if q := t.Queue(w.Key); q != nil {
		q.Tried(w, undone)
	}
}

func (t *Table) heard(e *entry) {
	t.gen++
	e.heard = t.gen
}

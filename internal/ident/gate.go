package ident

// Gate is how a round counts grants while some master is not identified
// (or two are one server): nil on the hot path, once every master is. A
// grant counts when its master's run_id is known and no master of a
// lower index that also granted has the same run_id, or when its master
// answered the probe without a run_id (it cannot be told apart, see the
// package doc). A grant from a master not identified yet waits while the
// first probe runs, and after it while an INFO sent to that master is
// still in flight (the master answers: it granted); it counts for nothing
// once neither is so, or once the round stopped waiting (StopWaiting).
// A Gate belongs to one round and is used by one goroutine at a time.
type Gate struct {
	id    *Identity
	first <-chan struct{} // the first probe's end; nil once it ended (or never started)
	news  <-chan struct{} // closed at the next completion of an INFO (Identity.news)
	late  bool            // the round waits no more for a probe in flight (StopWaiting)
}

// Gate returns the gate of a round that counts grants, or nil when every
// master is identified and distinct.
func (id *Identity) Gate() *Gate {
	if id.settled.Load() && id.dup.Load() == nil {
		return nil
	}
	id.mu.Lock()
	g := &Gate{id: id, first: id.first}
	id.mu.Unlock()
	g.ended()
	return g
}

// ended reports whether the first probe has ended.
func (g *Gate) ended() bool {
	if g.first == nil {
		return true
	}
	select {
	case <-g.first:
		g.first = nil
		return true
	default:
		return false
	}
}

// First returns a channel closed when the first probe ends, or nil once
// the latest Count (or Gate) saw it ended, or when it never started.
func (g *Gate) First() <-chan struct{} { return g.first }

// News returns a channel closed at the next completion of an INFO after
// the latest Count: a grant pending on its master's probe in flight may
// count then.
func (g *Gate) News() <-chan struct{} { return g.news }

// StopWaiting marks that the round waits no more for a probe in flight:
// from the next Count on, a grant whose master is not identified is lost
// once the first probe ended.
func (g *Gate) StopWaiting() { g.late = true }

// Count counts the grants (granted, by master) by the identities known
// now: the grants that count (yes), those that may count once the first
// probe ends or their master's probe in flight answers (pending), and
// those that never will in this round (lost); probing reports that the
// first probe has not ended, which holds the round's outcome open.
func (g *Gate) Count(granted []bool) (yes, pending, lost int, probing bool) {
	ended := g.ended()
	probing = !ended
	g.id.mu.Lock()
	defer g.id.mu.Unlock()
	g.news = g.id.news
	for i, ok := range granted {
		if !ok {
			continue
		}
		switch g.id.grantLocked(i, granted) {
		case grantCounts:
			yes++
		case grantUnknown:
			if !ended || !g.late && i < len(g.id.asking) && g.id.asking[i] > 0 {
				pending++
			} else {
				lost++
			}
		default:
			lost++
		}
	}
	return yes, pending, lost, probing
}

// Uncounted returns the masters that granted (granted, by master) but
// whose grant does not count (yet), for the error of a round that
// failed.
func (g *Gate) Uncounted(granted []bool) []int {
	g.id.mu.Lock()
	defer g.id.mu.Unlock()
	var out []int
	for i, ok := range granted {
		if ok && g.id.grantLocked(i, granted) != grantCounts {
			out = append(out, i)
		}
	}
	return out
}

// grant is how master i's grant counts.
type grant uint8

const (
	grantCounts  grant = iota // identified and distinct, or unidentifiable
	grantUnknown              // its master is not identified
	grantTwice                // its server was counted under another address
)

// grantLocked says how master i's grant counts among granted. id.mu is
// held.
func (id *Identity) grantLocked(i int, granted []bool) grant {
	switch {
	case i < len(id.ids) && id.ids[i] != "":
		for j := range i {
			if granted[j] && id.ids[j] == id.ids[i] {
				return grantTwice
			}
		}
		return grantCounts
	case i < len(id.final) && id.final[i]:
		return grantCounts // answered without a run_id: its own vote
	default:
		return grantUnknown
	}
}

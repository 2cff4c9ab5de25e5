package redigot

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/gomodule/redigo/redis"
)

// nopConn is a redis.Conn that does nothing: fail closes it.
type nopConn struct{ redis.Conn }

func (nopConn) Close() error { return nil }
func (nopConn) Err() error   { return nil }

// A connection that takes the backlog while its writer drains the queue
// and it closes at any moment — after some commands were refused as busy,
// before, or not at all — hands every command to exactly one place: its
// queue, the busy refusals, or the rest left in the backlog. The rest is
// the backlog's tail from the first command the closed connection
// refused, so nothing behind it went to the closed connection ahead of it
// (its reader would re-send that before the rest), and what was queued and
// refused keeps the backlog's order.
func TestMux_backlogTakenAsTheConnectionClosesDeliversEachOnce(t *testing.T) {
	const rounds, n = 300, 48
	closedMidway, busyThenClosed := 0, 0
	for round := range rounds {
		mc := &muxConn{
			mx:      &mux{},
			nc:      nopConn{},
			queue:   make(chan *muxReq, muxQueue+muxUndo),
			pending: make(chan *muxReq, 1),
			kick:    make(chan struct{}, 1),
			closed:  make(chan struct{}),
		}
		mc.pending <- &muxReq{} // a command awaits its reply: nothing is written in the caller
		filler := &muxReq{}
		for range muxQueue - rand.IntN(n/2) {
			mc.queue <- filler
		}
		backlog := make([]*muxReq, n)
		index := make(map[*muxReq]int, n)
		for i := range backlog {
			backlog[i] = &muxReq{undo: rand.IntN(4) == 0}
			index[backlog[i]] = i
		}
		orig := append([]*muxReq(nil), backlog...)

		var wg sync.WaitGroup
		stop := make(chan struct{})
		var drained []*muxReq
		wg.Add(2)
		go func() { // the writer
			defer wg.Done()
			for {
				select {
				case q := <-mc.queue:
					if q != filler {
						drained = append(drained, q)
					}
					if rand.IntN(8) == 0 {
						runtime.Gosched()
					}
				case <-stop:
					return
				}
			}
		}()
		closeAt := rand.IntN(3 * n)
		go func() { // the master closes the connection
			defer wg.Done()
			for range closeAt {
				runtime.Gosched()
			}
			mc.fail(errors.New("EOF"))
		}()
		rest, busy := mc.takeBacklog(backlog)
		wasClosed := mc.isClosed()
		close(stop)
		wg.Wait()
		// As settle does: once closed, nothing joins the queue.
		mc.fail(errors.New("EOF"))
		mc.qmu.Lock()
		mc.qmu.Unlock() //nolint:staticcheck // SA2001: the critical section is the wait
		for len(mc.queue) > 0 {
			if q := <-mc.queue; q != filler {
				drained = append(drained, q)
			}
		}

		seen := make(map[*muxReq]string, n)
		note := func(where string, qs []*muxReq) {
			prev := -1
			for _, q := range qs {
				i, ok := index[q]
				if !ok {
					t.Fatalf("round %d: %s holds a command not in the backlog", round, where)
				}
				if w, dup := seen[q]; dup {
					t.Fatalf("round %d: command %d both %s and %s", round, i, w, where)
				}
				seen[q] = where
				if i <= prev {
					t.Fatalf("round %d: %s out of order: %d after %d", round, where, i, prev)
				}
				prev = i
			}
		}
		note("queued", drained)
		note("refused as busy", busy)
		note("left in the backlog", rest)
		if len(seen) != n {
			t.Fatalf("round %d: %d of %d commands accounted for", round, len(seen), n)
		}
		if len(rest) > 0 {
			j := index[rest[0]]
			if len(rest) != n-j {
				t.Fatalf("round %d: rest is %d commands from %d, not the backlog's tail", round, len(rest), j)
			}
			if !wasClosed {
				t.Fatalf("round %d: %d left in the backlog of an open connection", round, len(rest))
			}
			for _, q := range append(drained, busy...) {
				if index[q] > j {
					t.Fatalf("round %d: command %d handled ahead of %d left in the backlog", round, index[q], j)
				}
			}
			closedMidway++
			if len(busy) > 0 {
				busyThenClosed++
			}
		}
		for _, q := range busy {
			if q.undo { // the queue never holds muxQueue+muxUndo here
				t.Fatalf("round %d: undo command %d refused as busy", round, index[q])
			}
		}
		for i := range orig {
			if i < n-len(rest) && backlog[i] != nil {
				t.Fatalf("round %d: taken command %d still referenced by the backlog", round, i)
			}
		}
	}
	t.Logf("%d of %d rounds closed while taking the backlog, %d of them after a busy refusal", closedMidway, rounds, busyThenClosed)
}

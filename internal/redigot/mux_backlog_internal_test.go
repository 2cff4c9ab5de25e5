package redigot

import (
	"errors"
	"testing"
)

// A connection that comes up with more backlog than its queue takes refuses
// the commands beyond muxQueue as busy, but an undo command (a rollback, a
// leave) behind them still has the room kept for it: refused, it would
// leave what it undoes on the master until its TTL.
func TestMux_backlogKeepsUndoRoomPastABusyRefusal(t *testing.T) {
	mc := backlogConn()
	for range muxQueue {
		mc.queue <- &muxReq{}
	}
	acquire, rollback, another := &muxReq{}, &muxReq{undo: true}, &muxReq{}
	rest, busy := mc.takeBacklog([]*muxReq{acquire, rollback, another})
	if len(rest) != 0 {
		t.Fatalf("%d commands left in the backlog of a connection that is open", len(rest))
	}
	if len(busy) != 2 || busy[0] != acquire || busy[1] != another {
		t.Fatalf("refused as busy: %v, want the two that are not undo commands", busy)
	}
	if got := len(mc.queue); got != muxQueue+1 {
		t.Fatalf("queue holds %d, want %d: the rollback was not queued", got, muxQueue+1)
	}
}

// A connection that closed while taking the backlog leaves the rest in it,
// in order, for its reader to put back behind what it carried.
func TestMux_backlogStaysWhenTheConnectionClosed(t *testing.T) {
	mc := backlogConn()
	mc.err = errors.New("connection closed")
	close(mc.closed)
	a, b := &muxReq{}, &muxReq{undo: true}
	rest, busy := mc.takeBacklog([]*muxReq{a, b})
	if len(busy) != 0 || len(rest) != 2 || rest[0] != a || rest[1] != b {
		t.Fatalf("closed connection: rest %v, busy %v; want both left in order", rest, busy)
	}
}

// backlogConn is a connection with no socket and an empty queue of the
// real size, for handing a backlog to.
func backlogConn() *muxConn {
	return &muxConn{
		mx:     &mux{},
		queue:  make(chan *muxReq, muxQueue+muxUndo),
		kick:   make(chan struct{}, 1),
		closed: make(chan struct{}),
	}
}

package redigot

import "github.com/quorumlock/quorumlock/transport"

// MuxState is what the pipelined transport tells of its inner state, for
// Client.Sizes and the Client's tests: its Transport value implements it.
type MuxState interface {
	transport.Silencer
	// LiveConns counts its live connections.
	LiveConns() int
	// OwnReads counts the replies read by their caller (a lone master).
	OwnReads() int64
	// Dialing reports whether a dial is under way.
	Dialing() bool
	// Idle reports whether it has a connection that awaits no reply.
	Idle() bool
}

// PooledState is what the pooled transport tells of its inner state, for
// the Client's tests: its Transport value implements it.
type PooledState interface {
	// BeatUsers counts the commands its stall beat is armed for.
	BeatUsers() int64
	// LoneReads counts the replies read by their caller (a lone master).
	LoneReads() int64
}

// LiveConns counts its live connections (MuxState).
func (mx *mux) LiveConns() int {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	return len(mx.conns)
}

// OwnReads counts the replies read by their caller (MuxState).
func (mx *mux) OwnReads() int64 { return mx.ownReads.Load() }

// Dialing reports whether a dial is under way (MuxState).
func (mx *mux) Dialing() bool {
	mx.mu.Lock()
	defer mx.mu.Unlock()
	return mx.dialing != nil
}

// Idle reports whether it has a connection that awaits no reply (MuxState).
func (mx *mux) Idle() bool {
	mx.mu.Lock()
	mc := mx.cur
	mx.mu.Unlock()
	return mc != nil && mc.unanswered.Load() == 0
}

// BeatUsers counts the commands its stall beat is armed for (PooledState).
func (p *pooledTransport) BeatUsers() int64 { return p.beat.Users() }

// LoneReads counts the replies read by their caller (PooledState).
func (p *pooledTransport) LoneReads() int64 { return p.lone.reads.Load() }

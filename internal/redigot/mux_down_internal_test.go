package redigot

import (
	"errors"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/transport"
)

// A pipelined connection is down (muxConn.down) when the master has been
// silent for the per-master timeout — measured from the reader's last
// progress, not from when the oldest command was sent: a deep pipeline
// whose master answers steadily is up, however old its oldest command.
func TestMux_downMeasuredFromTheReadersLastProgress(t *testing.T) {
	const timeout = 50 * time.Millisecond
	born := time.Now().Add(-time.Second)
	at := func(ago time.Duration) int64 { return 1 + int64(time.Since(born)-ago) }
	mc := &muxConn{mx: &mux{timeout: timeout}, born: born}
	if err := mc.down(); err != nil {
		t.Fatalf("waiting for no command: down (%v)", err)
	}
	mc.oldest.Store(at(200 * time.Millisecond))
	// down says "known down, not tried", for the silence's reason
	isDown := func(err error) bool {
		var nt *transport.NotSentError
		if !errors.As(err, &nt) {
			return false
		}
		_, ok := nt.Err.(*downError)
		return ok
	}
	if err := mc.down(); !isDown(err) {
		t.Fatalf("oldest command sent 200ms ago, nothing heard since: %v, want down", err)
	}
	mc.heard.Store(at(time.Millisecond))
	if err := mc.down(); err != nil {
		t.Fatalf("oldest command sent 200ms ago, a reply read 1ms ago: down (%v)", err)
	}
	mc.heard.Store(at(120 * time.Millisecond))
	if err := mc.down(); !isDown(err) {
		t.Fatalf("last reply read 120ms ago: %v, want down", err)
	}
}

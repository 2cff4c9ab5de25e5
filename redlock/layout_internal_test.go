package redlock

import (
	"testing"

	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/layout"
)

// The release channels are the layout's (wakePrefix stays in wake.go,
// which the transport work owns, until it can name keys.WakePrefix).
func TestWakeChannel_isTheLayouts(t *testing.T) {
	if wakePrefix != keys.WakePrefix || wakeChannel("k") != layout.WakeChannel("k") {
		t.Fatalf("wake channel %q, layout says %q", wakeChannel("k"), layout.WakeChannel("k"))
	}
}

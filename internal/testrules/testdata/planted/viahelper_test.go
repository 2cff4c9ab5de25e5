package planted

import "testing"

func TestViaHelper(t *testing.T) {
	var h harness
	t.Run("sub", func(t *testing.T) { h.up(t) })
}

func TestNothing(t *testing.T) {}

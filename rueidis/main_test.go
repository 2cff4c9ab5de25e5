package rueidis

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no goroutine outlives the tests: the transports'
// writers and subscriptions, and the rueidis clients the tests close.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

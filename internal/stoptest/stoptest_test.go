package stoptest

import (
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// childEnv tells TestRun_stopsTheChildAndReadsItsResult that it runs as
// the child.
const childEnv = "QUORUMLOCK_STOPTEST_CHILD"

// Run stops the child while it works, and reads back what it reported.
// The child counts the stops it lived through as the gaps of 100 ms or
// more in its clock between two 5 ms naps.
func TestRun_stopsTheChildAndReadsItsResult(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		jumps := 0
		end := time.Now().Add(time.Second)
		for last := time.Now(); last.Before(end); {
			time.Sleep(5 * time.Millisecond) // the subject: a jump in the clock between two naps shows the stop
			now := time.Now()
			if now.Sub(last) >= 100*time.Millisecond {
				jumps++
			}
			last = now
		}
		Report(Result{Cycles: jumps, Errors: []string{"none"}})
		return
	}
	res, stops := Run(t, Child{
		Test:  "TestRun_stopsTheChildAndReadsItsResult",
		Env:   childEnv + "=1",
		Every: 100 * time.Millisecond, Stop: 150 * time.Millisecond, MinStops: 3,
	})
	// Stops fall in the child's start-up and exit too, not only in its
	// second of work; one comes every 250 ms.
	if res.Cycles < 2 {
		t.Errorf("the child lived through %d stops in its second of work (of %d in all), want 2 or more", res.Cycles, stops)
	}
	if !slices.Equal(res.Errors, []string{"none"}) {
		t.Errorf("the child's errors came back as %q", res.Errors)
	}
}

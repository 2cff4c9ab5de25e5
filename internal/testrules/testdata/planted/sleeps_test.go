package planted

import (
	"testing"
	"time"
)

// The sleep rule's cases: the calls marked flagged are its to report.
func TestSleeps_planted(t *testing.T) {
	time.Sleep(20 * time.Millisecond) // flagged
	time.Sleep(time.Second)           // the subject: the key's TTL passes
	// the subject: a spell in which nothing may happen
	time.Sleep(50 * time.Millisecond)
	for i := 0; i < 3; i++ {
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		if true {
			time.Sleep(time.Millisecond)
		}
	}
	for range 2 {
		go func() {
			time.Sleep(10 * time.Millisecond) // flagged
		}()
	}
}

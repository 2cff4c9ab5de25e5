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
	t.Log("a trailing label")         // the subject: not of the next line
	time.Sleep(30 * time.Millisecond) // flagged
	for i := 0; i < 3; i++ {
		time.Sleep(time.Millisecond)
	}
	for i := 0; i < 3; time.Sleep(time.Millisecond) {
		i++
	}
	for range 3 {
		if true {
			time.Sleep(time.Millisecond) // flagged
		}
	}
	for range 3 {
		t.Log("a poll")
		time.Sleep(time.Millisecond)
	}
	for range 3 {
		time.Sleep(40 * time.Millisecond) // flagged
		t.Log("after a wait in the loop")
	}
	for range 2 {
		go func() {
			time.Sleep(10 * time.Millisecond) // flagged
		}()
	}
}

package adapter

import (
	"context"
	"errors"
	"slices"
	"testing"
)

// A channel is live only once its last SUBSCRIBE is acknowledged with
// nothing about it pending; an acknowledgement of nothing sent is out of
// step; Set sends only what changed.
func TestChannels_liveOnlyOnceAcknowledged(t *testing.T) {
	c := NewChannels()
	add, drop := c.Set([]string{"a", "b", "a"})
	slices.Sort(add)
	if !slices.Equal(add, []string{"a", "b"}) || len(drop) != 0 {
		t.Fatalf("Set: %v, %v", add, drop)
	}
	if c.Live("a") {
		t.Fatal("live before its acknowledgement")
	}
	if !c.Ack("subscribe", "a") || !c.Live("a") || c.Live("b") {
		t.Fatal("a acknowledged: want a live, b not")
	}
	if c.Ack("subscribe", "a") {
		t.Fatal("a second acknowledgement of one SUBSCRIBE accepted")
	}
	add, drop = c.Set([]string{"b"})
	if len(add) != 0 || !slices.Equal(drop, []string{"a"}) || c.Live("a") || c.Wanted("a") {
		t.Fatalf("Set to b: %v, %v", add, drop)
	}
	if !c.Ack("unsubscribe", "a") || !c.Ack("subscribe", "b") || !c.Live("b") {
		t.Fatal("acknowledgements of the change")
	}
	c.Lost()
	if c.Live("b") || !c.Wanted("b") {
		t.Fatal("after Lost: b still live, or no longer wanted")
	}
	if c.Ack("psubscribe", "b") {
		t.Fatal("an acknowledgement of another kind accepted")
	}
}

func TestTimeoutError_matchesDeadlineExceeded(t *testing.T) {
	if !errors.Is(TimeoutError{}, context.DeadlineExceeded) {
		t.Fatal("TimeoutError does not match context.DeadlineExceeded")
	}
}

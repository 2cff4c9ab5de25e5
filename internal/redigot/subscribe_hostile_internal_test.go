package redigot

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gomodule/redigo/redis"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/hostile"
	"github.com/quorumlock/quorumlock/internal/redistest"
	"github.com/quorumlock/quorumlock/transport"
)

// A hostile master on the borrowed path: whatever it sends, no panic
// escapes, the subscription ends or Close ends it promptly, the pool gets
// its slot back, and no goroutine is left.
func TestSubscribeBorrowed_hostileMaster(t *testing.T) {
	redistest.SkipShort(t)
	for _, tc := range []struct {
		name     string
		push     func(i int, ch string) string
		breaks   bool // the subscription breaks by itself
		panicErr bool
		refusal  bool // Err is a refusal (transport.ErrNoticesRefused), not a failure
	}{
		{"huge length header", func(i int, ch string) string {
			if i == 0 {
				return "$300000000000000\r\n"
			}
			return ""
		}, true, true, false},
		{"huge array header", func(i int, ch string) string {
			if i == 0 {
				return "*300000000000000\r\n"
			}
			return ""
		}, true, true, false},
		{"garbage", func(i int, ch string) string {
			if i == 0 {
				return "?garbage\r\n"
			}
			return ""
		}, true, false, false},
		// Only NOPERM refuses notices for good; any other reply that is
		// not a notice is a failure of the master, whatever
		// the shape of the reply.
		{"NOPERM", func(i int, ch string) string {
			if i == 0 {
				return "-NOPERM this user has no permissions to access one of the channels used as arguments\r\n"
			}
			return ""
		}, true, false, true},
		{"error reply", func(i int, ch string) string {
			if i == 0 {
				return "-BUSY Redis is busy running a script.\r\n"
			}
			return ""
		}, true, false, false},
		{"not a push", func(i int, ch string) string {
			if i == 0 {
				return "*2\r\n$3\r\nfoo\r\n:1\r\n"
			}
			return ""
		}, true, false, false},
		{"100MB bulk begun, never finished", func(i int, ch string) string {
			if i == 0 {
				return "*3\r\n$7\r\nmessage\r\n" + hostile.Bulk(ch) + "$100000000\r\nxxxx"
			}
			return ""
		}, false, false, false},
		{"nested 5000 deep", func(i int, ch string) string {
			if i == 0 {
				return strings.Repeat("*1\r\n", 5000) + ":1\r\n"
			}
			return ""
		}, true, false, false},
		{"message flood", func(i int, ch string) string {
			return "*3\r\n$7\r\nmessage\r\n" + hostile.Bulk(ch) + hostile.Bulk("payload")
		}, false, false, false},
		{"forged subscribe acks flood", func(i int, ch string) string {
			return "*3\r\n$9\r\nsubscribe\r\n" + hostile.Bulk(fmt.Sprintf("other%d", i%100)) + ":1\r\n"
		}, false, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
			addr := hostile.Start(t, hostile.Subscriber(tc.push))
			rp, p := borrowingFrom(t, addr)
			for round := 0; round < 3; round++ {
				sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
				if err != nil {
					t.Fatal(err)
				}
				err = sub.Set(ctx5s(t), []string{"sub:h"})
				t.Logf("Set: %v", err)
				if tc.breaks {
					select {
					case <-sub.Done():
					case <-time.After(5 * time.Second):
						t.Fatal("the subscription did not break")
					}
					rs := sub.(*redigoSub)
					got := rs.Err()
					if tc.panicErr != errors.Is(got, fault.ErrPanic) {
						t.Errorf("Err = %v, want fault.ErrPanic: %v", got, tc.panicErr)
					}
					if tc.refusal != errors.Is(got, transport.ErrNoticesRefused) {
						t.Errorf("Err = %v, want a refusal: %v", got, tc.refusal)
					}
				} else {
					time.Sleep(50 * time.Millisecond) // the subject: the forged acknowledgements had time to be read
				}
				if sub.Live("other1") {
					t.Error("a forged acknowledgement made a channel live")
				}
				closeWithin(t, fmt.Sprintf("round %d", round), sub)
				redistest.LendsNothing(t, fmt.Sprintf("round %d", round), rp.Stats)
			}
			if st := rp.Stats(); st.ActiveCount != 0 {
				t.Errorf("broken hostile connections went back to the pool: %+v", st)
			}
		})
	}
}

// A master that reads nothing: a Set that cannot write ends with its ctx
// (the borrowed connection is broken under the write), and Close returns.
func TestSubscribeBorrowed_setBlockedOnWriteEndsWithCtx(t *testing.T) {
	redistest.SkipShort(t)
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	addr := hostile.Serve(t, func(c net.Conn, quit <-chan struct{}) { <-quit })
	rp, p := borrowingFrom(t, addr)
	sub, err := p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	chans := make([]string, 20000)
	for i := range chans {
		chans[i] = fmt.Sprintf("sub:blocked:%0200d", i) // ~4MB: more than the socket buffers
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- sub.Set(ctx, chans) }()
	select {
	case err := <-done:
		t.Logf("Set: %v after %v", err, time.Since(start))
		if err == nil {
			t.Error("a Set that could not be written succeeded")
		}
	case <-time.After(5 * time.Second):
		sub.Close()
		t.Fatal("a Set blocked on its write outlives its ctx")
	}
	select {
	case <-sub.Done():
	case <-time.After(5 * time.Second):
		t.Error("Done open after the Set broke the connection")
	}
	closeWithin(t, "after the blocked Set", sub)
	redistest.LendsNothing(t, "at the end", rp.Stats)

	// And Close alone ends a Set blocked on its write (background ctx).
	sub, err = p.Subscribe(ctx5s(t), func(string, string) {})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- sub.Set(context.Background(), chans) }()
	redistest.Eventually(t, 10*time.Second, "the Set blocked on its write", func() bool {
		return redistest.Goroutines("IO wait", "TestSubscribeBorrowed_setBlockedOnWriteEndsWithCtx.", "redigot.(*redigoSub).Set(") > 0
	})
	closeWithin(t, "with a Set blocked", sub)
	select {
	case err := <-done:
		if err == nil {
			t.Error("the blocked Set succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the blocked Set outlives Close")
	}
	redistest.LendsNothing(t, "at the end", rp.Stats)
}

var _ = redis.ErrNil

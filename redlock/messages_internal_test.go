package redlock

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/transport"
)

// A master's timeout reads with one "redlock: " prefix in all, whatever
// its cause's text starts with, and is named a timeout once.
func TestNodeError_timeoutHasOnePrefix(t *testing.T) {
	c := &Client{timeout: 50 * time.Millisecond}
	m := &master{index: 2, addr: "127.0.0.1:7003", t: nil}
	for _, cause := range []error{
		context.DeadlineExceeded,
		fmt.Errorf("redlock: inner: %w", context.DeadlineExceeded),
		c.nodeError(m, context.DeadlineExceeded), // named already
	} {
		ne := c.nodeError(m, cause)
		msg := ne.Error()
		if !errors.Is(ne, ErrMasterTimeout) || errors.Is(ne, context.DeadlineExceeded) {
			t.Errorf("%q: matches ErrMasterTimeout %v, DeadlineExceeded %v", msg, errors.Is(ne, ErrMasterTimeout), errors.Is(ne, context.DeadlineExceeded))
		}
		if strings.Contains(msg, "redlock:") || strings.Count(msg, "did not answer in time") != 1 ||
			!strings.HasPrefix(msg, "master 2 (127.0.0.1:7003): did not answer in time (50ms)") {
			t.Errorf("message %q", msg)
		}
	}
	// Known down, not tried: said so, still a timeout, never the caller's
	// DeadlineExceeded.
	since := time.Now().Add(-1200 * time.Millisecond)
	ne := c.nodeError(m, &notTriedError{since: since, cause: fmt.Errorf("no reply on the connection for over 50ms: %w", context.DeadlineExceeded)})
	msg := ne.Error()
	if !errors.Is(ne, ErrMasterTimeout) || errors.Is(ne, context.DeadlineExceeded) ||
		!regexp.MustCompile(`^master 2 \(127\.0\.0\.1:7003\): known down since `+regexp.QuoteMeta(since.Format("15:04:05.000"))+` \((1\.[2-9][0-9]*|[2-9][0-9.]*)s ago\), not tried: no reply on the connection for over 50ms`).MatchString(msg) {
		// "1.2s ago", or later on a busy machine.
		t.Errorf("known down: %q", msg)
	}
}

// A transport of any package says that it did not send a command to a
// master known down with transport.NotSentError, and the master's error
// reads as for the module's own transports: known down, not tried, a
// timeout when the master was down for not answering, never the caller's
// DeadlineExceeded.
func TestNodeError_notSentErrorOfAnyTransportIsNamedKnownDown(t *testing.T) {
	c := &Client{timeout: 50 * time.Millisecond}
	m := &master{index: 1, addr: "127.0.0.1:7002"}
	since := time.Now().Add(-1200 * time.Millisecond)
	// "(1.2s ago)", or later on a busy machine.
	prefix := regexp.MustCompile(`^master 1 \(127\.0\.0\.1:7002\): known down since ` + regexp.QuoteMeta(since.Format("15:04:05.000")) + ` \((1\.[2-9][0-9]*|[2-9][0-9.]*)s ago\), not tried: `)
	named := func(msg, rest string) bool {
		loc := prefix.FindStringIndex(msg)
		return loc != nil && strings.HasPrefix(msg[loc[1]:], rest)
	}

	silent := &transport.NotSentError{Since: since, Err: fmt.Errorf("no reply for 50ms: %w", context.DeadlineExceeded)}
	ne := c.nodeError(m, fmt.Errorf("wrapped: %w", silent))
	if msg := ne.Error(); !errors.Is(ne, ErrMasterTimeout) || errors.Is(ne, context.DeadlineExceeded) ||
		!named(msg, "no reply for 50ms") {
		t.Errorf("silent master: %q (ErrMasterTimeout %v, DeadlineExceeded %v)", msg, errors.Is(ne, ErrMasterTimeout), errors.Is(ne, context.DeadlineExceeded))
	}

	refused := errors.New("connection refused")
	dial := &transport.NotSentError{Since: since, Why: "its last dial failed", Err: refused}
	ne = c.nodeError(m, dial)
	if msg := ne.Error(); errors.Is(ne, ErrMasterTimeout) || !errors.Is(ne, refused) ||
		!named(msg, "its last dial failed: connection refused") {
		t.Errorf("failed dial: %q (ErrMasterTimeout %v, the dial's error %v)", msg, errors.Is(ne, ErrMasterTimeout), errors.Is(ne, refused))
	}
}

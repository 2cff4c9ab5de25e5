package transport_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quorumlock/quorumlock/redlock"
	"github.com/quorumlock/quorumlock/transport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestErrClosed_isRedlocksErrClosed(t *testing.T) {
	if !errors.Is(redlock.ErrClosed, transport.ErrClosed) || !errors.Is(transport.ErrClosed, redlock.ErrClosed) {
		t.Fatal("redlock.ErrClosed and transport.ErrClosed do not match each other")
	}
}

func TestReplyShape_fitsOnlyItsReplies(t *testing.T) {
	sha := []byte("0123456789abcdef0123456789abcdef01234567")
	for _, tc := range []struct {
		shape    transport.ReplyShape
		fits     []any
		fitsNone []any
	}{
		{transport.ReplySet, []any{"OK", nil}, []any{"QUEUED", int64(1), []byte("OK")}},
		{transport.ReplyFlag, []any{int64(0), int64(1)}, []any{int64(2), nil, "OK"}},
		{transport.ReplyRW, []any{int64(0), int64(1), int64(2)}, []any{int64(3), nil}},
		{transport.ReplyCounter, []any{int64(0), []byte("42"), []byte("18446744073709551615")},
			[]any{int64(1), []byte(""), []byte("4a"), []byte("123456789012345678901"), "42"}},
		{transport.ReplySHA, []any{sha}, []any{sha[:39], []byte("0123456789ABCDEF0123456789abcdef01234567"), string(sha)}},
		{transport.ReplyInfo, []any{[]byte("# Server\r\n")}, []any{"# Server", nil}},
		{transport.ReplyTTL, []any{"OK", []byte("OK"), int64(0), int64(7999), int64(-1), int64(-3), int64(1 << 62)},
			[]any{nil, "QUEUED", []byte("ok"), []byte("42"), "42"}},
		{transport.ReplyShape(0), nil, []any{nil, "OK", int64(0)}},
	} {
		for _, v := range tc.fits {
			if !tc.shape.Fits(v) {
				t.Errorf("shape %d: %#v does not fit", tc.shape, v)
			}
		}
		for _, v := range tc.fitsNone {
			if tc.shape.Fits(v) {
				t.Errorf("shape %d: %#v fits", tc.shape, v)
			}
		}
	}
}

// completion counts the outcomes handed to it (transport.Completer).
type completion struct{ n int }

func (c *completion) Complete(any, error, transport.SendInfo) { c.n++ }

func TestCommand_completeGoesToToElseDone(t *testing.T) {
	var done int
	cmd := &transport.Command{Name: "SET", Done: func(any, error, transport.SendInfo) { done++ }}
	cmd.Complete("OK", nil, transport.SendInfo{Sent: true})
	if done != 1 {
		t.Fatalf("Done called %d times, want 1", done)
	}
	to := &completion{}
	cmd.To = to
	cmd.Complete("OK", nil, transport.SendInfo{Sent: true})
	if to.n != 1 || done != 1 {
		t.Fatalf("To called %d times and Done %d, want 1 and 1", to.n, done)
	}
}

func TestCommand_wireArgsPrefixScriptsHashAndKeyCount(t *testing.T) {
	var release *transport.Script
	for _, s := range transport.Scripts() {
		if s.Name() == "release" {
			release = s
			break
		}
	}
	if release == nil {
		t.Fatal("no release script in Scripts()")
	}
	cmd := &transport.Command{Script: release, Name: "EVALSHA", Args: []any{"k", "tok", "ch"}, NumKeys: 1}
	if got, want := cmd.WireArgs(), []any{release.SHA(), 1, "k", "tok", "ch"}; !slices.Equal(got, want) {
		t.Fatalf("WireArgs() = %v, want %v", got, want)
	}
	plain := &transport.Command{Name: "SET", Args: []any{"k", "tok", "NX"}}
	if got := plain.WireArgs(); !slices.Equal(got, plain.Args) {
		t.Fatalf("WireArgs() of a plain command = %v, want its Args", got)
	}
	built := []any{"prebuilt"}
	cmd.Wire = built
	if got := cmd.WireArgs(); !slices.Equal(got, built) {
		t.Fatalf("WireArgs() = %v, want Wire as built", got)
	}
}

func TestNotSentError_unwrapsAllButATimeout(t *testing.T) {
	since := time.Date(2026, 1, 2, 15, 4, 5, 0, time.UTC)
	refused := errors.New("redlock: connection refused")
	e := &transport.NotSentError{Since: since, Why: "its last dial failed", Err: refused}
	if got, want := e.Error(), "known down since 15:04:05.000, not tried: its last dial failed: connection refused"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	if !errors.Is(e, refused) || e.Timeout() {
		t.Errorf("a failed dial: matches its error %v, a timeout %v", errors.Is(e, refused), e.Timeout())
	}
	silent := &transport.NotSentError{Since: since, Err: context.DeadlineExceeded}
	if errors.Is(silent, context.DeadlineExceeded) || !silent.Timeout() {
		t.Errorf("a silent master: matches DeadlineExceeded %v, a timeout %v", errors.Is(silent, context.DeadlineExceeded), silent.Timeout())
	}
}

package redlock

import (
	"context"
	"errors"
	"testing"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/observe"
)

// The outcome an Observer is told follows from the error alone: what the
// masters answered, whether validity was left, whether ctx ended.
func TestAcquireOutcome_classifies_each_failure(t *testing.T) {
	fail := func(n int) *multierror.Error {
		var m *multierror.Error
		for i := 0; i < n; i++ {
			m = multierror.Append(m, &NodeError{Index: i, Err: ErrMasterTimeout})
		}
		return m
	}
	qe := func(refused []int, failed int, noValidity bool, ctxErr error) error {
		e := &QuorumError{Op: "acquire", Key: "k", Masters: 5, Quorum: 3, Refused: refused, NoValidity: noValidity,
			sentinel: ErrNotAcquired, ctxErr: ctxErr}
		if failed > 0 {
			e.Failed = fail(failed)
		}
		return e
	}
	for _, tc := range []struct {
		name string
		err  error
		want observe.AcquireOutcome
	}{
		{"acquired", nil, observe.AcquireAcquired},
		{"held on three", qe([]int{0, 1, 2}, 0, false, nil), observe.AcquireContended},
		{"held on two, one failed", qe([]int{0, 1}, 1, false, nil), observe.AcquireContended},
		{"three failed", qe(nil, 3, false, nil), observe.AcquireFailedMasters},
		{"three failed, one refused", qe([]int{4}, 3, false, nil), observe.AcquireFailedMasters},
		{"granted too late", qe(nil, 0, true, nil), observe.AcquireTooLate},
		{"cancelled before the answers", qe([]int{0}, 0, false, context.Canceled), observe.AcquireCancelled},
		{"deadline while held", qe([]int{0, 1, 2}, 0, false, context.DeadlineExceeded), observe.AcquireContended},
		{"ctx ended before the first attempt", context.Canceled, observe.AcquireCancelled},
		{"closed", errors.Join(ErrClosed), observe.AcquireClosed},
	} {
		if got := acquireOutcome(tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestLossCause_classifies_each_loss(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want observe.LossCause
	}{
		{"validity ran out", newKeyError(ErrLockLost, "k", "validity ran out", nil), observe.LossExpired},
		{"max hold", newKeyError(ErrMaxHold, "k", "(1s)", nil), observe.LossMaxHold},
		{"closed", newKeyError(ErrLockLost, "k", "", ErrClosed), observe.LossClosed},
		{"watchdog gave up", newKeyError(ErrLockLost, "k", "3 extensions in a row reached no quorum",
			&QuorumError{Masters: 3, Quorum: 2, sentinel: ErrNotExtended}), observe.LossNotExtended},
		{"not held on a quorum", &QuorumError{Masters: 3, Quorum: 2, Refused: []int{0, 2}, sentinel: ErrLockLost}, observe.LossNotHeld},
		{"no validity after the round", &QuorumError{Masters: 3, Quorum: 2, Refused: []int{0}, sentinel: ErrLockLost}, observe.LossExpired},
	} {
		if got := lossCause(tc.err); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

package redlock

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/hashicorp/go-multierror"
)

// Sentinel errors. Match them with errors.Is: the errors returned by this
// package wrap them together with the details.
var (
	// ErrNotAcquired is returned by Acquire and TryAcquire when the lock
	// could not be taken: held by someone else on too many masters, too
	// many masters failed, no validity was left, or ctx ended. The error
	// is a *QuorumError; when ctx ended it also matches ctx.Err().
	ErrNotAcquired = errors.New("redlock: lock not acquired")

	// ErrLockLost is returned by Extend when the lock can no longer be
	// trusted: its validity ran out, or a quorum of masters no longer
	// holds its token. A lost lock is never silently taken again.
	ErrLockLost = errors.New("redlock: lock lost")

	// ErrMaxHold is the cause of the loss of an auto-extended lock that was
	// held for its maximum hold time (WithMaxHold). It matches ErrLockLost
	// too.
	ErrMaxHold = fmt.Errorf("%w: held for the maximum hold time", ErrLockLost)

	// ErrReleased is what Lock.Err returns after Release. It matches
	// ErrLockLost: a released lock no longer protects anything.
	ErrReleased = fmt.Errorf("%w: released", ErrLockLost)

	// ErrNotExtended is returned by Extend when too few masters could be
	// reached to extend the lock while its old validity has not run out:
	// the lock is still held until Until(), and a later Extend may succeed.
	ErrNotExtended = errors.New("redlock: lock not extended")

	// ErrNotHeld is returned by Release when fewer than a quorum of masters
	// still held the lock's token (it had expired or was taken), or when
	// the lock was already released.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrNotReleased is returned by Release when too few masters answered
	// (failures, timeouts, or ctx ended) to confirm the release. The
	// release goes on in the background on every master, and masters that
	// never got it drop the lock at its TTL.
	ErrNotReleased = errors.New("redlock: lock release not confirmed")

	// ErrInvalid is matched by errors for bad arguments or options; the
	// message names the problem. Nothing is sent to any master.
	ErrInvalid = errors.New("redlock: invalid argument")

	// ErrClosed is returned by operations on a closed Client.
	ErrClosed = errors.New("redlock: client closed")

	// ErrMasterTimeout is wrapped by the *NodeError of a master that did
	// not answer within the per-master timeout.
	ErrMasterTimeout = errors.New("redlock: master did not answer in time")
)

// NodeError is the failure of one master during one operation.
type NodeError struct {
	Index int    // the master's position in the list given to New
	Addr  string // the master's address, never with credentials
	Err   error
}

// Error names the master by index and address, and its failure.
func (e *NodeError) Error() string {
	return "master " + strconv.Itoa(e.Index) + " (" + e.Addr + "): " + e.Err.Error()
}

// Unwrap returns the master's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError explains an operation that did not reach a quorum, master by
// master. It matches the operation's sentinel (ErrNotAcquired,
// ErrNotExtended, ErrLockLost, ErrNotHeld or ErrNotReleased) with errors.Is, each master's
// *NodeError with errors.As, and the caller's ctx.Err() when ctx ended.
type QuorumError struct {
	Op        string // "acquire", "extend" or "release"
	Key       string
	Masters   int   // how many masters there are
	Quorum    int   // how many had to agree
	Succeeded int   // how many granted, extended or released
	Refused   []int // indices of masters that answered "held by another token" (or, for extend and release, "not ours")
	// NoValidity is true when a quorum agreed but the time it took left no
	// validity.
	NoValidity bool
	// Failed holds a *NodeError for each master that failed or did not
	// answer in time; nil when none did.
	Failed *multierror.Error

	sentinel error
	ctxErr   error
	addrs    []string
}

// Error says how many masters agreed, which held the key or did not hold
// the token, and how each failed master failed.
func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString(e.sentinel.Error())
	b.WriteString(": ")
	b.WriteString(e.Op)
	b.WriteString(" ")
	b.WriteString(strconv.Quote(e.Key))
	b.WriteString(": ")
	b.WriteString(strconv.Itoa(e.Succeeded))
	b.WriteString(" of ")
	b.WriteString(strconv.Itoa(e.Masters))
	b.WriteString(" masters agreed, quorum is ")
	b.WriteString(strconv.Itoa(e.Quorum))
	if e.NoValidity {
		b.WriteString(", but no validity was left")
	}
	if len(e.Refused) > 0 {
		if e.Op == "acquire" {
			b.WriteString("; held by another token on ")
		} else {
			b.WriteString("; not held by this token on ")
		}
		for i, idx := range e.Refused {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(strconv.Itoa(idx))
			b.WriteString(" (")
			b.WriteString(e.addrs[idx])
			b.WriteString(")")
		}
	}
	if e.Failed != nil {
		for _, err := range e.Failed.Errors {
			b.WriteString("; ")
			b.WriteString(err.Error())
		}
	}
	if e.ctxErr != nil {
		b.WriteString("; ")
		b.WriteString(e.ctxErr.Error())
	}
	return b.String()
}

// Unwrap returns the sentinel, the caller's context error if any, and the
// masters' failures, for errors.Is and errors.As.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, 3)
	errs = append(errs, e.sentinel)
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.Failed != nil {
		errs = append(errs, e.Failed)
	}
	return errs
}

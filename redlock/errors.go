package redlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-multierror"

	"github.com/quorumlock/quorumlock/internal/fault"
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/transport"
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

	// ErrNotHeld is returned by Release when the masters' answers show the
	// lock was no longer held: more than N − quorum of them did not hold
	// its token (it had expired or was taken), or its validity had ended
	// and fewer than a quorum deleted it; also when the lock was already
	// released.
	ErrNotHeld = errors.New("redlock: lock not held")

	// ErrNotReleased is returned by Release when too few masters answered
	// (failures, timeouts, or ctx ended) to confirm that a quorum of them
	// is free of the lock's token. The release goes on in the background
	// on every master, and masters that never got it drop the lock at its
	// TTL.
	ErrNotReleased = errors.New("redlock: lock release not confirmed")

	// ErrInvalid is matched by errors for bad arguments or options; the
	// message names the problem. Nothing is sent to any master.
	ErrInvalid = fault.ErrInvalid

	// ErrWriterWaiting is matched, besides ErrNotAcquired, by the error of
	// a read acquisition (AcquireRead, TryAcquireRead) that masters turned
	// away because a writer waits for the lock, not because one holds it:
	// waiting writers go first (docs/kinds.md). QuorumError.WriterWaiting
	// names those masters.
	ErrWriterWaiting = errors.New("redlock: a writer is waiting")

	// ErrClosed is returned by operations on a closed Client. It is
	// transport.ErrClosed, which a transport's commands fail with after
	// its Close.
	ErrClosed = transport.ErrClosed

	// ErrWrongKind is matched by the error of a master whose copy of the
	// key belongs to a lock of another kind (a key locked with Acquire,
	// taken with AcquireRead, say): kinds must not be mixed on one key
	// (docs/kinds.md). The master's *NodeError says which kinds hold such
	// a key. An acquisition that meets it on too many masters fails with
	// ErrNotAcquired (Acquire waits for the key like any held key: use
	// TryAcquire or WithWait to see it at once).
	ErrWrongKind = scripts.ErrWrongKind

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
// A timeout reads "master 2 (127.0.0.1:7003): did not answer in time
// (50ms): …", without a second package prefix.
func (e *NodeError) Error() string {
	msg := trimPrefix(e.Err.Error())
	if errors.Is(e.Err, ErrMasterTimeout) {
		msg = strings.TrimPrefix(msg, "master ")
	}
	return "master " + strconv.Itoa(e.Index) + " (" + e.Addr + "): " + msg
}

// Unwrap returns the master's error.
func (e *NodeError) Unwrap() error { return e.Err }

// QuorumError explains an operation that did not reach a quorum, master by
// master. It matches the operation's sentinel (ErrNotAcquired,
// ErrNotExtended, ErrLockLost, ErrNotHeld or ErrNotReleased) with errors.Is, each master's
// *NodeError with errors.As, and the caller's ctx.Err() when ctx ended.
//
// Its message states the outcome and the key once, then the count, then
// the detail per master, on one line:
//
//	redlock: lock "k" not acquired: 1 of 3 masters agreed, 2 needed; held by another token on master 0 (127.0.0.1:7001); master 2 (127.0.0.1:7003): did not answer in time (50ms): …
type QuorumError struct {
	// Op is the round that fell short: "acquire" (also a reentrant lock
	// taken again), "extend", "release" (also a reentrant lock's count
	// given back), or "commit fence" (the second round of a fenced
	// acquisition, WithFencing: the counter could not be raised on a
	// quorum; the error then matches ErrNotAcquired).
	Op      string
	Key     string
	Masters int // how many masters there are
	Quorum  int // how many had to agree
	// Succeeded is how many granted or extended it; for a release, how
	// many deleted it or are known not to hold its token (Lock.Release).
	Succeeded int
	Refused   []int // indices of masters that answered "held by another token" (or, for extend and release, "not ours")
	// WriterWaiting holds those of Refused that turned a reader away
	// because a writer waits for the lock (no one holds it for writing);
	// the error then matches ErrWriterWaiting.
	WriterWaiting []int
	// NoValidity is true when a quorum agreed but the time it took left no
	// validity.
	NoValidity bool
	// Failed holds a *NodeError for each master that failed or did not
	// answer in time; nil when none did.
	Failed *multierror.Error
	// WrongKind holds a *NodeError, matching ErrWrongKind, for each of
	// Refused whose copy of the key is a lock of another kind (a
	// read-write lock's hash where a plain lock's string was expected,
	// say); nil when none is. Nothing more was sent to those masters.
	WrongKind *multierror.Error
	// Unanswered holds the indices of masters whose answers were not
	// awaited: the outcome was settled without them (so many refused or
	// failed that a quorum was out of reach), or the caller's ctx ended
	// first. When the caller's ctx ended during the client's identity
	// check at first contact (nothing was sent then; Succeeded is 0),
	// they are the masters that check still awaited. Their answers, when they come, are handled as the round's
	// (a grant is rolled back).
	Unanswered []int
	// NotAsked holds the indices of masters the acquisition did not ask:
	// a waiter woken by a release asks one master first (the pilot, see
	// "Woken waiters" in docs/design.md) and the others only once it
	// granted. When the pilot refused (another holds the key there) or
	// failed, nothing was sent to them.
	NotAsked []int

	sentinel error
	ctxErr   error
	addrs    []string
	// uncounted are the masters that granted but did not count: not
	// identified yet, or one server under a second address (ident.Gate).
	uncounted []int
}

// Error says, on one line, what happened to which key, how many masters
// agreed, which held the key or did not hold the token, and how each
// failed master failed.
func (e *QuorumError) Error() string {
	var b strings.Builder
	b.WriteString(keyMessage(e.sentinel, e.Key))
	b.WriteString(": ")
	if e.Op != opImplied(e.sentinel) {
		b.WriteString(e.Op)
		b.WriteString(": ")
	}
	b.WriteString(strconv.Itoa(e.Succeeded))
	b.WriteString(" of ")
	b.WriteString(strconv.Itoa(e.Masters))
	b.WriteString(" masters agreed, ")
	b.WriteString(strconv.Itoa(e.Quorum))
	b.WriteString(" needed")
	if e.NoValidity {
		b.WriteString(", but no validity was left")
	}
	wrongKind := e.wrongKindAt()
	if len(e.Refused) > len(e.WriterWaiting)+len(wrongKind) {
		if e.Op == "acquire" {
			b.WriteString("; held by another token on ")
		} else {
			b.WriteString("; not held by this token on ")
		}
		e.writeMasters(&b, e.Refused, append(wrongKind, e.WriterWaiting...))
	}
	if len(e.uncounted) > 0 {
		b.WriteString("; granted but not counted (its server not identified yet, or counted under another address): ")
		e.writeMasters(&b, e.uncounted, nil)
	}
	if e.WrongKind != nil {
		for _, err := range e.WrongKind.Errors {
			b.WriteString("; ")
			b.WriteString(trimPrefix(err.Error()))
		}
	}
	if len(e.WriterWaiting) > 0 {
		b.WriteString("; a writer is waiting, readers wait behind it, on ")
		e.writeMasters(&b, e.WriterWaiting, nil)
	}
	if e.Failed != nil {
		for _, err := range e.Failed.Errors {
			b.WriteString("; ")
			b.WriteString(trimPrefix(err.Error()))
		}
	}
	if len(e.NotAsked) > 0 {
		b.WriteString("; not asked, as the pilot did not grant it: ")
		e.writeMasters(&b, e.NotAsked, nil)
	}
	if len(e.Unanswered) > 0 {
		b.WriteString("; not awaited: ")
		e.writeMasters(&b, e.Unanswered, nil)
		if e.ctxErr == nil && len(e.Unanswered) == 1 {
			b.WriteString(" (a quorum was out of reach without its answer)")
		} else if e.ctxErr == nil {
			b.WriteString(" (a quorum was out of reach without their answers)")
		}
	}
	if e.ctxErr != nil {
		b.WriteString("; ")
		b.WriteString(e.ctxErr.Error())
	}
	return b.String()
}

// unheard reports whether no master answered the round: every one was
// unanswered or not asked (the caller's ctx ended first, say).
func (e *QuorumError) unheard() bool {
	return e.Succeeded == 0 && len(e.Refused) == 0 && e.Failed == nil && e.WrongKind == nil && len(e.uncounted) == 0 && !e.NoValidity
}

// wrongKindAt returns the indices of the masters in WrongKind.
func (e *QuorumError) wrongKindAt() []int {
	if e.WrongKind == nil {
		return nil
	}
	var at []int
	for _, err := range e.WrongKind.Errors {
		if ne := (*NodeError)(nil); errors.As(err, &ne) {
			at = append(at, ne.Index)
		}
	}
	return at
}

// writeMasters writes "master i (addr)" for each index of list, comma
// separated, leaving out those in skip.
func (e *QuorumError) writeMasters(b *strings.Builder, list, skip []int) {
	first := true
	for _, idx := range list {
		if slices.Contains(skip, idx) {
			continue
		}
		if !first {
			b.WriteString(", ")
		}
		first = false
		b.WriteString("master ")
		b.WriteString(strconv.Itoa(idx))
		if idx >= 0 && idx < len(e.addrs) {
			b.WriteString(" (")
			b.WriteString(e.addrs[idx])
			b.WriteString(")")
		}
	}
}

// Unwrap returns the sentinel (and ErrWriterWaiting when a writer waits),
// the caller's context error if any, and the masters' failures, for
// errors.Is and errors.As.
func (e *QuorumError) Unwrap() []error {
	errs := make([]error, 0, 4)
	errs = append(errs, e.sentinel)
	if len(e.WriterWaiting) > 0 {
		errs = append(errs, ErrWriterWaiting)
	}
	if e.ctxErr != nil {
		errs = append(errs, e.ctxErr)
	}
	if e.Failed != nil {
		errs = append(errs, e.Failed)
	}
	if e.WrongKind != nil {
		errs = append(errs, e.WrongKind)
	}
	return errs
}

// prefix starts every message of this package.
const prefix = "redlock: "

// trimPrefix drops the package prefix from a message that goes inside
// another of this package's messages, so that it is said once.
func trimPrefix(s string) string { return strings.TrimPrefix(s, prefix) }

// keyMessage states a sentinel's outcome for one key:
// `redlock: lock "k" not acquired`.
func keyMessage(sentinel error, key string) string {
	q := strconv.Quote(key)
	//nolint:errorlint // sentinel is one of this package's Err values, never wrapped
	switch sentinel {
	case ErrNotAcquired:
		return prefix + "lock " + q + " not acquired"
	case ErrNotExtended:
		return prefix + "lock " + q + " not extended"
	case ErrLockLost:
		return prefix + "lock " + q + " lost"
	case ErrMaxHold:
		return prefix + "lock " + q + " lost: held for the maximum hold time"
	case ErrNotHeld:
		return prefix + "lock " + q + " not held"
	case ErrNotReleased:
		return prefix + "release of lock " + q + " not confirmed"
	}
	return sentinel.Error() + ": " + q
}

// opImplied is the operation a sentinel names by itself; a QuorumError of
// another operation names it.
func opImplied(sentinel error) string {
	//nolint:errorlint // sentinel is one of this package's Err values, never wrapped
	switch sentinel {
	case ErrNotAcquired:
		return "acquire"
	case ErrNotExtended:
		return "extend"
	case ErrNotReleased, ErrNotHeld:
		return "release"
	}
	return ""
}

// keyError is an outcome for one key, worded once (keyMessage), with what
// happened after it; it matches sentinel and cause with errors.Is.
type keyError struct {
	sentinel error
	key      string
	detail   string // may be ""
	cause    error  // may be nil
}

func newKeyError(sentinel error, key, detail string, cause error) error {
	return &keyError{sentinel: sentinel, key: key, detail: detail, cause: cause}
}

func (e *keyError) Error() string {
	s := keyMessage(e.sentinel, e.key)
	switch {
	case strings.HasPrefix(e.detail, "("):
		s += " " + e.detail
	case e.detail != "":
		s += ": " + e.detail
	}
	if e.cause != nil {
		// The cause may be about the same key: say the key once.
		c := trimPrefix(e.cause.Error())
		c = strings.TrimPrefix(c, "lock "+strconv.Quote(e.key)+" ")
		s += ": " + c
	}
	return s
}

func (e *keyError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.sentinel}
	}
	return []error{e.sentinel, e.cause}
}

// notTriedError fails a command that was not sent because its master was
// already known down: its pipelined connection had a command unanswered
// for over the per-master timeout, or its last dial failed moments ago.
// The command failed at once; its message says so ("known down since
// 15:04:05.000 (1.2s ago), not tried: …"), where "did not answer in time
// (50ms)" would claim a wait that never happened. It matches
// ErrMasterTimeout when the master was down for not answering, and
// otherwise unwraps to the failure that made it down (a dial's error).
type notTriedError struct {
	since time.Time
	ago   time.Duration // since, from when the master's error was named
	why   string        // how it was known down, when the cause does not say
	cause error
}

// named is e as a master's error states it, with the cause's credentials
// removed and how long ago the master went down.
func (e *notTriedError) named(cause error, now time.Time) *notTriedError {
	return &notTriedError{since: e.since, ago: now.Sub(e.since), why: e.why, cause: cause}
}

func (e *notTriedError) Error() string {
	var b strings.Builder
	b.WriteString("known down since ")
	b.WriteString(e.since.Format("15:04:05.000"))
	if ago := e.ago.Round(time.Millisecond); ago > 0 { // not "(0s ago)"
		b.WriteString(" (")
		b.WriteString(ago.String())
		b.WriteString(" ago)")
	}
	b.WriteString(", not tried: ")
	if e.why != "" {
		b.WriteString(e.why)
		b.WriteString(": ")
	}
	b.WriteString(trimPrefix(e.cause.Error()))
	return b.String()
}

// timeout reports whether the master was known down for not answering.
func (e *notTriedError) timeout() bool {
	var ne net.Error
	return errors.Is(e.cause, context.DeadlineExceeded) || errors.Is(e.cause, ErrMasterTimeout) ||
		(errors.As(e.cause, &ne) && ne.Timeout())
}

// Is matches ErrMasterTimeout for a master down for not answering.
func (e *notTriedError) Is(target error) bool { return target == ErrMasterTimeout && e.timeout() }

// Unwrap returns the failure that made the master down, unless that was
// a timeout: context.DeadlineExceeded must match only the caller's own
// context's end.
func (e *notTriedError) Unwrap() error {
	if e.timeout() {
		return nil
	}
	return e.cause
}

// errPanic is matched by the error of a master whose reply made the reply
// parser panic (only on pools that package pool did not make).
var errPanic = fault.ErrPanic

// ErrPanic is matched by the error of a master whose reply made the reply
// parser panic.
//
// Deprecated: a failed master's error is a *NodeError whatever failed it;
// match that. ErrPanic is removed in the next minor release.
var ErrPanic = errPanic

// redact removes the credentials the master's pool knows of from err's
// text (pool.Redactor); other pools' errors are returned as they are.
func (m *master) redact(err error) error {
	if r, ok := m.t.(interface{ RedactError(error) error }); ok { // pool.Redactor
		return r.RedactError(err)
	}
	return err
}

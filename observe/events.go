package observe

import "time"

// Lock kinds, as events name them (the Kind of an event).
const (
	KindPlain     = "plain"
	KindFair      = "fair"
	KindFenced    = "fenced"
	KindFairFence = "fair-fenced"
	KindReentrant = "reentrant"
	KindRead      = "read"
	KindWrite     = "write"
	KindMulti     = "multi"
	// KindSemaphore names a semaphore's permits (Client.NewSemaphore).
	KindSemaphore = "semaphore"
)

// AcquireOutcome is how an acquisition ended.
type AcquireOutcome string

const (
	// AcquireAcquired means the lock was taken.
	AcquireAcquired AcquireOutcome = "acquired"
	// AcquireContended means masters answered that another holder has it, so
	// no quorum was possible (until the wait bound).
	AcquireContended AcquireOutcome = "contended"
	// AcquireFailedMasters means so many masters failed or did not answer in
	// time that no quorum was possible.
	AcquireFailedMasters AcquireOutcome = "failed_masters"
	// AcquireTooLate means a quorum granted it, but so late that no validity
	// was left (it was rolled back).
	AcquireTooLate AcquireOutcome = "too_late"
	// AcquireCancelled means the caller's ctx ended before the answers decided.
	AcquireCancelled AcquireOutcome = "cancelled"
	// AcquireClosed means the client was closed.
	AcquireClosed AcquireOutcome = "closed"
)

// Answer is one master's answer in a round.
type Answer string

const (
	// AnswerOK is a grant, an extension or a release.
	AnswerOK Answer = "ok"
	// AnswerRefused is a refusal: held by another holder (an acquisition), or not
	// held by this token (extension, release).
	AnswerRefused Answer = "refused"
	// AnswerFailed is an error, or no answer within the per-master timeout.
	AnswerFailed Answer = "failed"
	// AnswerPending means no answer yet when the event was built, just after
	// the round was decided (the quorum was reached, or made impossible,
	// without it).
	AnswerPending Answer = "pending"
	// AnswerNotAsked means the master was not asked. A waiter woken by a
	// release asks one master first (the round's pilot) and the others
	// only once it granted; when it did not, they are not asked.
	AnswerNotAsked Answer = "not asked"
)

// MasterResult is one master's answer in the round an event reports.
type MasterResult struct {
	Index   int           // the master's position in the Client's list of masters
	Addr    string        // its address, never with credentials
	Answer  Answer        // AnswerPending when it had not answered yet
	Latency time.Duration // from the round's start to the answer (0 when pending or not asked)
	At      time.Time     // when it answered (the zero time when pending or not asked)
	Err     error         // the *redlock.NodeError of a failed master
}

// AcquireEvent is an acquisition's end.
type AcquireEvent struct {
	Key      string
	Kind     string // KindPlain, KindFair, ...
	Outcome  AcquireOutcome
	Attempts int           // attempts made (1 for TryAcquire)
	Start    time.Time     // when the call started, on the client's clock
	Wait     time.Duration // from the call to its result
	Masters  []MasterResult
	Err      error // nil when acquired
	// LastStart is when the last attempt's round started (wall clock),
	// the time the Masters' latencies count from.
	LastStart time.Time
	Quorum    int
	// ID names the lock acquired in the events of its extensions, release
	// and loss: a number unique among the locks of the process (0 when
	// none was acquired).
	ID uint64
	// Until is the end of the lock's validity, as redlock.Lock.Until
	// returns it (the zero time when none was acquired), and Validity the
	// validity left when the event was built, on the client's clock: an
	// observer counting the locks whose validity has not ended adds
	// Validity to its own clock's now, which a lock that is never
	// released or extended (its holder stopped) reaches without any
	// further event.
	Until    time.Time
	Validity time.Duration
}

// ExtendOutcome is how an extension ended.
type ExtendOutcome string

// The ways an extension ends.
const (
	ExtendExtended    ExtendOutcome = "extended"     // a quorum extended it in time
	ExtendNotExtended ExtendOutcome = "not_extended" // too few answered; still valid (redlock.ErrNotExtended)
	ExtendLost        ExtendOutcome = "lost"         // lost (redlock.ErrLockLost)
	ExtendNotHeld     ExtendOutcome = "not_held"     // released meanwhile (redlock.ErrNotHeld)
	ExtendFailed      ExtendOutcome = "failed"       // the client was closed, or ctx invalid
)

// ExtendEvent is an extension's end.
type ExtendEvent struct {
	Key      string
	Kind     string
	Outcome  ExtendOutcome
	Start    time.Time // on the client's clock
	Duration time.Duration
	TTL      time.Duration // the requested TTL
	Masters  []MasterResult
	Err      error
	Quorum   int
	// ID is the lock's, as AcquireEvent.ID.
	ID uint64
	// Until is the end of the lock's validity after the extension, as
	// redlock.Lock.Until returns it, and Validity the validity left then
	// (≤ 0 when the lock was lost or released): later when it was
	// extended, possibly earlier when it was not (ExtendNotExtended; see
	// redlock.Lock.Extend).
	Until    time.Time
	Validity time.Duration
}

// ReleaseOutcome is how a release ended.
type ReleaseOutcome string

// The ways a release ends.
const (
	ReleaseReleased    ReleaseOutcome = "released"     // a quorum is known free of its token (deleted, or never held there)
	ReleaseNotHeld     ReleaseOutcome = "not_held"     // no longer held: too many masters without it, or validity over (redlock.ErrNotHeld)
	ReleaseNotReleased ReleaseOutcome = "not_released" // too few answered to tell (redlock.ErrNotReleased)
	ReleaseFailed      ReleaseOutcome = "failed"       // nothing was sent (the client was closed)
)

// ReleaseEvent is a release's end.
type ReleaseEvent struct {
	Key      string
	Kind     string
	Outcome  ReleaseOutcome
	Start    time.Time     // on the client's clock
	Duration time.Duration // of the release round
	// Held is how long the lock was held: from the start of its
	// acquisition's successful attempt to this release.
	Held time.Duration
	// WasLost: the lock had been lost before (OnLoss reported it), so
	// this release did not end a held lock.
	WasLost bool
	Masters []MasterResult
	Err     error
	Quorum  int
	// ID is the lock's, as AcquireEvent.ID.
	ID uint64
}

// LossCause says why a lock was lost.
type LossCause string

const (
	// LossExpired means its validity ran out (not extended in time).
	LossExpired LossCause = "expired"
	// LossNotHeld means an extension found too many masters no longer holding
	// its token.
	LossNotHeld LossCause = "not_held"
	// LossNotExtended means the watchdog's extensions reached no quorum, retried
	// and gave up before the validity ran out.
	LossNotExtended LossCause = "not_extended"
	// LossMaxHold means it was held for its maximum hold time
	// (redlock.WithMaxHold).
	LossMaxHold LossCause = "max_hold"
	// LossClosed means its client was closed.
	LossClosed LossCause = "closed"
)

// LossEvent is a held lock lost.
type LossEvent struct {
	Key   string
	Kind  string
	Cause LossCause
	Held  time.Duration // from its acquisition to the loss
	Err   error         // what redlock.Lock.Err returns
	ID    uint64        // the lock's, as AcquireEvent.ID
}

// MasterAnswer is one master's answer to one command.
type MasterAnswer struct {
	Index   int
	Addr    string
	Op      string // "acquire", "extend", "release", "rollback", "leave queue", "commit fence"
	Answer  Answer
	Latency time.Duration // from the round's start
	Err     error         // the *redlock.NodeError of a failure
}

// MasterHealth is whether a master answers.
type MasterHealth string

// A master's states.
const (
	MasterUp      MasterHealth = "up"      // it answers (refusals count as answers)
	MasterFailing MasterHealth = "failing" // its last command failed
)

// MasterStateEvent is a master's change of state.
type MasterStateEvent struct {
	Index int
	Addr  string
	State MasterHealth
	// Err is the failure that turned it failing (nil when up).
	Err error
	// Failures is, when it turns up, how many commands failed while it
	// was failing (the first one included).
	Failures int64
	// Since is how long it was in the previous state (0 for its first
	// failure after the client started).
	Since time.Duration
}

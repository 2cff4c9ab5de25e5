package redlock

import "github.com/quorumlock/quorumlock/observe"

// The observer's names moved to package observe. These aliases keep code
// written against the old names building for one minor release.

// Observer receives what a Client does, for metrics and traces.
//
// Deprecated: use observe.Observer.
type Observer = observe.Observer

// NopObserver is an Observer that does nothing.
//
// Deprecated: use observe.NopObserver.
type NopObserver = observe.NopObserver

// AcquireEvent is an acquisition's end.
//
// Deprecated: use observe.AcquireEvent.
type AcquireEvent = observe.AcquireEvent

// ExtendEvent is an extension's end.
//
// Deprecated: use observe.ExtendEvent.
type ExtendEvent = observe.ExtendEvent

// ReleaseEvent is a release's end.
//
// Deprecated: use observe.ReleaseEvent.
type ReleaseEvent = observe.ReleaseEvent

// LossEvent is a held lock lost.
//
// Deprecated: use observe.LossEvent.
type LossEvent = observe.LossEvent

// MasterAnswer is one master's answer to one command.
//
// Deprecated: use observe.MasterAnswer.
type MasterAnswer = observe.MasterAnswer

// MasterResult is one master's answer in the round an event reports.
//
// Deprecated: use observe.MasterResult.
type MasterResult = observe.MasterResult

// MasterStateEvent is a master's change of state.
//
// Deprecated: use observe.MasterStateEvent.
type MasterStateEvent = observe.MasterStateEvent

// MasterHealth is whether a master answers.
//
// Deprecated: use observe.MasterHealth.
type MasterHealth = observe.MasterHealth

// Answer is one master's answer in a round.
//
// Deprecated: use observe.Answer.
type Answer = observe.Answer

// AcquireOutcome is how an acquisition ended.
//
// Deprecated: use observe.AcquireOutcome.
type AcquireOutcome = observe.AcquireOutcome

// ExtendOutcome is how an extension ended.
//
// Deprecated: use observe.ExtendOutcome.
type ExtendOutcome = observe.ExtendOutcome

// ReleaseOutcome is how a release ended.
//
// Deprecated: use observe.ReleaseOutcome.
type ReleaseOutcome = observe.ReleaseOutcome

// LossCause says why a lock was lost.
//
// Deprecated: use observe.LossCause.
type LossCause = observe.LossCause

// The ways an acquisition ends.
const (
	// AcquireAcquired is observe.AcquireAcquired.
	//
	// Deprecated: use observe.AcquireAcquired.
	AcquireAcquired = observe.AcquireAcquired

	// AcquireContended is observe.AcquireContended.
	//
	// Deprecated: use observe.AcquireContended.
	AcquireContended = observe.AcquireContended

	// AcquireFailedMasters is observe.AcquireFailedMasters.
	//
	// Deprecated: use observe.AcquireFailedMasters.
	AcquireFailedMasters = observe.AcquireFailedMasters

	// AcquireTooLate is observe.AcquireTooLate.
	//
	// Deprecated: use observe.AcquireTooLate.
	AcquireTooLate = observe.AcquireTooLate

	// AcquireCancelled is observe.AcquireCancelled.
	//
	// Deprecated: use observe.AcquireCancelled.
	AcquireCancelled = observe.AcquireCancelled

	// AcquireClosed is observe.AcquireClosed.
	//
	// Deprecated: use observe.AcquireClosed.
	AcquireClosed = observe.AcquireClosed
)

// A master's answers in a round.
const (
	// AnswerOK is observe.AnswerOK.
	//
	// Deprecated: use observe.AnswerOK.
	AnswerOK = observe.AnswerOK

	// AnswerRefused is observe.AnswerRefused.
	//
	// Deprecated: use observe.AnswerRefused.
	AnswerRefused = observe.AnswerRefused

	// AnswerFailed is observe.AnswerFailed.
	//
	// Deprecated: use observe.AnswerFailed.
	AnswerFailed = observe.AnswerFailed

	// AnswerPending is observe.AnswerPending.
	//
	// Deprecated: use observe.AnswerPending.
	AnswerPending = observe.AnswerPending

	// AnswerNotAsked is observe.AnswerNotAsked.
	//
	// Deprecated: use observe.AnswerNotAsked.
	AnswerNotAsked = observe.AnswerNotAsked
)

// The ways an extension ends.
const (
	// ExtendExtended is observe.ExtendExtended.
	//
	// Deprecated: use observe.ExtendExtended.
	ExtendExtended = observe.ExtendExtended

	// ExtendNotExtended is observe.ExtendNotExtended.
	//
	// Deprecated: use observe.ExtendNotExtended.
	ExtendNotExtended = observe.ExtendNotExtended

	// ExtendLost is observe.ExtendLost.
	//
	// Deprecated: use observe.ExtendLost.
	ExtendLost = observe.ExtendLost

	// ExtendNotHeld is observe.ExtendNotHeld.
	//
	// Deprecated: use observe.ExtendNotHeld.
	ExtendNotHeld = observe.ExtendNotHeld

	// ExtendFailed is observe.ExtendFailed.
	//
	// Deprecated: use observe.ExtendFailed.
	ExtendFailed = observe.ExtendFailed
)

// The ways a release ends.
const (
	// ReleaseReleased is observe.ReleaseReleased.
	//
	// Deprecated: use observe.ReleaseReleased.
	ReleaseReleased = observe.ReleaseReleased

	// ReleaseNotHeld is observe.ReleaseNotHeld.
	//
	// Deprecated: use observe.ReleaseNotHeld.
	ReleaseNotHeld = observe.ReleaseNotHeld

	// ReleaseNotReleased is observe.ReleaseNotReleased.
	//
	// Deprecated: use observe.ReleaseNotReleased.
	ReleaseNotReleased = observe.ReleaseNotReleased

	// ReleaseFailed is observe.ReleaseFailed.
	//
	// Deprecated: use observe.ReleaseFailed.
	ReleaseFailed = observe.ReleaseFailed
)

// The causes of a lock's loss.
const (
	// LossExpired is observe.LossExpired.
	//
	// Deprecated: use observe.LossExpired.
	LossExpired = observe.LossExpired

	// LossNotHeld is observe.LossNotHeld.
	//
	// Deprecated: use observe.LossNotHeld.
	LossNotHeld = observe.LossNotHeld

	// LossNotExtended is observe.LossNotExtended.
	//
	// Deprecated: use observe.LossNotExtended.
	LossNotExtended = observe.LossNotExtended

	// LossMaxHold is observe.LossMaxHold.
	//
	// Deprecated: use observe.LossMaxHold.
	LossMaxHold = observe.LossMaxHold

	// LossClosed is observe.LossClosed.
	//
	// Deprecated: use observe.LossClosed.
	LossClosed = observe.LossClosed
)

// A master's states.
const (
	// MasterUp is observe.MasterUp.
	//
	// Deprecated: use observe.MasterUp.
	MasterUp = observe.MasterUp

	// MasterFailing is observe.MasterFailing.
	//
	// Deprecated: use observe.MasterFailing.
	MasterFailing = observe.MasterFailing
)

// Lock kinds, as events name them.
const (
	// KindPlain is observe.KindPlain.
	//
	// Deprecated: use observe.KindPlain.
	KindPlain = observe.KindPlain

	// KindFair is observe.KindFair.
	//
	// Deprecated: use observe.KindFair.
	KindFair = observe.KindFair

	// KindFenced is observe.KindFenced.
	//
	// Deprecated: use observe.KindFenced.
	KindFenced = observe.KindFenced

	// KindFairFence is observe.KindFairFence.
	//
	// Deprecated: use observe.KindFairFence.
	KindFairFence = observe.KindFairFence

	// KindReentrant is observe.KindReentrant.
	//
	// Deprecated: use observe.KindReentrant.
	KindReentrant = observe.KindReentrant

	// KindRead is observe.KindRead.
	//
	// Deprecated: use observe.KindRead.
	KindRead = observe.KindRead

	// KindWrite is observe.KindWrite.
	//
	// Deprecated: use observe.KindWrite.
	KindWrite = observe.KindWrite

	// KindMulti is observe.KindMulti.
	//
	// Deprecated: use observe.KindMulti.
	KindMulti = observe.KindMulti

	// KindSemaphore is observe.KindSemaphore.
	//
	// Deprecated: use observe.KindSemaphore.
	KindSemaphore = observe.KindSemaphore
)

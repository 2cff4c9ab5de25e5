package observe

import "context"

// Observer receives what a redlock.Client does, for metrics and traces
// (redlock.WithObserver). Its methods are called synchronously, possibly
// concurrently, on the goroutine that decided the outcome, whose work
// waits for them: they must be quick and must not block (OnExtend and
// OnRelease run with the lock's operations held, so they must not call
// its Extend or Release). Events and their slices are valid only during
// the call; ctx is the operation's caller's (context.Background() for a
// watchdog or a background retry). A panic in a method is recovered and
// logged (redlock.WithLogger). Embed NopObserver so that methods added to
// this interface later have a default.
type Observer interface {
	// OnAcquire reports the end of an acquisition (Client.Acquire,
	// TryAcquire, Do, AcquireRead, AcquireWrite, AcquireMulti, and a Reentrant's
	// first hold), successful or not.
	OnAcquire(ctx context.Context, e AcquireEvent)
	// OnExtend reports the end of a call of Lock.Extend (also the
	// watchdog's, redlock.WithAutoExtend), and of a Reentrant taken again
	// by its owner, which renews the TTL as an extension does (Kind
	// "reentrant"; ExtendNotExtended when no quorum confirmed it in time,
	// Err then matching redlock.ErrNotAcquired).
	OnExtend(ctx context.Context, e ExtendEvent)
	// OnRelease reports the end of a call of Lock.Release that sent a
	// release (not a second Release of the same lock).
	OnRelease(ctx context.Context, e ReleaseEvent)
	// OnLoss reports a held lock lost (once per lock; not a release).
	OnLoss(ctx context.Context, e LossEvent)
	// OnMasterAnswer reports one master's answer to one command of a
	// round (or its failure), also answers that come after the round was
	// decided. It runs on the transport's goroutine: keep it short.
	OnMasterAnswer(ctx context.Context, e MasterAnswer)
	// OnMasterState reports a master turning failing or up again.
	OnMasterState(ctx context.Context, e MasterStateEvent)
}

// NopObserver is an Observer that does nothing: embed it in an Observer
// to implement only some of its methods.
type NopObserver struct{}

// OnAcquire does nothing.
func (NopObserver) OnAcquire(context.Context, AcquireEvent) {}

// OnExtend does nothing.
func (NopObserver) OnExtend(context.Context, ExtendEvent) {}

// OnRelease does nothing.
func (NopObserver) OnRelease(context.Context, ReleaseEvent) {}

// OnLoss does nothing.
func (NopObserver) OnLoss(context.Context, LossEvent) {}

// OnMasterAnswer does nothing.
func (NopObserver) OnMasterAnswer(context.Context, MasterAnswer) {}

// OnMasterState does nothing.
func (NopObserver) OnMasterState(context.Context, MasterStateEvent) {}

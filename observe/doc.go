// Package observe is what a redlock.Client reports to an observer, for
// metrics and traces: the Observer interface, which redlock.WithObserver
// takes, and the events it receives — the end of each acquisition,
// extension and release of a lock, a lock's loss, each master's answer
// and a master's change of state — with the outcomes, answers and lock
// kinds they carry.
//
// Most programs never use it: the OpenTelemetry observer of the nested
// module github.com/quorumlock/quorumlock/otel implements Observer. A
// program that writes its own embeds NopObserver and implements the
// methods it needs.
//
// The package holds types only; the client decides where each event is
// built. It imports nothing of this module, so that redlock imports it and
// not the other way round. An event's Err is the client's error, matched
// with the redlock package's errors (errors.Is(e.Err,
// redlock.ErrNotAcquired), errors.As to a *redlock.QuorumError).
package observe

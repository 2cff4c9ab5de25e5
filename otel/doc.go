// Package otel reports what a quorumlock client does to OpenTelemetry:
// metrics and traces, through the observe.Observer seam of the core module
// (which itself depends on no OpenTelemetry package).
//
//	obs, err := otel.New(otel.WithMeterProvider(mp), otel.WithTracerProvider(tp))
//	…
//	c, err := redigo.NewFromAddrs(addrs, redlock.WithObserver(obs))
//
// Metrics (instrumentation scope github.com/quorumlock/quorumlock/otel):
//
//	quorumlock.acquire.duration   histogram, s       an acquisition's wait, by outcome and kind
//	quorumlock.acquire.attempts   histogram, {attempt} attempts per acquisition, by outcome and kind
//	quorumlock.locks.active       observable up-down counter, {lock} locks held now (validity not ended), by kind
//	quorumlock.lock.hold.duration histogram, s       from acquisition to release, by kind
//	quorumlock.extensions         counter, {extension} extensions, by outcome and kind
//	quorumlock.releases           counter, {release} releases, by outcome and kind
//	quorumlock.losses             counter, {loss}    locks lost, by cause and kind
//	quorumlock.master.duration    histogram, s       each master's answer time, by master, operation and answer
//	quorumlock.master.errors      counter, {error}   each master's failed commands, by master, operation and error.type
//	quorumlock.master.failing     gauge              1 while a master is failing, else 0 (series appear at its first failure)
//
// A semaphore (redlock.Client.NewSemaphore) is kind "semaphore": one
// acquisition per Acquire or TryAcquire call (its wait and the slots it
// tried as attempts, not one per slot), and each permit as a lock in the
// active count, the hold time, extensions, releases and losses.
//
// Attributes follow OpenTelemetry's conventions where one exists
// (server.address, server.port, error.type) and are named
// quorumlock.* otherwise: quorumlock.lock.kind, quorumlock.acquire.outcome,
// quorumlock.extend.outcome, quorumlock.release.outcome,
// quorumlock.loss.cause, quorumlock.master.index, quorumlock.operation,
// quorumlock.master.answer, and quorumlock.lock.key only with
// WithKeyAttribute (a key per lock would make too many series).
//
// Traces: a span per acquisition ("quorumlock acquire"), extension
// ("quorumlock extend") and release ("quorumlock release"), a child of the
// span in the caller's context, with an event per master answer of the
// round that decided it ("master answer", at the moment it answered; a
// master that had not answered when the round was decided is listed as
// pending at the span's end). A lost lock and a master's change of state
// are added as events to the span in the context of the call that found
// them, if any.
//
// docs/operations.md shows the wiring to a Prometheus exporter, the
// queries and alerts that matter, and a trace.
package otel

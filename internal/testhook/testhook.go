// Package testhook reaches settings of package redlock that only tests
// change, for the tests of the other modules of this repository (goredis,
// otel, ...), which cannot see redlock's export_test.go. It is internal:
// no user can import it.
//
// Package redlock sets the hooks when it is initialised; a test that
// imports redlock finds them set.
package testhook

// WithClock is redlock's option that replaces a Client's clock, a
// func(clock.Clock) redlock.Option (package testhook cannot name
// redlock's types: redlock imports it). Tests call it through a helper of
// their own:
//
//	func withClock(c clock.Clock) redlock.Option {
//		return testhook.WithClock.(func(clock.Clock) redlock.Option)(c)
//	}
var WithClock any

// WithJitter is redlock's option that draws a Client's random delays
// (backoff, the spread of woken waiters, the retries of missed releases)
// and a semaphore's first slot from a seeded source, a
// func(rand.Source) redlock.Option (math/rand/v2), so that a simulation
// replays from its seed.
var WithJitter any

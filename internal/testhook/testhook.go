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

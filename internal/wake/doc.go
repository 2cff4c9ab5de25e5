// Package wake decides which of a Client's waiters a release wakes, and
// which master a woken waiter asks first: the rules of docs/design.md,
// "Waiting without polling", "Woken waiters ask one master first" and
// "Fair mode", as data in and a decision out.
//
// Decide and Leave are pure: they read a key's waiters and what a notice
// or a leaving waiter says, and return whom to wake, with no goroutine, no
// clock and no I/O; so is Pilot, the choice of the master asked first.
// Releases counts each release's notices across the masters; Queue keeps
// one key's waiters in their order and applies the decisions to them;
// Table holds a client's queues by key, the keys that linger after their
// last waiter left, and the generation a new waiter compares to find out
// whether a release may have gone unheard. None of it is safe for
// concurrent use: the Client's waker holds its own lock around every
// call, and keeps the subscriptions that bring the notices, the clock and
// the masters' health.
package wake

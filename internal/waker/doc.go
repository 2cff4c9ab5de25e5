// Package waker keeps a Client's waiters and the subscriptions that bring
// them release notices: per master, one subscriber goroutine that keeps
// the master's release channels equal to the keys waited for; the
// registration of a waiter and the mark that tells it whether a release
// may have gone unheard; the fallback poll; and the pause of a waiter
// between two attempts, with the delay a woken waiter waits before it
// asks a key's pilot (docs/design.md, "Waiting without polling").
//
// Whom a notice wakes is package internal/wake's decision, which is pure:
// this package holds the lock around it, the goroutines, the timers and
// the subscriptions. It reaches the masters only through
// transport.Subscription and its Client only through Host, so it knows
// nothing of rounds, lock kinds or errors beyond what Host says; it must
// not import the core package.
package waker

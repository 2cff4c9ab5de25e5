// Package rueidis plugs rueidis clients (github.com/redis/rueidis) into
// quorumlock: a transport.Transport per master over a rueidis.Client the
// caller already has (its dialer, TLS, credentials, connections and hooks
// stay as they are). It lives in a module of its own, so the core module
// never depends on rueidis. The package valkey of the module
// github.com/quorumlock/quorumlock/valkey is the same code for valkey-go,
// generated from this one.
//
// New takes one client per independent master and returns a
// redlock.Client (it makes a Transport per client with NewTransport and
// hands them to redlock.NewWithTransports); the Client then works as with
// redigo pools: every lock kind and option, waiters woken by the masters'
// release notices, Inspect, the masters' identity check (INFO's run_id).
//
// # Commands
//
// A Transport sends a master's lock commands through one writer goroutine
// that runs them in batches with DoMulti, one batch after the other, so
// they reach the master in the order they were sent (Ordered, for a
// client of one master) and batches grow by themselves under load, on
// rueidis's auto-pipelined connection. Hooks wrapped around the client
// (rueidishook.WithHook) see every command, including the SCRIPT LOAD
// sent ahead of a script's first EVALSHA. rueidis never retries them: it
// retries only commands tagged read-only or retryable, and the lock's are
// built untagged; the transport re-sends a command once, in order, only
// when the master closed the connection and the lock allows it.
//
// Each command fails at its deadline when it is still queued; a batch in
// flight is given up, with every command of it, lateBound (its commands'
// own timeout, at least a second) past the latest deadline in it (see
// lane.go). Replies are checked strictly against what the lock's command
// can answer; anything else fails the command and is never a vote.
//
// # Release notices
//
// Subscribe takes a connection of the client's own (Dedicate) and follows
// its pub/sub messages with SetPubSubHooks. A channel is live once the
// master acknowledged it. The subscription ends when the connection does
// (Done), and the redlock.Client subscribes again and polls until then.
//
// # Lifetime
//
// Close stops the transport's goroutines and fails what is pending with
// errors matching redlock.ErrClosed; the redlock.Client calls it from its
// own Close. The rueidis clients stay open: they are the caller's.
package rueidis

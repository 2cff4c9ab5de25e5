// Package goredis plugs go-redis v9 clients into quorumlock: a
// transport.Transport per master over a redis.UniversalClient the caller
// already has (its dialer, TLS, credentials, pool, hooks and
// instrumentation stay as they are). It lives in a module of its own, so
// the core module never depends on go-redis.
//
// New takes one client per independent master and returns a
// redlock.Client (it makes a Transport per client with NewTransport and
// hands them to redlock.NewWithTransports); the Client then works as with
// redigo pools: every lock kind and option, waiters woken by the masters'
// release notices.
//
// # Commands
//
// A Transport sends a master's lock commands through one writer goroutine
// that runs them in batches with Pipelined, one batch after the other, so
// they reach the master in the order they were sent (Ordered, for a
// *redis.Client) and batches grow by themselves under load. go-redis
// hooks see every command (ProcessPipelineHook), including the SCRIPT
// LOAD sent ahead of a script's first EVALSHA. go-redis never retries
// them (they are marked NoRetry: a pipeline re-run after it was half read
// would run commands twice); the transport re-sends a command once, in
// order, only when the master closed the connection and the lock allows
// it.
//
// Each command ends at its deadline (the redlock.Client gives each one: a
// per-master timeout from its send; a command that comes without one, the
// client's ReadTimeout) or, once sent, when the master has kept its batch
// waiting that long (a command sent late, behind a batch the master
// answered late, is not failed while the master answers its own), pushed
// back by the longest time this process was seen not to run meanwhile (a
// stall: a busy machine, SIGSTOP; the replies may wait in the socket), but
// never more than its own timeout, at least a second, past its deadline. A
// batch stuck on a master that does not answer holds the writer until
// go-redis gives up on it: the client's ReadTimeout, or the batch's
// context when Options.ContextTimeoutEnabled is set. Commands queued meanwhile fail at
// their deadlines without being sent. Keep ReadTimeout finite.
//
// Replies are checked strictly against what the lock's command can
// answer; anything else fails the command and is never a vote. go-redis
// does not tell a status reply from a bulk string, and it cannot be asked
// to close one particular connection: a connection left with unread
// bytes is dropped by go-redis's own pool checks.
//
// # Release notices
//
// Subscribe opens a go-redis PubSub (a connection of its own). A channel
// is live once the master acknowledged it. go-redis would reconnect a
// broken PubSub silently and lose the notices sent meanwhile; the
// transport instead ends the subscription at the first error (Done), so
// the redlock.Client subscribes again and polls until then. Pub/sub
// commands do not pass through go-redis hooks.
//
// # Lifetime
//
// Close stops the transport's goroutines and fails what is pending with
// errors matching redlock.ErrClosed; the redlock.Client calls it from its
// own Close. The go-redis clients stay open: they are the caller's.
package goredis

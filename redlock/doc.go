// Package redlock implements the Redlock distributed lock over N
// independent Redis masters.
//
// To acquire, a Client sends SET key token NX PX ttl to every master in
// parallel, each command bounded by a short per-master timeout, and decides
// as soon as the outcome is known: a quorum of N/2+1 masters granted the
// lock, or so many refused or failed that no quorum is possible. The lock
// is valid for its TTL less the time the attempt took and an allowance for
// clock drift; it is granted only with a quorum and validity left. A failed
// attempt is undone on every master, even when the caller's context has
// ended. A single master is N=1 and runs through the same code.
//
// A Lock is released by a compare-and-delete script and extended by a
// compare-and-PEXPIRE script, each on all masters in parallel; only the
// holder of the random token can do either.
//
// # Lock kinds, waiting and fencing
//
// Besides the plain lock (Client.Acquire, TryAcquire, Do), a Client takes
// reentrant locks (Client.NewReentrant), read-write locks
// (Client.AcquireRead, Client.AcquireWrite) and several keys at once
// (Client.AcquireMulti), all on the same quorum. Waiters are woken by the
// release, not by polling; WithFair serves them in arrival order;
// WithAutoExtend keeps a lock alive and Lock.Lost says when it could not.
// WithFencing gives a lock a fencing token (Lock.Fence) that grows with
// every grant across the quorum, for the protected resource to check
// (package fence).
//
// # Connections
//
// Package redigo (github.com/quorumlock/quorumlock/redigo) makes a Client
// on redigo: redigo.New takes one pool per master (package pool; a
// *redis.Pool of one's own fits as is) and redigo.NewFromAddrs makes
// them. By default such a Client carries the commands of all its
// goroutines to a master over one pipelined connection, dialed outside the
// pool by the pool's Dial (pool.Dialer) or a *redis.Pool's DialContext or
// Dial, with the caller's dial settings. With redigo.WithPipelining(false),
// or a pool that cannot dial, each command borrows a pooled connection.
//
// Both are Transports: the Client reaches every master through that
// interface, which moves commands and release notices and decides
// nothing about the lock. NewWithTransports takes transports of any kind,
// such as the go-redis adapter of the nested module goredis.
//
// # Errors
//
// Failures are reported by errors matching the sentinels (ErrNotAcquired,
// ErrLockLost, ErrNotExtended, ErrNotHeld, ErrNotReleased, ErrInvalid,
// ErrClosed) with errors.Is. A *QuorumError tells what each master
// answered, and carries each master's failure as a *NodeError, reachable
// with errors.As. Errors name masters by address, never by credentials.
//
// # Safety
//
// Redlock's mutual exclusion rests on assumptions: the masters are
// independent, keep their keys across restarts (AOF with appendfsync
// always, or a restart delayed beyond the longest TTL) and never evict
// them (maxmemory-policy noeviction); clocks run at nearly the same rate;
// and a holder finishes its work within the lock's validity. See docs/ in
// the repository for what that does and does not guarantee.
package redlock

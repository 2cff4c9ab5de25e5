// Package election is leader election on a quorumlock Client, built on
// the lock's public API alone, as etcd's concurrency package is built
// on its client.
//
// An Election is a fenced, auto-extended plain lock on one key, nothing
// beside it: to campaign is to wait for the lock (woken by the release,
// as every waiter is); the leader is its holder, and the leader's value is
// the lock's holder metadata (redlock.WithMetadata). The leader's term is
// the lock's fencing token (redlock.WithFencing): it grows with every
// grant across the quorum, so a storage that refuses a term lower than the
// highest it has seen (package fence) refuses the writes of a deposed
// leader, even one that was paused and does not know it was deposed.
// Leadership ends when the lock is released (Resign: the next candidate is
// woken at once) or lost (Lost: its watchdog could not extend it; a leader
// that froze or exited loses the key at its TTL and a candidate takes it
// then).
//
// A campaign's lock records its term beside its holder
// (redlock.WithHolderFence), in the same script step that commits the
// fencing token. Leader reads every master's holder, its recorded term and
// its value in one script step each (redlock.Client.InspectHolder), and
// the leader is the token that a quorum of masters holds with the same
// term recorded: that token's acquisition chose the term and committed it
// to a quorum. The fencing counter alone is never read for the term: it
// is raised a round trip after the grant, and read beside the new holder
// it gave the old holder's term (docs/design.md, "Reading an election's
// leader"). Observe reads Leader again and again.
package election

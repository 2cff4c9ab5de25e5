// Package finish is a Client's retry scheduler for the releases and
// rollbacks that a master did not confirm (docs/design.md, "Finishing
// what a master missed"): the Finisher, which queues each retry, holds a
// master's retries back while that master fails, and sends them through
// its Host on one goroutine of its own; and Round, a round's share of
// that state, which the owner's next round marks superseded.
//
// It decides when a retry is sent, and whether it still may be; never
// what it sends or what its reply means. A Job builds each retry's
// command and reads its reply (it knows the lock's kinds and scripts),
// and the Host sends it (it knows the masters' transports). The package
// imports nothing of the core: only package transport, for the command
// and its completion, and internal/event.
//
// # Finishing releases and rollbacks that a master did not confirm
//
// A release, or the rollback of a failed attempt, that a master did not
// answer leaves the key there until its TTL — the caller's answer does not
// need that master, but the key blocks it for everyone. So the client
// sends such a command to that master again, in the background: a few
// times, with a backoff that grows to maxBackoff, until the master answers
// (yes or no: either way the key is no longer ours there), the key's TTL
// has passed since the master failed (it has expired by then), or the
// client closes. The caller's answer stays as it was.
//
// What "did not confirm" is, is the transport's to say: every command it
// completes with an error, and every release that never went out because
// the round before it on that master was still unanswered. Pipelined, a
// command waits on the master's one connection after its caller stopped
// waiting, and a late answer means it ran: only a command that failed for
// good — its connection broke (silence, a reply out of step, a second
// EOF), the redial failed, the queue was full, an error reply — fails.
// Pooled, every command that got no answer by its deadline fails (its
// connection is discarded).
//
// A compare-and-delete by token is idempotent, so a late copy is harmless
// — except for a reentrant owner, whose every hold uses the owner as its
// token: a retry of an old release that reached the master after the
// owner's next acquisition would delete the new hold. So every round of a
// reentrant owner supersedes the owner's previous rounds (see
// docs/design.md, "Finishing what a master missed"): their retries are
// dropped, and a retry is sent only under the gate that the next round
// passes before it sends anything, so a retry is either sent before that
// round (and reaches the master first: one connection, or chained) or not
// at all. Other holders' tokens are used by one attempt or one lock only,
// and their later rounds never touch them.
//
// A master whose latest retry failed gets one retry at a time, after a
// backoff of its own (the others wait for its outcome), so a master that
// is down or hung is not flooded with retries and dials; once it answers,
// the waiting ones go at once. At most defaultLimit retries wait per
// client; beyond that, new ones are refused with a log line (the key then
// expires at its TTL there), so that a master that is gone for long
// cannot make the client hoard work.
package finish

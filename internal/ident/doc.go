// Package ident tells a Client's masters apart by server: it asks each
// master for its run_id, finds two addresses of one server, and counts a
// round's grants one per distinct server (Gate).
//
// Two addresses, one server.
//
// The Client rejects a master given twice by the same address, but two
// different addresses can reach one server ("localhost:6379" and
// "127.0.0.1:6379", a DNS alias, a proxy): that master would then count
// twice toward a quorum, and two clients could both hold a lock. Only the
// server can tell: every Redis server has a run_id (INFO server), 40 hex
// digits drawn at start.
//
// The Client asks each master for it at first contact: the first call
// that would talk to the masters (an acquisition of any kind, a
// Reentrant's too, Do, Inspect, InspectHolder) starts a probe
// (Identity.Identify), INFO server sent to every master at once through
// its Transport (Host.Send, as the rounds' commands go: on the pipelined
// connection, the pooled one, the go-redis adapter alike), each bounded
// by the per-master timeout. The probe runs beside the call's first round
// rather than before it, so the two share one per-master timeout.
//
// Until a master is identified, its grant does not count: an acquisition
// or extension counts one vote per distinct run_id among the masters that
// granted (Gate), and a master whose probe has not answered counts for
// nothing. A round that started while the first probe ran does not
// succeed before that probe ended (at most the per-master timeout and
// ProbeGrace after it started), so that a list naming one server twice
// is refused on the first call. A probe's answer read after the probe
// stopped waiting is recorded all the same (a busy process reads late),
// and a grant whose master's INFO is still in flight waits for it within
// the round's own bound (the Client's awaitProbe). Once two masters name
// the same run_id, every call that talks to the masters fails at once
// with an error matching the Client's ErrInvalid that names both, and a
// round in flight fails with it and rolls back. A master that did not
// answer the probe is asked again in the background, at most once per
// identifyRetry (once per reprobeGranted after it granted); its grants
// count once it answered. A master whose ACL refuses INFO, or whose reply
// carries no well-formed run_id, is not asked again (an error reply that
// says "not now", BUSY say, is no answer: notNow): it cannot be told
// apart, and its grant counts as one vote of its own, as its address
// does. docs/design.md, "Counting distinct servers", gives the argument;
// docs/operations.md says why the check is made at first contact rather
// than in New.
//
// The package must not import redlock: what it needs of the Client comes
// through Host and Config, the error it reports wraps the sentinel it is
// given (Config.Invalid), and a round's grants reach it as plain
// per-master flags, not as redlock's tally. It holds no policy beyond
// identifying and counting: the rounds decide what a count means.
package ident

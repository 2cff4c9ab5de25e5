package redlock

import (
	"fmt"
	"math"
	"time"

	"github.com/quorumlock/quorumlock/internal/jitter"
	"github.com/quorumlock/quorumlock/internal/keys"
	"github.com/quorumlock/quorumlock/internal/scripts"
)

// Lock kinds. Every kind — plain, fair, reentrant, read, write, multi-key —
// is a type that implements kind: what each of its rounds sends (its
// script or command per phase: acquire, extend, release, rollback, and a
// waiter's leave), which token an attempt uses, which keys a waiter waits
// for, and what a waiter that gives up leaves behind. Everything else —
// the quorum, validity, the rollback of a failed attempt, extension,
// auto-extension, loss and wake-up — is the same machinery for all of
// them, which asks the kind and never switches on it. Each kind lives in
// one file with the calls that take it: this one (plain), fair.go,
// reentrant.go, rw.go (read and write) and multi.go.
//
// Fencing (WithFencing) is not a kind: it is a second phase of a plain or
// fair acquisition (the counters' commit, fence.go), carried by the round
// beside the kind.

// kind is one lock kind. A kind value belongs to one acquisition (and the
// rounds of the lock it returns) and is read-only once its first round
// has started: rounds read it from the goroutines of their legs.
type kind interface {
	// command appends what op sends to a master in round r (its key,
	// token, TTL and, for an acquisition, fencing) to dst: a script and
	// its keys and values, or a plain command and its arguments.
	// opCommit is the round's own (fence.go); opLeave is asked only of a
	// kind that leaves something.
	command(r *round, op opKind, dst []any) (script *scripts.Script, cmd string, args []any)
	// token returns an attempt's token.
	token(j *jitter.Rand) string
	// keys returns the keys the lock holds — the ones a waiter waits to
	// see released and Lock.Keys returns — given the lock's first key.
	keys(key string) []string
	// holder names the holder whose rounds must reach each master in the
	// order they are started across its attempts (chainID), or "" when
	// that holder is the attempt's token.
	holder() string
	// leaves reports whether a waiter that gives up leaves something to
	// take back with opLeave (a fair queue entry, a writer's intent).
	leaves() bool
	// shared reports whether others may hold the lock along with this
	// one (a reader): a waiter that gets it passes the wake-up on.
	shared() bool
	// queued reports whether waiters are served in order (only the
	// head of a queue can win), so that woken waiters need no spread.
	queued() bool
	// oneToken reports whether every hold of one owner has the same token
	// (a reentrant owner): each round supersedes the owner's previous
	// one, and none may run late.
	oneToken() bool
	// renews reports whether an acquisition may set the expiry of a hold
	// that exists (a reentrant owner's, a read-write hash's), so that a
	// late one may shorten a later extension: its expiry is tracked.
	renews() bool
	// partial reports whether a release leaves the lock held (a
	// reentrant owner giving back one of several holds): a master that
	// misses it is not sent it again.
	partial() bool
	// forRelease returns the kind a Lock's release sends, or nil when it
	// is this one.
	forRelease() kind
}

// attemptKind is a kind whose every acquisition attempt carries a value
// of its own beside the token (a reentrant hold's id): forAttempt returns
// a copy of the kind with a new one. Each attempt's round, and the Lock
// that the attempt returns, use that copy.
type attemptKind interface {
	forAttempt() kind
}

// kindForAttempt returns the kind an acquisition attempt of k uses: k
// itself unless k (or the kind inside its metadata) is an attemptKind.
func kindForAttempt(k kind) kind {
	inner := k
	if mk, ok := k.(*metaKind); ok {
		inner = mk.kind
	}
	if _, ok := inner.(attemptKind); !ok {
		return k
	}
	return mapKind(k, func(k kind) kind { return k.(attemptKind).forAttempt() })
}

// baseKind is what a kind is unless it says otherwise: a fresh random
// token per attempt, one key, nothing left behind, held alone.
type baseKind struct{}

func (baseKind) token(j *jitter.Rand) string { return j.UUID() }
func (baseKind) keys(key string) []string    { return []string{key} }
func (baseKind) holder() string              { return "" }
func (baseKind) leaves() bool                { return false }
func (baseKind) shared() bool                { return false }
func (baseKind) queued() bool                { return false }
func (baseKind) oneToken() bool              { return false }
func (baseKind) renews() bool                { return false }
func (baseKind) partial() bool               { return false }
func (baseKind) forRelease() kind            { return nil }

// plainKind is the plain lock (Client.Acquire without WithFair): SET NX
// PX, or with WithFencing the fenced acquisition's script. Once its first
// attempt was refused (waiting), an attempt without fencing sends SET NX
// PX as the wait_acquire script instead, whose refusal says how long the
// holder's key has left (round.freeIn).
type plainKind struct {
	baseKind
	waiting bool
	// handOver: the key has a line of waiters (Client.handOver): a
	// release hands the key over to the one first in line that has
	// waited handOverAge, and a rollback announces such a hand-over.
	handOver bool
	// line is the waiter's ID in the key's line once its first attempt
	// was refused (with handOver), and entryMS how long its entry lasts
	// without a new attempt; a Lock it acquires takes the entry out of
	// the line as it is released, wherever a master kept it.
	line    string
	entryMS int64
	// arrival orders the line on every master alike (Client.arrival).
	arrival int64
}

// A plain lock's line (handOver).
const (
	// handOverAge is how long the waiter first in line has waited before
	// a release hands the key over to it rather than free it, and the
	// least time between two hand-overs of a key: until then the
	// releaser, or anyone, may take the key straight back. Under steady
	// contention a key changes hands by hand-over every handOverAge, and
	// is taken back by its holder in between.
	handOverAge = 10 * time.Millisecond
	// minMarker is the least a hand-over keeps the key for the heir (the
	// marker's TTL): a notice and an attempt's round trip, on a busy host.
	minMarker = 20 * time.Millisecond
)

// markerMS is how long, in ms, a hand-over keeps the key for the heir:
// at least minMarker, and the per-master timeout, within which the heir's
// attempt reaches a master that is not slow. An heir that never comes
// (its process stopped) holds the key up that long once.
func (c *Client) markerMS() int64 { return max(minMarker, c.timeout).Milliseconds() }

// lineKey and lineDeadlinesKey name the line of key and its deadlines
// on each master, in key's hash slot.
func lineKey(key string) string          { return keys.Companion(key, keys.LineSuffix) }
func lineDeadlinesKey(key string) string { return keys.Companion(key, keys.LineDeadlinesSuffix) }
func lineTurnKey(key string) string      { return keys.Companion(key, keys.LineTurnSuffix) }

// lineArrival returns a new waiter's arrival in a plain lock's line: the
// real clock's microsecond (the masters' clocks measure the wait from
// it), or one past the client's previous one, as Client.arrival.
func (c *Client) lineArrival() int64 { return nextArrival(&c.lastLineArrival, time.Now().UnixMicro()) }

// leaves reports whether the waiter is in the key's line: one that gives
// up takes its entry out (and passes a hand-over it holds on).
func (p plainKind) leaves() bool { return p.line != "" }

var _ kind = plainKind{}

func (p plainKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	key, token := r.key, r.token
	switch op {
	case opAcquire:
		if r.fence != nil {
			return scripts.FencedAcquire, "", append(dst, key, r.fence.counter, token, r.ttlMS)
		}
		if p.line != "" {
			return scripts.LineAcquire, "", append(dst, key, lineKey(key), lineDeadlinesKey(key), token, r.ttlMS, p.line, "1", p.entryMS, p.arrival)
		}
		if p.waiting {
			return scripts.WaitAcquire, "", append(dst, key, token, r.ttlMS)
		}
		return nil, "SET", append(dst, key, token, "NX", "PX", r.ttlMS)
	case opExtend:
		return scripts.Extend, "", append(dst, key, token, r.ttlMS)
	case opRelease:
		if p.handOver {
			return scripts.LineRelease, "", append(dst, key, lineKey(key), lineDeadlinesKey(key), lineTurnKey(key), token, wakeChannel(key),
				handOverAge.Milliseconds(), r.c.markerMS(), "1", p.line)
		}
		return scripts.Release, "", append(dst, key, token, wakeChannel(key))
	case opLeave:
		return scripts.LineLeave, "", append(dst, key, lineKey(key), lineDeadlinesKey(key), p.line, wakeChannel(key), r.c.markerMS())
	default: // opRollback
		if p.handOver {
			// Never a hand-over: the rollback may free a minority of the
			// masters, whose markers could not make a quorum for their
			// heir. The free key is announced: its notice wakes only the
			// candidate, no herd to split the vote again.
			return scripts.LineRelease, "", append(dst, key, lineKey(key), lineDeadlinesKey(key), lineTurnKey(key), token, wakeChannel(key),
				int64(math.MaxInt32), r.c.markerMS(), "1", "")
		}
		// Not announced: after a split vote every contender rolls back,
		// and waking them all at once would split the vote again; their
		// jittered backoff spreads the next attempts instead.
		return scripts.Release, "", append(dst, key, token, "")
	}
}

// plainKind returns the kind of a lock taken by Acquire or TryAcquire:
// fair (a waiter's place in the key's queue) or plain.
func (c *Client) plainKind(key string, lc *lockConfig) kind {
	if lc.fair {
		return c.fairness(key, lc)
	}
	return plainKind{handOver: c.handOver && lc.meta == "" && !lc.fencing}
}

// kindConfig builds a lock's settings and rejects the options its kind
// does not support.
func (c *Client) kindConfig(kind string, key string, opts []LockOption) (lockConfig, error) {
	lc, err := c.lockConfig(key, opts)
	if err != nil {
		return lc, err
	}
	if lc.fair || lc.fencing {
		return lc, fmt.Errorf("%w: %s locks support neither WithFair nor WithFencing", ErrInvalid, kind)
	}
	if lc.minHold > 0 {
		return lc, fmt.Errorf("%w: %s locks do not support WithMinHold", ErrInvalid, kind)
	}
	return lc, nil
}

// Keys returns the locked keys: one, or those of AcquireMulti.
func (l *Lock) Keys() []string {
	if l == nil || l.acq == nil {
		return nil // no acquisition returned it
	}
	return append([]string(nil), l.acq.k.keys(l.key)...)
}

// kind is the kind of the lock's later rounds: its acquisition's (whose
// fencing only the acquisition commits).
func (l *Lock) kind() kind { return l.acq.k }

// entryTTL is how long a waiter's mark (a fair queue entry, a writer's
// intent) lasts without a new attempt: several times the longest backoff.
func (c *Client) entryTTL(lc *lockConfig) time.Duration {
	entry := 4*lc.backoffMax + 2*c.timeout
	if entry < 100*time.Millisecond {
		entry = 100 * time.Millisecond
	}
	return entry
}

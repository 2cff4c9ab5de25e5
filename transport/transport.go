// Package transport is the seam between a redlock.Client and the
// connections that carry its commands, for those who write a transport.
//
// A Client decides; a Transport carries. Everything that makes a lock
// safe — the quorum, the validity, the order of a holder's commands on
// each master, the rollback of a failed attempt after its SET, the
// retries of releases a master missed, what a re-sent command's answer
// may mean — is the Client's, written once. A Transport moves one
// master's commands and replies, and its release notices, and says what
// it can do beyond that through small optional interfaces (Ordered,
// Silencer, Downer, Inspector).
//
// redlock.NewWithTransports takes any Transport; the module's own are the
// redigo ones (redlock.New) and the go-redis adapter (module goredis).
// docs/design.md, "The transport seam", draws the picture.
package transport

import (
	"context"
	"errors"
	"net"
	"strings"
	"time"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// ErrClosed is matched by the error of a command sent to a transport
// after its Close, or still in flight when it closed. It is
// redlock.ErrClosed: errors.Is matches either.
var ErrClosed = errors.New("redlock: client closed")

// A Transport carries one master's lock commands and release notices for
// a Client. It moves commands and replies; every decision is the
// Client's. Implementations must be safe for concurrent use.
type Transport interface {
	// Addr names the master in errors and logs. It must never include
	// credentials. Two transports with the same Addr (compared without
	// case) are taken for the same master and rejected by the Client: a
	// master given twice would fake a quorum.
	Addr() string

	// Send hands cmd to the master without waiting for the network, and
	// calls cmd.Complete exactly once, from any goroutine (possibly before
	// Send returns), with the master's reply or an error, never both.
	// Complete must not be called while Send holds a lock that the
	// Client's code may need (it may Send again from Complete), and it
	// must be called within a bounded time: at cmd.Deadline
	// or, for a transport that keeps a command in flight past its
	// deadline (a pipelined one, whose late replies still count), within
	// a bound of its own. After Close, Send fails cmd with an error
	// matching ErrClosed. cmd and its slices must not be modified or
	// kept after Complete is called; they are shared with other transports
	// and must be treated as read-only.
	Send(cmd *Command)

	// Subscribe opens the master's release-notice subscription: a
	// connection of its own (or an equivalent) on which the Client
	// follows the release channels its waiters wait for. ctx bounds
	// opening it; the subscription then lives until it breaks or is
	// closed. notify is called for each message received, with the
	// channel and the payload, on the subscription's reader; it does not
	// block. Messages must be taken as they come: nothing in them is
	// trusted beyond waking a waiter, which then asks the masters.
	Subscribe(ctx context.Context, notify func(channel, payload string)) (Subscription, error)

	// Close fails what is still queued or awaiting a reply with an error
	// matching ErrClosed (completing each), releases the transport's
	// connections and waits for its goroutines. The Client calls it once,
	// from Client.Close, after the commands in flight had one per-master
	// timeout to be answered. It does not close a pool the caller owns.
	Close() error
}

// A Subscription is a master's release-notice subscription
// (Transport.Subscribe). Its methods are safe for concurrent use.
type Subscription interface {
	// Set makes the subscribed channels equal to channels, subscribing
	// the new ones and unsubscribing the others, and returns once the
	// commands are written (not acknowledged: see Live). ctx bounds the
	// write. An error means the subscription is broken (Done closes).
	Set(ctx context.Context, channels []string) error

	// Live reports whether the master acknowledged the subscription to
	// channel on a connection that is still read: a release announced on
	// channel now reaches notify. The Client trusts it to choose a long
	// fallback poll over its backoff, so it must not report true early.
	Live(channel string) bool

	// Done is closed when the subscription broke (the connection failed,
	// a reply was out of step) or was closed; notify is not called after.
	Done() <-chan struct{}

	// Close ends the subscription and releases its connection; it waits
	// for its goroutines, and is idempotent.
	Close() error
}

// Breakable is an optional ability of a Subscription. Err reports why
// the subscription broke while its connection was whole: it was refused
// (an error matching ErrNoticesRefused), or it read what is not a notice
// (an error reply, a stray value). It is nil while the subscription is
// live, and when its connection failed or it was closed. Once Done is
// closed the Client names a non-nil Err in the master's error; without
// it, a broken subscription is only restarted.
type Breakable interface {
	Err() error
}

// Ordered is an optional ability of a Transport. A transport whose
// Ordered method returns true delivers the commands of a master in the
// order Send was called — also across a broken connection and a re-send,
// and also through a NOSCRIPT fallback (see Command.MayRunLate) — so the
// master runs them in that order. The Client then sends a holder's next
// command at once, a failed attempt's rollback right behind its SET,
// without waiting for replies: one round trip and no goroutine per
// master. A transport without it (or whose method returns false) may
// reorder commands that are in flight together, as a pool of connections
// does; the Client then chains them: a holder's next command to a master
// is sent only once the master answered the previous one (or it was
// given up; see docs/design.md, "Ordering on each master").
type Ordered interface {
	Ordered() bool
}

// Downer is an optional ability of a Transport that is not Ordered. Down
// reports, with an error that says why, that the master is down now:
// commands to it are in flight and it has been silent for longer than the
// per-master timeout, so that a command sent now would wait out its
// deadline unanswered. Nil means it is not known to be down. An
// acquisition whose command to that master would wait behind an earlier
// one (the Client chains a holder's commands on a transport that is not
// Ordered) then fails there at once, unsent, rather than hold its round
// up while the masters that granted it keep the key from everyone else;
// a led acquisition asks the lead first and gives up on such a master only
// once the lead granted. Down must be cheap, safe for concurrent use, and
// must not report a master that answers as down; a NotSentError says
// since when. The pooled redigo transport of redlock.New (pools that
// cannot dial, or redigo.WithPipelining(false)) implements it. An Ordered transport has no use for it: the Client sends
// it every command at once, and it may fail one that is worthless late
// itself (Command.DropWhenDown).
type Downer interface {
	Down() error
}

// Silencer is an optional ability of a Transport whose replies a
// goroutine of this process reads. Silence reports how long the master
// has kept the transport waiting: the time since the earliest command
// still awaiting its reply was sent (0 when none awaits one or a reply
// came since), less the time this process was seen not to run meanwhile
// (a busy machine, a stopped process: its readers did not run either).
// When a master has not answered within the per-master timeout, the
// Client asks: a master silent for less than the timeout may have
// answered, its reply not yet read, and the Client waits on for the rest
// of the timeout (never past a bound: a second at least, see
// docs/design.md, "A busy process is not a silent master"), while a
// master silent for the whole timeout is counted as failed. Without it a
// master that did not answer in time fails, once the Client's own timer
// is on time. Silence must be cheap, safe for concurrent use, and must
// not report a hung master as answering: a silence that never grows
// would hold every round up to that bound.
type Silencer interface {
	Silence() time.Duration
}

// Script is one of the lock's Lua scripts. A transport runs it by EVALSHA
// of SHA and, when the master's script cache does not hold it (NOSCRIPT),
// by EVAL of Source — where that keeps the order (see Command.MayRunLate).
// A Script is immutable and safe for concurrent use.
type Script struct{ s *scripts.Script }

// Name returns the script's name, for errors and logs.
func (s *Script) Name() string { return s.s.Name() }

// SHA returns the hex SHA1 of the script's source, as EVALSHA takes it.
func (s *Script) SHA() string { return s.s.SHA() }

// Source returns the script's Lua source, as EVAL and SCRIPT LOAD take it.
func (s *Script) Source() string { return s.s.Source() }

// Scripts returns every script a Client may run, for a transport that
// loads them on each new connection (SCRIPT LOAD) so that a NOSCRIPT
// seldom costs a second round trip.
func Scripts() []*Script { return append([]*Script(nil), allScripts...) }

// allScripts wraps scripts.All, in its order.
var allScripts = func() []*Script {
	all := make([]*Script, len(scripts.All))
	for i, s := range scripts.All {
		all[i] = &Script{s}
	}
	return all
}()

// ErrNoticesRefused is matched by a Subscribe error that says the master
// or the connection refuses release notices for good while the
// connection stays whole: NOPERM to SUBSCRIBE (an ACL user without
// +subscribe or the channel), a connection that cannot carry a
// subscription. The master still serves locks and its waiters poll; the
// Client logs the refusal now and then and does not count the master as
// failing.
var ErrNoticesRefused = errors.New("redlock: release notices refused")

// NotSentError fails a command that a transport did not send because it
// knew its master down already: its connection had a command unanswered
// for longer than the Client's per-master timeout, or its last dial
// failed moments ago. The Client states it in the master's error as
// "known down since 15:04:05.000 (1.2s ago), not tried: Why: Err", where
// "did not answer in time" would claim a wait that never happened, and
// counts it as a timeout when Err is one. Complete it with SendInfo{}.
type NotSentError struct {
	Since time.Time // when the master was known down
	Why   string    // how it was known down, when Err does not say; may be empty
	Err   error     // the failure that made the master down
}

func (e *NotSentError) Error() string {
	why := ""
	if e.Why != "" {
		why = e.Why + ": "
	}
	return "known down since " + e.Since.Format("15:04:05.000") + ", not tried: " + why +
		strings.TrimPrefix(e.Err.Error(), "redlock: ")
}

// Timeout reports whether the master was known down for not answering.
func (e *NotSentError) Timeout() bool {
	var ne net.Error
	return errors.Is(e.Err, context.DeadlineExceeded) || (errors.As(e.Err, &ne) && ne.Timeout())
}

// Unwrap returns Err, unless it is a timeout: context.DeadlineExceeded
// must match only the end of the caller's own context.
func (e *NotSentError) Unwrap() error {
	if e.Timeout() {
		return nil
	}
	return e.Err
}

// ReplyShape is what a command's reply may be, besides an error reply
// (which any command may get). A reply that does not fit is never a vote:
// it says that the connection is out of step with its master, and the
// transport breaks the connection (every reply after it would answer the
// wrong command) and fails the command; Fits tells. Replies are given as
// redigo gives them: a status as a string ("OK"), an integer as int64, a
// bulk string as []byte, a null as nil.
type ReplyShape uint8

const (
	// ReplySet is SET NX PX's: "OK", or nil when the key exists.
	ReplySet ReplyShape = iota + 1
	// ReplyFlag is the scripts' that answer 1 or 0.
	ReplyFlag
	// ReplyCounter is a fenced acquisition's: 0, or the fencing counter
	// as a decimal bulk string.
	ReplyCounter
	// ReplySHA is SCRIPT LOAD's: a script's SHA1, 40 lower-case hex
	// digits as a bulk string.
	ReplySHA
	// ReplyRW is the read-write lock script's: 1 or 0, or 2 when a read
	// acquisition was turned away for a waiting writer.
	ReplyRW
	// ReplyInfo is INFO's: a bulk string, of any size (its reader bounds
	// what it reads). The Client sends INFO server at first contact to
	// tell its masters apart (a plain command: Name "INFO").
	ReplyInfo
	// ReplyTTL is a waiting plain acquisition's: "OK" (as a status, or as
	// a bulk string where a transport reads every string as one) when
	// granted, else an integer: the holder's remaining TTL in
	// milliseconds, negative when unknown. The lock reads the TTL only as
	// a hint of when to try again, bounded by its own backoff.
	ReplyTTL
)

// Fits reports whether v is a reply of this shape.
func (s ReplyShape) Fits(v any) bool {
	switch s {
	case ReplySet:
		return v == nil || v == "OK"
	case ReplyFlag:
		return v == int64(0) || v == int64(1)
	case ReplyRW:
		return v == int64(0) || v == int64(1) || v == int64(2)
	case ReplyCounter:
		if v == int64(0) {
			return true
		}
		b, ok := v.([]byte)
		return ok && len(b) > 0 && len(b) <= 20 && allIn(b, "0123456789")
	case ReplyInfo:
		_, ok := v.([]byte)
		return ok
	case ReplyTTL:
		switch v := v.(type) {
		case int64:
			return true
		case string:
			return v == "OK"
		case []byte:
			return string(v) == "OK"
		}
		return false
	case ReplySHA:
		b, ok := v.([]byte)
		return ok && len(b) == 40 && allIn(b, "0123456789abcdef")
	default:
		return false
	}
}

// allIn reports whether every byte of b is one of digits.
func allIn(b []byte, digits string) bool {
	for _, d := range b {
		if strings.IndexByte(digits, d) < 0 {
			return false
		}
	}
	return true
}

// ReplyError is a master's error reply (a RESP "-" line), as a transport
// reports it by calling Command.Complete: the master's message, whole. A
// NOSCRIPT reply the transport could not answer by EVAL is reported as
// one too. The Client finds it with errors.As, so a transport may wrap it,
// and it is what the Client's callers find in its errors.
type ReplyError string

func (e ReplyError) Error() string { return string(e) }

// Command is one command for one master, in the lock's own terms. The
// Client builds it; a transport only reads it (its slices are shared by
// the commands of every master of a round).
type Command struct {
	// Script, when not nil, is the script to run (EVALSHA, with EVAL as
	// the NOSCRIPT fallback); Name is then "EVALSHA". When nil, Name is
	// a plain command (SET) and Args its arguments.
	Script *Script
	Name   string
	// Args are the arguments: for a script, its keys (the first NumKeys,
	// all strings) and then its values; for a plain command, all of its
	// arguments. Values are strings, []byte or int64.
	Args    []any
	NumKeys int
	// Deadline is when the Client stops waiting for the reply. A
	// transport that cannot keep the command's order past it (a pooled
	// connection, which it then discards) fails the command at Deadline
	// with an error matching context.DeadlineExceeded; one that can
	// (Ordered, pipelined) may deliver the reply later, which still
	// counts (a late release still frees the key).
	Deadline time.Time
	// Grace is the Client's per-master timeout, for a transport that keeps
	// a command past Deadline (an Ordered one, whose late replies count):
	// how long past Deadline it still waits for the reply of a master
	// that, when the command was sent, had kept earlier commands waiting
	// for longer than this command's wait (what it had until Deadline, and
	// at least Grace) — a master taken for hung. A master silent for less
	// is slow, not hung: its reply is waited for and delivered up to a
	// second past Deadline at least (docs/design.md, "A busy host is not a
	// silent master"), so that the Client learns how slow the host is.
	// Zero: a command to a master taken for hung ends at Deadline.
	Grace time.Duration
	// Reply is the shape the reply may have (see ReplyShape).
	Reply ReplyShape

	// What the command is, for a transport's choices. None of them makes
	// a transport decide anything about the lock.

	// Resend: the command may be sent once more when the master closed
	// the connection (EOF, reset) before answering it, since nothing of
	// a closed connection runs after that: the Client then reads the
	// answer with SendInfo.Resent in mind. Without it, such a command
	// fails with the connection's error.
	Resend bool
	// MayRunLate: the command may run after commands sent after it (a
	// release, a rollback, an extension, a leave whose token no later
	// command uses: late, it finds nothing or its own key). An Ordered
	// transport that finds the script missing (NOSCRIPT) on a pipeline
	// with later commands already written may re-send it as EVAL behind
	// them only when this is set; otherwise it fails the command (it did
	// not run) with a ReplyError.
	MayRunLate bool
	// Undo: the command undoes one sent before it (a failed attempt's
	// rollback, a waiter leaving a queue). Never refuse it because too
	// much is queued: what it undoes still runs.
	Undo bool
	// DropWhenDown: the command is worthless late (an acquisition, an
	// extension). A transport that knows its connection is down — its
	// oldest command went unanswered longer than the Client's per-master
	// timeout — may fail it at once, unsent, rather than queue it.
	DropWhenDown bool

	// Wire, when not nil, is the command's whole argument list as a
	// Redis connection sends it after Name: for a script, its SHA and
	// NumKeys first, then Args. The Client builds it once per round and
	// shares it between masters; a transport may send it as it is, and
	// must not modify it. WireArgs builds it when it is nil.
	Wire []any

	// Wait, when not nil, is the context of a caller that waits for this
	// reply alone (a Client of one master). A hint: a transport may then
	// read the reply in Send itself, until Deadline or Wait's end,
	// rather than hand it to a reader goroutine, and must still call
	// Complete exactly once. A transport is free to ignore it.
	Wait context.Context

	// To receives the command's outcome when Complete is called: the
	// Client sets it on every command it sends. Done is the simpler hook
	// for a command built elsewhere (a transport's own tests); it is
	// called only when To is nil.
	To   Completer
	Done func(reply any, err error, info SendInfo)
}

// A Completer receives a command's outcome (Command.To). Complete is
// called exactly once per Send, from any goroutine; it does not block.
type Completer interface {
	Complete(reply any, err error, info SendInfo)
}

// SendInfo tells the Client what became of a command besides its reply.
type SendInfo struct {
	// Sent: the command was written to a connection to the master (it
	// may have run there even when Complete got an error). False means it
	// certainly never left: nothing of it needs undoing.
	Sent bool
	// Resent: the command was sent a second time after the master
	// closed the connection (Command.Resend), and the reply is the
	// second try's. The first try may have run: the Client does not take
	// a refusal for one then.
	Resent bool
}

// Complete reports the command's outcome: a transport calls it exactly
// once per Send (see Transport.Send). It hands the outcome to To, or else
// to Done.
func (c *Command) Complete(reply any, err error, info SendInfo) {
	if c.To != nil {
		c.To.Complete(reply, err, info)
		return
	}
	if c.Done != nil {
		c.Done(reply, err, info)
	}
}

// WireArgs returns the command's arguments as a Redis connection sends
// them after the command's name: Wire when the Client built it, else for
// a script its SHA and key count followed by Args, for a plain command
// Args. The result must not be modified.
func (c *Command) WireArgs() []any {
	if c.Wire != nil {
		return c.Wire
	}
	if c.Script == nil {
		return c.Args
	}
	return c.Script.s.AppendArgsKeys(make([]any, 0, 2+len(c.Args)), c.NumKeys, c.Args...)
}

// Inspector is an optional ability of a Transport: it runs the read-only
// commands of Client.Inspect (layout.Reader's) on the master in one round
// trip, within ctx's deadline, and returns one reply per command, in
// order, as redigo gives them (a status as a string, an integer as int64,
// a bulk string as []byte, an array as []any, a null as nil, an error
// reply as a value of type error in its place; a bulk string may come as
// a string). Both transports redlock.New makes have it, and so has the go-redis
// adapter (module goredis); a transport without it cannot be inspected,
// and Inspect says so for its master. The replies are untrusted: layout.Reader checks them.
type Inspector interface {
	Inspect(ctx context.Context, cmds []layout.Command) ([]any, error)
}

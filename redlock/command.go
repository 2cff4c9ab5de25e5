package redlock

import (
	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/transport"
)

// wireCmd is an operation's command: built once per round and shared,
// read-only, by every master.
type wireCmd struct {
	op      opKind
	script  *scripts.Script // nil for a plain command
	cmd     string          // "EVALSHA", or the plain command
	args    []any           // as a redigo connection sends them (EVALSHA: the hash and key count first)
	keysAnd []any           // the keys and values (a plain command: its arguments)
	nkeys   int
	want    expect // what the reply may be
}

// fill writes w into cmd, with what the command is for a transport's
// choices (Command.Resend and the others).
func (w *wireCmd) fill(cmd *Command, r *round) {
	op := w.op
	*cmd = Command{Name: w.cmd, Args: w.keysAnd, NumKeys: w.nkeys, Reply: ReplyShape(w.want), Wire: w.args,
		Grace:  r.c.timeout,
		Resend: true,
		// Run late (after commands submitted later, see muxConn.noScript), a
		// release, rollback, extension or leave finds nothing, or its own
		// token: no later round uses it, but a reentrant owner's do.
		MayRunLate:   op != opAcquire && op != opCommit && op != opHeal && !r.k.oneToken(),
		Undo:         op == opRollback || op == opLeave, // never refused as busy (muxUndo)
		DropWhenDown: op == opAcquire || op == opExtend,
	}
	if w.script != nil {
		cmd.Script = wrapScript(w.script)
	}
}

// wireInto builds op's command into w, its arguments in buf when it has
// room, after two slots kept for EVALSHA's script hash and key count.
func (r *round) wireInto(w *wireCmd, op opKind, buf []any) {
	if cap(buf) < 2 {
		buf = make([]any, 0, 12)
	}
	script, cmd, args := r.command(op, buf[2:2])
	if script == nil {
		*w = wireCmd{op: op, cmd: cmd, args: args, keysAnd: args, want: expectOf(nil)}
		return
	}
	nkeys := r.nkeys(script)
	var full []any
	if len(args)+2 <= cap(buf) && (len(args) == 0 || &args[0] == &buf[:cap(buf)][2]) {
		full = buf[:2+len(args)]
		script.PrefixArgs(full, nkeys)
	} else { // command outgrew buf
		full = script.AppendArgsKeys(make([]any, 0, 2+len(args)), nkeys, args...)
	}
	// A script wrapped to keep holder metadata replies as its own.
	*w = wireCmd{op: op, script: script, cmd: "EVALSHA", args: full, keysAnd: full[2:], nkeys: nkeys, want: expectOf(script.Inner())}
}

// command returns what op sends to a master: a script and its keys and
// values, or a plain command and its arguments, appended to dst.
func (r *round) command(op opKind, dst []any) (script *scripts.Script, cmd string, args []any) {
	if op == opHeal {
		return r.healCommand(dst)
	}
	if op == opCommit { // the second phase of a fenced acquisition, of any kind that has one
		if mk, ok := r.k.(*metaKind); ok && mk.meta.term { // an election's: the term recorded with the holder
			return scripts.FenceCommitTerm, "", append(dst, r.key, r.fence.counter, mk.meta.key, r.token, r.fence.arg)
		}
		return scripts.FenceCommit, "", append(dst, r.key, r.fence.counter, r.token, r.fence.arg)
	}
	return r.k.command(r, op, dst)
}

// nkeys is how many of script's arguments are keys in this round.
func (r *round) nkeys(script *scripts.Script) int {
	if n := script.KeyCount(); n >= 0 {
		return n
	}
	n := len(r.k.keys(r.key))
	if script != script.Inner() {
		// Wrapped for holder metadata: a multi-key lock has a hash per
		// key, any other lock one more key.
		if mk, ok := r.k.(*metaKind); ok && mk.meta.keys != nil {
			return 2 * n
		}
		return n + 1
	}
	return n
}

// expect is what a command's reply may be, besides an error reply (which
// any command may get). A reply that does not fit is never a vote: it says
// that the connection is out of step with its master.
type expect uint8

const (
	expectSet     = expect(transport.ReplySet)     // SET NX PX: "OK", or nil when the key exists
	expectFlag    = expect(transport.ReplyFlag)    // the scripts that answer 1 or 0
	expectCounter = expect(transport.ReplyCounter) // a fenced acquisition: 0, or the counter as a decimal string
	expectSHA     = expect(transport.ReplySHA)     // SCRIPT LOAD: a script's SHA1, 40 hex digits
	expectRW      = expect(transport.ReplyRW)      // the read-write script: 1 or 0, or for a read acquisition 2 (a writer waits)
	expectInfo    = expect(transport.ReplyInfo)    // INFO: a bulk string (its size is checked by whoever reads it)
	expectTTL     = expect(transport.ReplyTTL)     // a waiting plain acquisition: "OK", or the holder's remaining TTL
)

// expectOf returns what script's replies may be (nil: the plain SET).
// See internal/scripts/*.lua.
func expectOf(script *scripts.Script) expect {
	switch script {
	case nil, scripts.Acquire: // SET NX PX, or it as a script (meta.go)
		return expectSet
	case scripts.FencedAcquire, scripts.FairFencedAcquire:
		return expectCounter
	case scripts.RW:
		return expectRW
	case scripts.WaitAcquire, scripts.LineAcquire:
		return expectTTL
	default:
		return expectFlag
	}
}

// fits reports whether v is a reply e allows.
func (e expect) fits(v any) bool { return transport.ReplyShape(e).Fits(v) }

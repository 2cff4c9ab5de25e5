// Package scripts holds the Lua scripts quorumlock runs on each master.
//
// Each script is a .lua file embedded at build time and turned once into a
// Script. Scripts take keys only through KEYS[] and values only through
// ARGV[], so each call touches the keys it declares and nothing else.
package scripts

import (
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

var (
	//go:embed release.lua
	releaseSrc string
	//go:embed extend.lua
	extendSrc string
	//go:embed fair_acquire.lua
	fairAcquireSrc string
	//go:embed fair_release.lua
	fairReleaseSrc string
	//go:embed leave.lua
	leaveSrc string
	//go:embed fenced_acquire.lua
	fencedAcquireSrc string
	//go:embed fence_commit.lua
	fenceCommitSrc string
	//go:embed fence_commit_term.lua
	fenceCommitTermSrc string
	//go:embed leader_read.lua
	leaderReadSrc string
	//go:embed fenced_write.lua
	fencedWriteSrc string
	//go:embed reentrant.lua
	reentrantSrc string
	//go:embed rw.lua
	rwSrc string
	//go:embed multi.lua
	multiSrc string
	//go:embed heal.lua
	healSrc string
	//go:embed wait_acquire.lua
	waitAcquireSrc string
	//go:embed line_acquire.lua
	lineAcquireSrc string
	//go:embed line_release.lua
	lineReleaseSrc string
	//go:embed line_leave.lua
	lineLeaveSrc string
)

// The scripts, built once.
var (
	// Release deletes KEYS[1] if it holds ARGV[1] (the token) and then
	// PUBLISHes on channel ARGV[2]; replies 1 if it deleted the key, else 0.
	Release = New("release", 1, releaseSrc)
	// WaitAcquire is a waiting plain acquisition: SET NX PX that, refused,
	// replies the key's remaining TTL (see wait_acquire.lua).
	WaitAcquire = New("wait_acquire", 1, waitAcquireSrc)
	// Extend sets the TTL of KEYS[1] to ARGV[2] milliseconds if it holds
	// ARGV[1]; replies 1 if it did, else 0. It never creates the key.
	Extend = New("extend", 1, extendSrc)
	// FairAcquire sets KEYS[1] only for the waiter at the head of the
	// key's queue (KEYS[2], KEYS[3]); see fair_acquire.lua.
	FairAcquire = New("fair_acquire", 3, fairAcquireSrc)
	// FairRelease is Release for a fair lock: it also takes the holder's
	// entry out of the queue, whether or not the key was the holder's there.
	FairRelease = New("fair_release", 3, fairReleaseSrc)
	// Leave takes a waiter out of a fair lock's queue (KEYS[1], KEYS[2]),
	// and announces it when the waiter was first and the lock (KEYS[3]) is
	// free.
	Leave = New("leave", 3, leaveSrc)

	// FencedAcquire is SET NX PX on KEYS[1] that, when it succeeds,
	// returns the fencing counter KEYS[2]; see fenced_acquire.lua.
	FencedAcquire = New("fenced_acquire", 2, fencedAcquireSrc)
	// FairFencedAcquire is FairAcquire returning the fencing counter
	// KEYS[4] when it sets the lock.
	FairFencedAcquire = New("fair_acquire", 4, fairAcquireSrc)
	// FenceCommit raises the fencing counter KEYS[2] to ARGV[2] if KEYS[1]
	// still holds the token ARGV[1]; see fence_commit.lua.
	FenceCommit = New("fence_commit", 2, fenceCommitSrc)
	// FenceCommitTerm is FenceCommit for an election: it also records the
	// term beside the holder in the metadata hash KEYS[3]; see
	// fence_commit_term.lua.
	FenceCommitTerm = New("fence_commit_term", 3, fenceCommitTermSrc)
	// LeaderRead reads an election's holder, its TTL, recorded term and
	// metadata (KEYS[1], KEYS[2]) in one step; see leader_read.lua. It
	// writes nothing.
	LeaderRead = New("leader_read", 2, leaderReadSrc)
	// FencedWrite stores a value only for a fencing token at least the
	// highest seen; see fenced_write.lua.
	FencedWrite = New("fenced_write", 2, fencedWriteSrc)

	// Reentrant is the reentrant lock on a hash (owner -> hold count);
	// see reentrant.lua.
	Reentrant = New("reentrant", 1, reentrantSrc)
	// RW is the read-write lock on a hash; see rw.lua.
	RW = New("rw", 1, rwSrc)
	// Multi locks several keys at once, all or nothing per master; it
	// takes any number of keys (pass the count to DoKeys and
	// AppendArgsKeys). See multi.lua.
	Multi = New("multi", -1, multiSrc)
	// Heal sets KEYS[1] to the token ARGV[1] only where it is absent (SET
	// NX PX), and then raises the fencing counter KEYS[2] and writes the
	// metadata hash KEYS[3]; see heal.lua. A lock's extension sends it to
	// masters that lost the lock.
	Heal = New("heal", 3, healSrc)

	// LineAcquire is a plain lock's waiting acquisition in the key's line
	// (KEYS[2], KEYS[3]): SET NX PX, or the adoption of a marker a
	// release handed the key over to this waiter with; refused, it joins
	// the line and replies the key's remaining TTL. See line_acquire.lua.
	LineAcquire = New("line_acquire", 3, lineAcquireSrc)
	// LineRelease is Release for a key with a line: it hands the key over
	// to the head of the line when that has waited long enough and no
	// release handed it over lately (KEYS[4]); replies 1
	// if the key was the token's (deleted or handed over), else 0.
	LineRelease = New("line_release", 4, lineReleaseSrc)
	// LineLeave takes a waiter out of the key's line, and passes on a
	// hand-over the key holds for it. See line_leave.lua.
	LineLeave = New("line_leave", 3, lineLeaveSrc)

	// All lists every script, for loading them on a new connection.
	All = append([]*Script{Release, Extend, FairAcquire, FairRelease, Leave, FencedAcquire, FenceCommit, FenceCommitTerm, FencedWrite,
		Reentrant, RW, Multi, Heal, WaitAcquire, LineAcquire, LineRelease, LineLeave}, metaAll()...)
)

// Script is a Lua script with its SHA1, run by EVALSHA with a fallback to
// EVAL when the master's script cache does not hold it (after a restart or
// SCRIPT FLUSH). A Script is immutable and safe for concurrent use.
type Script struct {
	name     string
	src      string
	sha      string
	keyCount int
	shaArg   any     // the hash, boxed once for EVALSHA
	inner    *Script // the script this one wraps (meta.go), or nil
}

// New returns a script taking keyCount keys.
func New(name string, keyCount int, src string) *Script {
	sum := sha1.Sum([]byte(src))
	sha := hex.EncodeToString(sum[:])
	return &Script{name: name, src: src, sha: sha, keyCount: keyCount, shaArg: sha}
}

// Name returns the script's name, as used in errors.
func (s *Script) Name() string { return s.name }

// SHA returns the hex SHA1 of the script's source, as EVALSHA wants it.
func (s *Script) SHA() string { return s.sha }

// Source returns the Lua source.
func (s *Script) Source() string { return s.src }

// KeyCount returns how many of a call's arguments are keys; -1 for a
// script that takes any number (the caller says how many).
func (s *Script) KeyCount() int { return s.keyCount }

// AppendArgsKeys appends EVALSHA's arguments to dst: the script's hash,
// nkeys, then keysAndArgs, whose first nkeys are keys.
func (s *Script) AppendArgsKeys(dst []any, nkeys int, keysAndArgs ...any) []any {
	dst = append(dst, s.shaArg, nkeys)
	return append(dst, keysAndArgs...)
}

// PrefixArgs writes EVALSHA's two leading arguments (the hash and nkeys)
// into the first two slots of args, which must have them free.
func (s *Script) PrefixArgs(args []any, nkeys int) {
	args[0], args[1] = s.shaArg, nkeys
}

// ErrWrongKind is matched by the error of a script that found its key
// holding a lock of another kind (a plain lock's string where a read-write
// lock's hash was expected, say): kinds must not be mixed on one key.
// redlock exports it as redlock.ErrWrongKind.
var ErrWrongKind = errors.New("redlock: the key holds a lock of another kind")

// stringScripts are the scripts that expect their lock key to be a
// string; the others (reentrant, rw) expect a hash.
var stringScripts = map[string]string{
	"release": "plain", "extend": "plain", "fair_release": "fair", "fence_commit": "fenced",
	"line_acquire": "plain", "line_release": "plain", "line_leave": "plain",
	"multi": "multi-key",
	// fair_acquire and fenced_acquire read the lock key with EXISTS and
	// SET NX, which take any type: a WRONGTYPE there is about a companion
	// key, and is passed on as it is.
}

// kindNames names the kind of lock each hash script runs.
var kindNames = map[string]string{"reentrant": "reentrant", "rw": "read-write"}

// WrongKindError is a script's WRONGTYPE refusal, explained: which kind of
// lock the script runs and which kinds hold a key of the type it found.
// It matches ErrWrongKind, and the master's reply (transport.ReplyError),
// with errors.Is and errors.As; its message leaves the master's raw text
// out.
type WrongKindError struct {
	Script string // the kind of lock the refused script runs: "read-write", "plain", …
	Holder string // the kinds of lock that hold such a key
	Err    error  // the master's reply
}

// Error says which kinds hold the key and which kind was refused.
func (e *WrongKindError) Error() string {
	return "the key is held by " + e.Holder + ", not by a " + e.Script + " lock: do not mix lock kinds on one key"
}

// Unwrap returns ErrWrongKind and the master's reply.
func (e *WrongKindError) Unwrap() []error { return []error{ErrWrongKind, e.Err} }

// rwOnReentrant starts rw.lua's refusal of a hash whose fields are no
// read-write lock's (a reentrant lock's): it writes nothing then.
const rwOnReentrant = "WRONGTYPE quorumlock: the key holds a reentrant lock"

// wrongKind explains a WRONGTYPE reply to one of the scripts, or returns
// nil.
func wrongKind(msg string, err error) error {
	if !strings.HasPrefix(msg, "WRONGTYPE") {
		return nil
	}
	if strings.HasPrefix(msg, rwOnReentrant) {
		// rw.lua's own refusal of a hash that holds a reentrant lock.
		return &WrongKindError{Script: "read-write", Holder: "a reentrant lock", Err: err}
	}
	for _, s := range All {
		if !strings.Contains(msg, s.sha) {
			continue
		}
		if kind, ok := stringScripts[s.name]; ok {
			return &WrongKindError{Script: kind, Holder: "a read-write or reentrant lock (a hash)", Err: err}
		}
		if kind, ok := kindNames[s.name]; ok {
			return &WrongKindError{Script: kind, Holder: "a plain, fair, fenced or multi-key lock (a string)", Err: err}
		}
	}
	return nil
}

// Explain adds to a script's ACL refusal which command was refused, and
// turns a WRONGTYPE refusal (the key holds a lock of another kind) into a
// *WrongKindError.
// err is the master's error reply, whose text is reply.
// Redis 7.0 reports a command a script may not run only as "can't run
// this command or subcommand script: <sha>, on @user_script:<line>."; the
// script's source tells which command that line runs. Other errors are
// returned as they are.
func Explain(err error, reply string) error {
	if wk := wrongKind(reply, err); wk != nil {
		return wk
	}
	if !strings.Contains(reply, "can't run this command") {
		return err
	}
	msg := reply
	at := strings.LastIndex(msg, "@user_script:")
	if at < 0 {
		return err
	}
	digits := strings.TrimLeft(msg[at+len("@user_script:"):], " ")
	end := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(digits)
	}
	line, convErr := strconv.Atoi(digits[:end])
	if convErr != nil {
		return err
	}
	for _, s := range All {
		if !strings.Contains(msg, s.sha) {
			continue
		}
		lines := strings.Split(s.src, "\n")
		if line < 1 || line > len(lines) {
			return err
		}
		src := lines[line-1]
		i := strings.Index(src, `redis.call("`)
		if i < 0 {
			return err
		}
		cmd := src[i+len(`redis.call("`):]
		cmd = cmd[:strings.IndexByte(cmd, '"')]
		return fmt.Errorf("%w (the %s script runs %s there: the ACL user needs +%s)", err, s.name, cmd, strings.ToLower(cmd))
	}
	return err
}

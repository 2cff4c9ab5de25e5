package keys

import (
	"strconv"
	"strings"
)

// The spelling of what a master holds beside a lock key K: package layout
// documents the layout and names the keys (layout.FenceKey ...); the
// suffixes, fields and prefixes it is made of are spelled here, for the
// library's own code and the scripts' tests.

// Suffixes of the companion keys that live beside a lock key.
const (
	// FenceSuffix names the fencing counter of a lock key.
	FenceSuffix = ":fence"
	// QueueSuffix names a fair lock's queue (waiter ID -> arrival).
	QueueSuffix = ":queue"
	// QueueDeadlinesSuffix names a fair lock's entry deadlines (waiter ID
	// -> expiry).
	QueueDeadlinesSuffix = ":queue-deadlines"
	// FenceSeenSuffix names the highest fencing token a resource has seen
	// (package fence, the resource side).
	FenceSeenSuffix = ":fence-seen"
	// MetaSuffix names the hash of a lock's holder metadata (field: a
	// holder's token or a reentrant owner's ID; value: its metadata).
	MetaSuffix = ":meta"
	// LineSuffix names a plain lock's line: the waiters a release may
	// hand the key over to (waiter ID -> arrival, master µs).
	LineSuffix = ":line"
	// LineDeadlinesSuffix names the line's entry deadlines (waiter ID ->
	// expiry, master ms).
	LineDeadlinesSuffix = ":line-deadlines"
	// LineTurnSuffix names the line's turn: when a release last handed
	// the key over (master µs), kept for the hand-over age.
	LineTurnSuffix = ":line-turn"
	// PermitSuffix names a semaphore's permit slots: slot i of semaphore
	// key is the lock key key + PermitSuffix + i (in key's hash slot).
	PermitSuffix = ":permit:"
)

// The fields of a read-write lock's hash.
const (
	// ReaderPrefix starts a reader's field; its token follows.
	ReaderPrefix = "r:"
	// WriterPrefix starts the writer's field; its token follows.
	WriterPrefix = "w:"
	// IntentField holds the waiter ID of a writer that readers keep out.
	IntentField = "intent"
	// IntentExpiryField holds when the intent expires (master Unix ms).
	IntentExpiryField = "intent:exp"
)

// HoldIDField is the field of a reentrant lock's hash that holds the id
// of the hold (the empty string, which no owner ID is).
const HoldIDField = ""

// HoldIDPattern is the Lua pattern reentrant.lua matches a hold id with:
// "<name>:<n>", a Reentrant's name and the number of its attempt (decimal
// digits), captured apart. A hold id that does not match is taken over
// by no attempt.
const HoldIDPattern = "^(.*):(%d+)$"

// ReaderField returns the field of a read-write lock's hash that a reader
// holding token owns.
func ReaderField(token string) string { return ReaderPrefix + token }

// WriterField returns the field of a read-write lock's hash that the writer
// holding token owns.
func WriterField(token string) string { return WriterPrefix + token }

// TermPrefix starts the field of an election's metadata hash that holds
// a holder's term (its fencing token, in decimal); the holder's token
// follows. Tokens never contain ':'.
const TermPrefix = "term:"

// TermField returns the field of an election's metadata hash that holds
// the term of the holder with token.
func TermField(token string) string { return TermPrefix + token }

// WakePrefix starts the channel a release of a key is announced on; the
// key follows.
const WakePrefix = "quorumlock:released:"

// NoticeSep ends the release's ID in a plain lock's release notice; the
// count of the channel's subscribers on the master follows.
const NoticeSep = "/"

// ParseNotice splits a release notice into the release's ID and the count
// of subscribers it names (0 when it names none: another lock kind's
// notice, or one that does not parse). The message comes from a master:
// only a short decimal count after the last NoticeSep is taken.
func ParseNotice(msg string) (id string, subs int) {
	i := strings.LastIndex(msg, NoticeSep)
	if i < 0 || len(msg)-i-len(NoticeSep) > 6 {
		return msg, 0
	}
	n, err := strconv.Atoi(msg[i+len(NoticeSep):])
	if err != nil || n < 0 {
		return msg, 0
	}
	return msg[:i], n
}

// MarkerPrefix starts the value of a plain lock's key that a release
// handed over to a waiter in its line; the waiter's ID follows. Only that
// waiter's acquisition takes the key (line_acquire.lua); no token begins
// with it.
const MarkerPrefix = "h:"

// HeirMark and CandidateMark follow the release's ID in the notice of a
// plain lock's release with a line (line_release.lua, line_leave.lua):
// then the first 8 characters of the waiter ID the key was handed over
// to (HeirMark), or of the waiter first in line, the candidate, when the
// key was left free (CandidateMark). Both begin with HandOverSep.
const (
	HandOverSep   = "!"
	HeirMark      = HandOverSep + "h"
	CandidateMark = HandOverSep + "c"
)

// ParseHandOver splits a release ID, as ParseNotice returns it, into the
// release's own ID and the waiter it names: heir, the one the key was
// handed over to, or candidate, the one first in line when the key was
// left free (at most one of the two is set, to at most 8 characters).
// An ID of another form, which names no waiter, comes back whole. The
// ID comes from a master: only that form is read.
func ParseHandOver(id string) (release, heir, candidate string) {
	i := strings.Index(id, HandOverSep)
	if i < 0 || len(id)-i-len(HandOverSep) < 2 || len(id)-i-len(HandOverSep) > 9 {
		return id, "", ""
	}
	name := id[i+len(HeirMark):]
	switch id[i : i+len(HeirMark)] {
	case HeirMark:
		return id[:i], name, ""
	case CandidateMark:
		return id[:i], "", name
	}
	return id, "", ""
}

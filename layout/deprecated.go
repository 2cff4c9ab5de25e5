package layout

import "github.com/quorumlock/quorumlock/internal/keys"

// The spelling of the layout's parts: suffixes, fields, prefixes. Reading
// a lock's state back needs none of them (NewReader, and the key functions
// FenceKey, MetaKey, QueueKey, QueueDeadlinesKey, WakeChannel); they go in
// the next minor release.
const (
	// FenceSuffix names the fencing counter beside a lock key.
	//
	// Deprecated: use FenceKey.
	FenceSuffix = keys.FenceSuffix
	// QueueSuffix names a fair lock's queue.
	//
	// Deprecated: use QueueKey.
	QueueSuffix = keys.QueueSuffix
	// QueueDeadlinesSuffix names a fair lock's entry deadlines.
	//
	// Deprecated: use QueueDeadlinesKey.
	QueueDeadlinesSuffix = keys.QueueDeadlinesSuffix
	// FenceSeenSuffix names the highest fencing token a resource has seen.
	//
	// Deprecated: use FenceSeenKey.
	FenceSeenSuffix = keys.FenceSeenSuffix
	// MetaSuffix names the hash of a lock's holder metadata.
	//
	// Deprecated: use MetaKey.
	MetaSuffix = keys.MetaSuffix
	// ReaderPrefix starts a reader's field of a read-write lock's hash.
	//
	// Deprecated: read a read-write lock's holders with NewReader
	// (State.Holders).
	ReaderPrefix = keys.ReaderPrefix
	// WriterPrefix starts the writer's field of a read-write lock's hash.
	//
	// Deprecated: read a read-write lock's holders with NewReader
	// (State.Holders).
	WriterPrefix = keys.WriterPrefix
	// IntentField holds the waiter ID of a writer that readers keep out.
	//
	// Deprecated: read a writer's intent with NewReader (State.Intent).
	IntentField = keys.IntentField
	// IntentExpiryField holds when the intent expires.
	//
	// Deprecated: read a writer's intent with NewReader (State.Intent).
	IntentExpiryField = keys.IntentExpiryField
	// TermPrefix starts the field of an election's metadata hash that holds a term.
	//
	// Deprecated: read an election's leader with package election's
	// Election.Leader, a holder's recorded term with redlock's
	// Client.InspectHolder.
	TermPrefix = keys.TermPrefix
	// WakePrefix starts the channel a release is announced on.
	//
	// Deprecated: use WakeChannel.
	WakePrefix = keys.WakePrefix
	// NoticeSep ends the release's ID in a release notice.
	//
	// Deprecated: a release notice's format is the library's own.
	NoticeSep = keys.NoticeSep
)

// ParseNotice splits a release notice into the release's ID and the count
// of subscribers it names.
//
// Deprecated: a release notice's format is the library's own.
func ParseNotice(msg string) (id string, subs int) { return keys.ParseNotice(msg) }

// ReaderField returns the field a reader holding token owns.
//
// Deprecated: read a read-write lock's holders with NewReader.
func ReaderField(token string) string { return keys.ReaderField(token) }

// WriterField returns the field the writer holding token owns.
//
// Deprecated: read a read-write lock's holders with NewReader.
func WriterField(token string) string { return keys.WriterField(token) }

// TermField returns the field of an election's metadata hash that holds
// the term of the holder with token.
//
// Deprecated: read an election's leader with package election's
// Election.Leader, a holder's recorded term with redlock's
// Client.InspectHolder.
func TermField(token string) string { return keys.TermField(token) }

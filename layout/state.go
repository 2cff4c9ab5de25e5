package layout

import "time"

// Kind is what a lock key holds on a master.
type Kind uint8

// The kinds a Reader tells apart.
const (
	// KindFree: the key does not exist.
	KindFree Kind = iota
	// KindLock: a plain lock (also a key of a multi-key lock, a fair lock):
	// a string holding a token.
	KindLock
	// KindReentrant: a hash of one owner and its hold count.
	KindReentrant
	// KindReadWrite: a hash of readers, a writer and a writer's intent.
	KindReadWrite
	// KindForeign: the key exists but is none of the above (another type,
	// or a hash that matches neither lock): not a lock of this library.
	KindForeign
)

// String returns "free", "lock", "reentrant", "read-write" or "foreign".
func (k Kind) String() string {
	switch k {
	case KindFree:
		return "free"
	case KindLock:
		return "lock"
	case KindReentrant:
		return "reentrant"
	case KindReadWrite:
		return "read-write"
	}
	return "foreign"
}

// Mode is how a holder holds a lock.
type Mode uint8

// The modes of a Holder.
const (
	ModeExclusive Mode = iota // a plain lock's holder
	ModeReentrant             // a reentrant lock's owner
	ModeRead                  // one of a read-write lock's readers
	ModeWrite                 // a read-write lock's writer
)

// String returns "exclusive", "reentrant", "read" or "write".
func (m Mode) String() string {
	switch m {
	case ModeExclusive:
		return "exclusive"
	case ModeReentrant:
		return "reentrant"
	case ModeRead:
		return "read"
	}
	return "write"
}

// NoExpiry is the TTL of something that does not expire.
const NoExpiry time.Duration = -1

// Holder is one holder of a lock on one master.
type Holder struct {
	Mode Mode
	// Token is the holder's token; for a reentrant lock, the owner ID.
	Token string
	// Count is a reentrant owner's hold count; 0 for other modes.
	Count int64
	// TTL is how long the hold has left on the master: the key's TTL, or
	// for a read-write lock the holder's own entry's. NoExpiry when the
	// key has no TTL.
	TTL time.Duration
	// Meta is the holder's metadata (redlock.WithMetadata), "" when it has
	// none; at most MaxMeta bytes. Like every string here, it is as the
	// master sent it: escape it before printing.
	Meta string
	// Fence is the fencing token recorded beside a plain lock's holder
	// (redlock.WithHolderFence), 0 when none is: Client.InspectHolder
	// reads it; a Reader does not.
	Fence uint64
}

// Intent is a writer that readers keep out of a read-write lock: while it
// stands, new readers are turned away.
type Intent struct {
	Writer string        // the writer's waiter ID
	TTL    time.Duration // how long the intent stands without a new attempt
}

// Waiter is one entry of a fair lock's queue.
type Waiter struct {
	ID string
	// Arrival orders the queue: the waiter's clock when it first tried,
	// Unix microseconds.
	Arrival int64
	// TTL is how long the entry stays without a new attempt; NoExpiry when
	// its deadline was not found.
	TTL time.Duration
}

// State is what one master holds for a lock key, as a Reader read it.
// Everything in it came from the master: strings are as the master sent
// them and may hold any bytes (escape them before printing).
type State struct {
	Kind Kind
	// Type is the key's Redis type as TYPE named it ("none" when free).
	Type string
	// TTL is the key's remaining time to live; NoExpiry when it has none,
	// 0 when the key does not exist.
	TTL time.Duration
	// Holders are the lock's holders: the token of a plain lock, the owner
	// of a reentrant lock, the writer or the readers of a read-write lock
	// (the writer first, then the readers by token). Entries of a
	// read-write lock that have expired are left out, as the script
	// ignores them.
	Holders []Holder
	// Intent is a waiting writer's intent on a read-write lock, or nil.
	Intent *Intent
	// Fence is the key's fencing counter; Fenced says whether the master
	// holds one.
	Fence  uint64
	Fenced bool
	// Queue is the head of a fair lock's queue, in order (at most
	// MaxEntries); QueueLen how many entries the queue holds in all.
	// Entries whose deadline has passed are left out (the next attempt
	// drops them) but counted in QueueLen.
	Queue    []Waiter
	QueueLen int64
	// Truncated says that a holder's token, the holders or the queue were
	// cut at MaxValue or MaxEntries, or a holder's metadata at MaxMeta.
	Truncated bool
}

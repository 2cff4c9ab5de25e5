// Package layout names what quorumlock keeps on each Redis master and reads
// it back.
//
// The layout is a contract between every client that locks the same keys,
// whatever their version, and the Lua scripts of the library: it is written
// down once, here. The scripts receive every key and channel through KEYS[]
// and ARGV[] from names made here; the fields of a read-write lock's hash
// are spelled in rw.lua too, and a test checks that the two agree.
//
// What a master holds for a lock key K:
//
//   - A plain lock (also each key of a multi-key lock, and a fair lock): K
//     is a string whose value is the holder's token, with the lock's TTL as
//     the key's TTL.
//   - A reentrant lock: K is a hash with the field of the owner ID, whose
//     value is the owner's hold count in decimal, and the field "" (no
//     owner ID is empty), whose value is the id of the hold (absent when
//     a client of a version before hold ids took it); the key's TTL is
//     the lock's.
//   - A read-write lock: K is a hash with one field per holder, "r:" or
//     "w:" followed by the holder's token, whose value is when that hold
//     expires (the master's clock, Unix milliseconds). A writer kept out by
//     readers leaves an intent: the field "intent" holds its waiter ID and
//     "intent:exp" when the intent expires. The key's TTL follows the
//     latest expiry.
//   - A fenced lock's counter: the string FenceKey(K), the highest fencing
//     token committed for K in decimal, without a TTL.
//   - A fair lock's queue: the sorted set QueueKey(K) of waiter IDs scored
//     by arrival (the client's clock, Unix microseconds), and the sorted set
//     QueueDeadlinesKey(K) of the same IDs scored by when each entry expires
//     (the master's clock, Unix milliseconds). Both carry a TTL.
//   - Holder metadata: the hash MetaKey(K), one field per holder that has
//     metadata (its token; a reentrant lock's owner ID) whose value is the
//     metadata, at most MaxMeta bytes; a multi-key lock keeps one beside
//     each of its keys. Its TTL follows K's: the scripts
//     that grant, extend or release a hold with metadata set it to K's
//     remaining TTL, and delete the hash with K. A field whose holder no
//     longer holds K means nothing (readers show a holder's metadata only);
//     no script reads the hash to decide anything.
//   - Releases are announced on the channel WakeChannel(K), with a short
//     prefix of the releasing token (or a release ID) as the message; a
//     plain lock's release adds "/" and how many connections were
//     subscribed to the channel on that master.
//
// Companion keys (the fence counter, the queue, the metadata, FenceSeenKey) share K's
// Redis Cluster hash slot: K's own hash tag when it has one, else {K}.
//
// A reentrant owner ID that begins with "r:" or "w:", or equals "intent"
// or "intent:exp", reads as a read-write lock; the
// two kinds cannot be told apart by their hash alone, and a key is only
// ever used as one kind.
package layout

import "github.com/quorumlock/quorumlock/internal/keys"

// FenceKey returns the key that holds key's fencing counter on each master.
func FenceKey(key string) string { return keys.Companion(key, keys.FenceSuffix) }

// QueueKey returns the key of a fair lock's queue.
func QueueKey(key string) string { return keys.Companion(key, keys.QueueSuffix) }

// QueueDeadlinesKey returns the key of a fair lock's entry deadlines.
func QueueDeadlinesKey(key string) string { return keys.Companion(key, keys.QueueDeadlinesSuffix) }

// FenceSeenKey returns the key that holds the highest fencing token the
// resource data key has seen (package fence).
func FenceSeenKey(key string) string { return keys.Companion(key, keys.FenceSeenSuffix) }

// MetaKey returns the key of the hash that holds the metadata of key's
// holders.
func MetaKey(key string) string { return keys.Companion(key, keys.MetaSuffix) }

// WakeChannel returns the channel a release of key is announced on.
func WakeChannel(key string) string { return keys.WakePrefix + key }

// MaxMeta is the most bytes of one holder's metadata.
const MaxMeta = 1024

package redlock

import (
	"github.com/google/uuid"

	"github.com/quorumlock/quorumlock/layout"
)

// fairness is a waiter's place in the queue of a fair lock's key.
type fairness struct {
	queue, deadlines string // companion keys, in the lock key's hash slot
	waiter           string // stable across the attempts of one Acquire
	arrival          int64  // µs since the epoch: the queue's order
	entryTTLms       int64  // an entry not refreshed for this long is dropped
}

// fairness returns the waiter's place for one Acquire of key, or nil for a
// plain lock. The entry outlives the longest backoff several times over,
// since every attempt refreshes it.
func (c *Client) fairness(key string, lc *lockConfig) *fairness {
	if !lc.fair {
		return nil
	}
	entry := c.entryTTL(lc)
	return &fairness{
		queue:      layout.QueueKey(key),
		deadlines:  layout.QueueDeadlinesKey(key),
		waiter:     uuid.NewString(),
		arrival:    c.clock.Now().UnixMicro(),
		entryTTLms: entry.Milliseconds(),
	}
}

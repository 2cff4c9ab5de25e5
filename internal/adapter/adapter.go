// Package adapter holds what the client libraries' adapters (the nested
// modules goredis, rueidis and valkey) share beside the transport.Transport
// contract: a release-notice subscription's channel bookkeeping, the
// error of a command whose deadline passed, and small helpers. It is
// internal to this repository: the adapters import it by path, at the
// same version as the core module.
package adapter

import (
	"context"
	"strings"
	"time"
)

// Channels is a release-notice subscription's bookkeeping: the channels
// asked for, the acknowledgements the master sent, and the SUBSCRIBEs and
// UNSUBSCRIBEs not yet acknowledged. A channel is live once the master
// acknowledged the last SUBSCRIBE sent for it, with none of them still
// pending: only then is a notice on it sure to arrive. It is not safe for
// concurrent use: the subscription's lock guards it.
type Channels struct {
	want  map[string]bool // channels asked for
	acked map[string]bool // the last acknowledgement was a subscribe
	pend  map[string]int  // SUBSCRIBEs and UNSUBSCRIBEs not yet acknowledged
}

// NewChannels returns the bookkeeping of a subscription to no channel.
func NewChannels() *Channels {
	return &Channels{want: make(map[string]bool), acked: make(map[string]bool), pend: make(map[string]int)}
}

// Set makes the channels asked for equal to channels and returns those
// to subscribe to and to unsubscribe from (each counted pending until
// acknowledged). Either may be empty: never send an UNSUBSCRIBE of no
// channels, which is one of every channel.
func (c *Channels) Set(channels []string) (add, drop []string) {
	next := make(map[string]bool, len(channels))
	for _, ch := range channels {
		if next[ch] {
			continue
		}
		next[ch] = true
		if !c.want[ch] {
			add = append(add, ch)
			c.pend[ch]++
		}
	}
	for ch := range c.want {
		if !next[ch] {
			drop = append(drop, ch)
			c.pend[ch]++
		}
	}
	c.want = next
	return add, drop
}

// Ack records the master's acknowledgement of kind ("subscribe" or
// "unsubscribe") for channel; it reports false for one that answers
// nothing sent, which puts the connection out of step.
func (c *Channels) Ack(kind, channel string) bool {
	if c.pend[channel] == 0 {
		return false
	}
	switch kind {
	case "subscribe":
		c.acked[channel] = true
	case "unsubscribe":
		delete(c.acked, channel)
	default:
		return false
	}
	if c.pend[channel]--; c.pend[channel] == 0 {
		delete(c.pend, channel)
	}
	return true
}

// Wanted reports whether channel is asked for: a notice on it is handed
// on.
func (c *Channels) Wanted(channel string) bool { return c.want[channel] }

// Live reports whether channel is asked for, acknowledged, and nothing
// about it pending.
func (c *Channels) Live(channel string) bool {
	return c.want[channel] && c.acked[channel] && c.pend[channel] == 0
}

// Lost forgets every acknowledgement: the connection ended.
func (c *Channels) Lost() { clear(c.acked) }

// TimeoutError is a command's deadline passing before its reply. It
// matches context.DeadlineExceeded and is a net.Error timeout.
type TimeoutError struct{}

func (TimeoutError) Error() string { return "no reply before the command's deadline" }

// Timeout reports true: it is a net.Error timeout.
func (TimeoutError) Timeout() bool { return true }

// Temporary reports true, as a net.Error timeout does.
func (TimeoutError) Temporary() bool { return true }

// Is reports whether target is context.DeadlineExceeded.
func (TimeoutError) Is(target error) bool { return target == context.DeadlineExceeded }

// LateBound is the most a command may be answered past its deadline (a
// pipelined transport's late reply, stalls of this process): its own
// time to its deadline, budget, at least a second (as the
// redlock.Client waits for a reply read late).
func LateBound(budget time.Duration) time.Duration {
	return max(budget, time.Second)
}

// WithScores reports whether a command's arguments ask for a sorted
// set's scores (its last argument is WITHSCORES).
func WithScores(args []any) bool {
	if len(args) == 0 {
		return false
	}
	s, ok := args[len(args)-1].(string)
	return ok && strings.EqualFold(s, "WITHSCORES")
}

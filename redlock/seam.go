package redlock

import (
	"fmt"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/transport"
)

// The transport-author names moved to package transport. These aliases
// keep code written against the old names building for one minor
// release.

// Transport carries one master's lock commands.
//
// Deprecated: use transport.Transport.
type Transport = transport.Transport

// Subscription is a master's release-notice subscription.
//
// Deprecated: use transport.Subscription.
type Subscription = transport.Subscription

// Ordered is a Transport's optional ability to keep a master's order.
//
// Deprecated: use transport.Ordered.
type Ordered = transport.Ordered

// Downer is a Transport's optional ability to report its master down.
//
// Deprecated: use transport.Downer.
type Downer = transport.Downer

// Silencer is a Transport's optional ability to report its master's silence.
//
// Deprecated: use transport.Silencer.
type Silencer = transport.Silencer

// Inspector is a Transport's optional ability to run Client.Inspect's
// commands.
//
// Deprecated: use transport.Inspector.
type Inspector = transport.Inspector

// Script is one of the lock's Lua scripts.
//
// Deprecated: use transport.Script.
type Script = transport.Script

// ReplyShape is what a command's reply may be.
//
// Deprecated: use transport.ReplyShape.
type ReplyShape = transport.ReplyShape

// ReplyError is a master's error reply.
//
// Deprecated: use transport.ReplyError.
type ReplyError = transport.ReplyError

// Command is one command for one master.
//
// Deprecated: use transport.Command.
type Command = transport.Command

// SendInfo tells the Client what became of a command besides its reply.
//
// Deprecated: use transport.SendInfo.
type SendInfo = transport.SendInfo

// The reply shapes.
//
// Deprecated: use transport.ReplySet and the others.
const (
	ReplySet     = transport.ReplySet
	ReplyFlag    = transport.ReplyFlag
	ReplyCounter = transport.ReplyCounter
	ReplySHA     = transport.ReplySHA
	ReplyRW      = transport.ReplyRW
	ReplyInfo    = transport.ReplyInfo
)

// Scripts returns every script a Client may run.
//
// Deprecated: use transport.Scripts.
func Scripts() []*Script { return transport.Scripts() }

// completer receives a Client's command's outcome: the Client's own
// command holders (a round's legs, rollbacks, retries, probes) implement
// it, and their Complete methods (transport.Completer) hand the outcome
// to it.
type completer interface {
	complete(reply any, err error, info SendInfo)
}

// Complete hands a transport's outcome to the leg (transport.Completer).
func (l *leg) Complete(res any, err error, info SendInfo) { l.complete(res, err, info) }

// Complete hands a transport's outcome to the rollback
// (transport.Completer).
func (q *rollbackReq) Complete(res any, err error, info SendInfo) { q.complete(res, err, info) }

// scriptOf maps each script the Client runs to its transport.Script, by
// SHA: scripts that share a source (FairFencedAcquire is FairAcquire
// with the fencing counter's key) share one.
var scriptOf = func() map[*scripts.Script]*Script {
	bySHA := make(map[string]*Script, len(scripts.All))
	for _, w := range transport.Scripts() {
		bySHA[w.SHA()] = w
	}
	m := make(map[*scripts.Script]*Script, len(scripts.All)+2)
	for _, s := range append(scripts.All, scripts.FairFencedAcquire, scripts.FairFencedAcquire.WithMeta()) {
		w := bySHA[s.SHA()]
		if w == nil {
			panic(fmt.Sprintf("redlock: script %s is not in scripts.All", s.Name()))
		}
		m[s] = w
	}
	return m
}()

// wrapScript returns s's transport.Script. Every script the Client runs
// is in scripts.All or shares the source of one there (scriptOf).
func wrapScript(s *scripts.Script) *Script { return scriptOf[s] }

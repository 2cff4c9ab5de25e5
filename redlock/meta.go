package redlock

import (
	"fmt"
	"slices"

	"github.com/quorumlock/quorumlock/internal/scripts"
	"github.com/quorumlock/quorumlock/layout"
)

// Holder metadata (WithMetadata).
//
// A lock may carry a short value that says who holds it: a host and
// process, a leader's address. On each master it lives in a hash beside
// the lock key (layout.MetaKey), one field per holder named by its token
// (a reentrant lock's owner ID), and it is written by the same script that
// grants, extends or releases the lock, so it is there exactly while the
// hold is: the script's kind is unchanged, wrapped by a few lines that
// store the field when the lock was granted, remove it on release or
// rollback, and make the hash's TTL follow the lock key's
// (internal/scripts/meta.go). A multi-key lock keeps it beside each of its
// keys, so the holder of any of them can be told. No script reads it to decide anything: it
// can neither take nor release a lock. A lock without metadata sends what
// it sent before (a plain lock its SET NX PX).

// holderMeta is a lock's metadata and the key it is kept in.
type holderMeta struct {
	key string // layout.MetaKey of the lock key
	// keys: a multi-key lock's, the layout.MetaKey of each of its keys, in
	// their order: the metadata is kept with every key (nil otherwise).
	keys  []any
	value string
	// term: WithHolderFence, whose fencing commit also records the
	// fencing token in the hash (scripts.FenceCommitTerm).
	term bool
}

// metaKind is a lock of any kind that carries holder metadata: it sends
// what its kind sends, wrapped (withMeta). It is no kind of its own:
// every other question is its kind's.
type metaKind struct {
	kind
	meta *holderMeta
}

var _ kind = (*metaKind)(nil)

// withHolderMeta returns k carrying the metadata of lc, if any. A lock
// with WithHolderFence always carries it, "" too: its fencing token is
// recorded in the same hash, whose TTL the wrapped scripts keep.
func withHolderMeta(k kind, key string, lc *lockConfig) kind {
	if lc.meta == "" && !lc.fenceRec {
		return k
	}
	hm := &holderMeta{key: layout.MetaKey(key), value: lc.meta, term: lc.fenceRec}
	if mk, ok := k.(*multiKind); ok {
		hm.keys = make([]any, len(mk.ks))
		for i, k := range mk.ks {
			hm.keys[i] = layout.MetaKey(k)
		}
	}
	return &metaKind{kind: k, meta: hm}
}

// mapKind returns f(k), carrying k's metadata if it has any.
func mapKind(k kind, f func(kind) kind) kind {
	if mk, ok := k.(*metaKind); ok {
		return &metaKind{kind: f(mk.kind), meta: mk.meta}
	}
	return f(k)
}

// forRelease is the kind's release kind, carrying the metadata.
func (mk *metaKind) forRelease() kind {
	if rk := mk.kind.forRelease(); rk != nil {
		return &metaKind{kind: rk, meta: mk.meta}
	}
	return nil
}

// command is what the kind sends, wrapped to keep the metadata; a
// waiter's leave touches no hold and is sent as it is.
func (mk *metaKind) command(r *round, op opKind, dst []any) (*scripts.Script, string, []any) {
	script, cmd, args := mk.kind.command(r, op, dst)
	if op == opLeave {
		return script, cmd, args
	}
	return mk.withMeta(r, op, script, args)
}

// WithMetadata stores value with the lock, on every master where it is
// held, for as long as it is held: who holds it (a host and process ID, a
// leader's address). Anyone can read it (Client.Inspect, layout.Holder's
// Meta, redlock status); it can neither take nor release the lock. It works
// with every lock kind; each reader of a read-write lock has its own, and a
// multi-key lock keeps it with each of its keys.
// value may hold any bytes, at most layout.MaxMeta of them; "" (the
// default) stores nothing, and the lock is sent as without the option.
func WithMetadata(value string) LockOption { return func(c *lockConfig) { c.meta = value } }

// checkMeta rejects metadata that is too long.
func checkMeta(lc *lockConfig) error {
	if len(lc.meta) > layout.MaxMeta {
		return fmt.Errorf("%w: metadata of %d bytes is longer than the maximum %d", ErrInvalid, len(lc.meta), layout.MaxMeta)
	}
	return nil
}

// Metadata returns the holder metadata the lock was acquired with
// (WithMetadata), or "".
func (l *Lock) Metadata() string {
	if l == nil || l.acq == nil {
		return ""
	}
	if mk, ok := l.acq.k.(*metaKind); ok {
		return mk.meta.value
	}
	return ""
}

// withMeta turns op's command into its wrapped form, which also keeps the
// holder's metadata (see internal/scripts/meta.go): the metadata hash
// after the script's keys (a multi-key lock's: one hash per key), and what
// to do with the field, the holder's token and the metadata after its
// values. A plain SET becomes the Acquire script.
func (mk *metaKind) withMeta(r *round, op opKind, script *scripts.Script, args []any) (*scripts.Script, string, []any) {
	if script == nil { // SET key token NX PX ttl
		script, args = scripts.Acquire, append(args[:0], r.key, r.token, r.ttlMS)
	}
	nkeys := script.KeyCount()
	if nkeys < 0 {
		nkeys = len(mk.keys(r.key))
	}
	what := scripts.MetaKeep
	switch {
	case op == opAcquire:
		what = scripts.MetaSet
	case mk.oneToken():
		// A reentrant owner's field is shared by all its holds: a last
		// release or rollback of an older hold that a master runs after
		// the owner's newer attempt there finds another hold id and leaves
		// that hold, so it must leave its metadata too. One that ends the
		// hold deletes the lock key, and the hash goes with it (its TTL
		// follows the lock key's).
	case op == opRollback:
		what = scripts.MetaDrop
	case op == opRelease && !mk.partial():
		what = scripts.MetaDrop // a reentrant owner's release of one hold of several keeps it
	}
	mkeys := []any{mk.meta.key}
	if mk.meta.keys != nil {
		mkeys = mk.meta.keys
	}
	args = slices.Insert(args, nkeys, mkeys...)
	args = append(args, what, r.token, mk.meta.value)
	return script.WithMeta(), "", args
}

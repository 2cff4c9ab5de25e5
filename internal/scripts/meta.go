package scripts

import _ "embed"

// Holder metadata.
//
// A lock that carries metadata (who holds it: a host, a process, a
// leader's address) runs its kind's usual script wrapped by meta_head.lua
// and meta_tail.lua: one more key (the metadata hash, last among the keys)
// and three more values (what to do, the holder's token or owner ID, the
// metadata) follow the script's own. The wrapped script runs unchanged and
// its reply is returned as it is; the wrapper then stores or removes the
// holder's field and makes the hash's TTL follow the lock key's. A lock
// without metadata sends its script (or its SET) as before.
//
// A multi-key lock keeps the metadata with each of its keys: multi.lua is
// wrapped by meta_multi_head.lua and meta_multi_tail.lua instead, which
// take one metadata hash per lock key (the lock keys, then their hashes
// in the same order) and make each hash's TTL follow its own key's. What
// a master holds is the layout of every other kind: any key's hash names
// its holder, for every reader of any version.

var (
	//go:embed acquire.lua
	acquireSrc string
	//go:embed meta_head.lua
	metaHead string
	//go:embed meta_tail.lua
	metaTail string
	//go:embed meta_multi_head.lua
	metaMultiHead string
	//go:embed meta_multi_tail.lua
	metaMultiTail string
)

// Acquire is SET NX PX as a script, only ever run wrapped (WithMeta): the
// plain lock sends the SET itself.
var Acquire = New("acquire", 1, acquireSrc)

// What a wrapped script does with the holder's metadata field, its
// third-last value.
const (
	MetaSet  = "set"  // store it if the script granted the lock
	MetaKeep = "keep" // leave it; only follow the lock key's TTL
	MetaDrop = "drop" // remove it
)

// metaScripts maps each script that can carry metadata to its wrapped
// form.
var metaScripts = func() map[*Script]*Script {
	m := map[*Script]*Script{}
	for _, s := range append(metaBase(), FairFencedAcquire) {
		n := s.keyCount
		if n >= 0 {
			n++
		}
		head, tail := metaHead, metaTail
		if s == Multi { // one hash per lock key
			head, tail = metaMultiHead, metaMultiTail
		}
		w := New(s.name, n, head+s.src+"\n"+tail)
		w.inner = s
		m[s] = w
	}
	return m
}()

// WithMeta returns s wrapped to keep holder metadata, or nil for a script
// that cannot carry it (Leave, FenceCommit, FencedWrite). The wrapped
// script keeps s's name, so errors name it as they name s.
func (s *Script) WithMeta() *Script { return metaScripts[s] }

// Inner returns the script s wraps to keep holder metadata, or s itself.
func (s *Script) Inner() *Script {
	if s.inner != nil {
		return s.inner
	}
	return s
}

// metaAll lists the wrapped scripts, for All.
func metaAll() []*Script {
	out := make([]*Script, 0, len(metaScripts))
	for _, s := range metaBase() { // FairFencedAcquire's is FairAcquire's
		out = append(out, metaScripts[s])
	}
	return out
}

// metaBase lists the scripts that can carry metadata, each source once
// (FairFencedAcquire is FairAcquire with one more key).
func metaBase() []*Script {
	return []*Script{Acquire, Release, Extend, FairAcquire, FairRelease, FencedAcquire, Reentrant, RW, Multi}
}

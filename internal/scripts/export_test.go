package scripts

import _ "embed"

// PreviousMultiWithMeta is multi.lua wrapped as the previous version did
// (one metadata hash, the first key's), for the tests of a rolling upgrade.
var PreviousMultiWithMeta = New("multi", -1, metaHead+multiSrc+"\n"+metaTail)

// PreviousReentrant is reentrant.lua as the previous version had it (a
// hold named by its owner alone, no hold id), for the tests of a rolling
// upgrade.
var PreviousReentrant = New("reentrant", 1, previousReentrantSrc)

//go:embed testdata/reentrant_previous.lua
var previousReentrantSrc string

// PreviousLeave is leave.lua as the previous version had it (two keys,
// never announced), for the tests of a rolling upgrade.
var PreviousLeave = New("leave", 2, previousLeaveSrc)

//go:embed testdata/leave_previous.lua
var previousLeaveSrc string

// PreviousFairRelease is fair_release.lua as the previous version had it
// (announced only when it deleted the key), for the tests of a rolling
// upgrade.
var PreviousFairRelease = New("fair_release", 3, previousFairReleaseSrc)

//go:embed testdata/fair_release_previous.lua
var previousFairReleaseSrc string

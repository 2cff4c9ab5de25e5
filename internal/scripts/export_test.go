package scripts

// PreviousMultiWithMeta is multi.lua wrapped as the previous version did
// (one metadata hash, the first key's), for the tests of a rolling upgrade.
var PreviousMultiWithMeta = New("multi", -1, metaHead+multiSrc+"\n"+metaTail)

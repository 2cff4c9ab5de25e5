package scripts

import _ "embed" // the fenced read-modify-write scripts

var (
	//go:embed fenced_read.lua
	fencedReadSrc string

	// FencedRead reads a value for a fencing token at least the highest
	// seen and records the token; see fenced_read.lua. Package fence runs
	// it (it is not among All: no lock connection loads it).
	FencedRead = New("fenced_read", 2, fencedReadSrc)
)

// FencedGet reads a value as GET does, with a reply a transport's shape
// check admits: "v" followed by the value, or "n" when there is none.
var FencedGet = New("fenced_get", 1, `local v = redis.call("GET", KEYS[1])
if v then
	return "v" .. v
end
return "n"
`)

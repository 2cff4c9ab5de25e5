-- Fenced acquisition of an election's term, phase two: fence_commit.lua,
-- and, in the same step, the term recorded beside the holder in the
-- metadata hash, so that a reader sees the holder and its term together
-- or neither (Election.Leader, leader_read.lua).
-- KEYS[1] lock key; KEYS[2] fencing counter; KEYS[3] the metadata hash
-- (layout.MetaKey); ARGV[1] token; ARGV[2] the term (the fencing token),
-- a decimal string without leading zeros.
-- The term goes in the field "term:" .. token (layout.TermField); the
-- hash's TTL follows the lock key's, as the metadata wrapper keeps it.
-- Returns 1 if the lock holds the token (the counter is now at least
-- ARGV[2] and the term is recorded), else 0.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
local cur = redis.call("GET", KEYS[2]) or "0"
local new = ARGV[2]
if #new > #cur or (#new == #cur and new > cur) then
	redis.call("SET", KEYS[2], new)
end
redis.call("HSET", KEYS[3], "term:" .. ARGV[1], new)
local left = redis.call("PTTL", KEYS[1])
if left > 0 then
	redis.call("PEXPIRE", KEYS[3], left)
end
return 1

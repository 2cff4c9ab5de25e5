-- Fenced acquisition, phase two: raise this master's fencing counter to
-- the token the client chose, only while the master still holds this
-- lock's token. The counter never goes down.
-- KEYS[1] lock key; KEYS[2] fencing counter; ARGV[1] token; ARGV[2] the
-- fencing token, a decimal string without leading zeros.
-- Counters are compared as decimal strings (length first), so they stay
-- exact beyond Lua's 2^53.
-- Returns 1 if the lock holds the token (the counter is now at least
-- ARGV[2]), else 0.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
local cur = redis.call("GET", KEYS[2]) or "0"
local new = ARGV[2]
if #new > #cur or (#new == #cur and new > cur) then
	redis.call("SET", KEYS[2], new)
end
return 1

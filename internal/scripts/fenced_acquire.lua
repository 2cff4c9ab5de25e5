-- Fenced acquisition, phase one: SET NX PX and, only when it succeeds,
-- return this master's fencing counter for the key.
-- KEYS[1] lock key; KEYS[2] fencing counter (no TTL; shares KEYS[1]'s
-- hash slot); ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns the counter as a decimal string ("0" when it was never set) if
-- the lock was set, else 0.
if redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	return redis.call("GET", KEYS[2]) or "0"
end
return 0

-- A waiting plain acquisition: SET NX PX that, when the key is held, tells
-- how long the holder's key has left, so that a waiter whose holder
-- vanished tries again when the key runs out rather than at its next
-- backoff or poll.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns OK if the lock was set; else the key's remaining TTL in
-- milliseconds (PTTL: -1 for a key without one), or -3 where the ACL user
-- may not run PTTL (checked first where Redis can, so that no refusal is
-- logged per attempt).
local set = redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])
if set then
	return set
end
if redis.acl_check_cmd and not redis.acl_check_cmd("PTTL", KEYS[1]) then
	return -3
end
local left = redis.pcall("PTTL", KEYS[1])
if type(left) == "table" then -- a refusal (Redis before 7.0 cannot check first)
	return -3
end
return left

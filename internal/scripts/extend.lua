-- Compare-and-PEXPIRE: give the lock a new time to live only if it still
-- holds this token. A missing key is never re-created: an expired lock is
-- lost, not silently taken again.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] new TTL in milliseconds.
-- Returns 1 if the TTL was set, 0 if the key was absent or held another token.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("PEXPIRE", KEYS[1], ARGV[2])
end
return 0

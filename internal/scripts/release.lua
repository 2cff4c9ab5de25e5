-- Compare-and-delete: remove the lock only if it still holds this token.
-- KEYS[1] lock key; ARGV[1] token.
-- Returns 1 if the key was deleted, 0 if it was absent or held another token.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	return redis.call("DEL", KEYS[1])
end
return 0

-- Release of a fair lock: compare-and-delete, take the holder's waiter
-- entry out of the queue so the next waiter is at the head, and announce
-- the release.
-- KEYS[1] lock; KEYS[2] queue; KEYS[3] deadlines.
-- ARGV[1] token; ARGV[2] channel ("" for none); ARGV[3] waiter id.
-- Returns 1 if the key was deleted, 0 if it was absent or held another token.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	redis.call("ZREM", KEYS[2], ARGV[3])
	redis.call("ZREM", KEYS[3], ARGV[3])
	if ARGV[2] ~= "" then
		redis.call("PUBLISH", ARGV[2], string.sub(ARGV[1], 1, 8))
	end
	return 1
end
return 0

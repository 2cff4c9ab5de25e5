-- Release of a fair lock: compare-and-delete, take the holder's waiter
-- entry out of the queue so the next waiter is at the head, and announce
-- the release. The entry goes on every master, also one that did not
-- grant the holder the lock (the key was held there for another): left
-- there, it would head that master's queue until it expired, and the
-- master would refuse every other waiter meanwhile.
-- KEYS[1] lock; KEYS[2] queue; KEYS[3] deadlines.
-- ARGV[1] token; ARGV[2] channel ("" for none); ARGV[3] waiter id.
-- Returns 1 if the key was deleted, 0 if it was absent or held another token.
redis.call("ZREM", KEYS[2], ARGV[3])
redis.call("ZREM", KEYS[3], ARGV[3])
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	if ARGV[2] ~= "" then
		redis.call("PUBLISH", ARGV[2], string.sub(ARGV[1], 1, 8))
	end
	return 1
end
return 0

-- A fair waiter that gives up leaves the key's queue. When the lock is
-- free and a waiter remains, the waiter first now may sleep: the key
-- expired unannounced, or the leaver was first and a release woke it
-- before it gave up. The leave then announces itself on the channel, as a
-- release would (the message is the waiter id's first 8 characters).
-- KEYS[1] queue; KEYS[2] deadlines; KEYS[3] lock.
-- ARGV[1] waiter id; ARGV[2] channel ("" for none).
-- Returns 1 if it was queued, else 0.
redis.call("ZREM", KEYS[2], ARGV[1])
local queued = redis.call("ZREM", KEYS[1], ARGV[1])
if ARGV[2] ~= "" and redis.call("EXISTS", KEYS[3]) == 0
	and redis.call("ZRANGE", KEYS[1], 0, 0)[1] then
	redis.call("PUBLISH", ARGV[2], string.sub(ARGV[1], 1, 8))
end
return queued

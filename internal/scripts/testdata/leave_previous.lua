-- A fair waiter that gives up leaves the key's queue.
-- KEYS[1] queue; KEYS[2] deadlines. ARGV[1] waiter id.
-- Returns 1 if it was queued, else 0.
redis.call("ZREM", KEYS[2], ARGV[1])
return redis.call("ZREM", KEYS[1], ARGV[1])

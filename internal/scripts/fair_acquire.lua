-- Fair acquisition: the lock goes to the waiter at the head of the key's
-- queue. Waiters join the queue in arrival order (the score the client
-- gives, the same on every master, so all masters agree on the order) and
-- stay in it only while they keep trying: an entry not refreshed for
-- ARGV[5] ms is dropped, so a vanished waiter cannot block the queue.
-- KEYS[1] lock; KEYS[2] queue (zset: waiter -> arrival);
-- KEYS[3] deadlines (zset: waiter -> expiry, master ms).
-- ARGV[1] token; ARGV[2] TTL ms; ARGV[3] waiter id; ARGV[4] arrival;
-- ARGV[5] entry TTL ms.
-- With a fourth key, KEYS[4] the fencing counter (see fenced_acquire.lua).
-- Returns 1 if the lock was set (with KEYS[4]: the counter as a decimal
-- string), 0 if it is held or another waiter is first.
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now)
for _, w in ipairs(gone) do
	redis.call("ZREM", KEYS[2], w)
	redis.call("ZREM", KEYS[3], w)
end
redis.call("ZADD", KEYS[2], "NX", ARGV[4], ARGV[3])
redis.call("ZADD", KEYS[3], now + tonumber(ARGV[5]), ARGV[3])
redis.call("PEXPIRE", KEYS[2], ARGV[5])
redis.call("PEXPIRE", KEYS[3], ARGV[5])
if redis.call("EXISTS", KEYS[1]) == 1 then
	return 0
end
if redis.call("ZRANGE", KEYS[2], 0, 0)[1] ~= ARGV[3] then
	return 0
end
redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
if KEYS[4] then
	return redis.call("GET", KEYS[4]) or "0"
end
return 1

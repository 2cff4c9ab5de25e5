-- A plain lock's waiter that gives up leaves the key's line. When the
-- key holds its marker (a release handed the key over to it), it passes
-- the hand-over on to the next waiter in line, or frees the key when
-- nobody waits, and announces that as a release would.
-- KEYS[1] lock; KEYS[2] line; KEYS[3] the line's deadlines.
-- ARGV[1] waiter id; ARGV[2] channel ("" for none); ARGV[3] the marker's
-- TTL, ms.
-- Returns 1 if it was in line or held the marker, else 0.
local queued = redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("ZREM", KEYS[3], ARGV[1])
if redis.call("GET", KEYS[1]) ~= "h:" .. ARGV[1] then
	return queued
end
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now, "LIMIT", 0, 16)
for _, w in ipairs(gone) do
	redis.call("ZREM", KEYS[2], w)
	redis.call("ZREM", KEYS[3], w)
end
local msg = string.sub(ARGV[1], 1, 8)
local head = redis.call("ZRANGE", KEYS[2], 0, 0)[1]
if head then
	redis.call("SET", KEYS[1], "h:" .. head, "PX", ARGV[3])
	redis.call("ZREM", KEYS[2], head)
	redis.call("ZREM", KEYS[3], head)
	msg = msg .. "!h" .. string.sub(head, 1, 8)
else
	redis.call("DEL", KEYS[1])
end
if ARGV[2] ~= "" then
	redis.call("PUBLISH", ARGV[2], msg)
end
return 1

-- A plain lock's release, with its line (line_acquire.lua): compare-and-
-- delete, and announce it. The release hands the key over to the waiter
-- at the head of the line instead when that has waited at least ARGV[3]
-- ms (since its arrival on its client's clock, by this master's: a skew
-- between the two only moves when the hand-over begins) and no release
-- handed the key over in the last ARGV[3] ms (KEYS[4] exists for that
-- long after one): the key holds the marker "h:" and the head's waiter
-- id for ARGV[4] ms, which refuses every SET NX but that waiter's
-- attempt, and the head leaves the line. Otherwise the key is free for
-- whoever comes first, the releaser too, and the notice names the head as
-- the candidate. So a key under steady contention is handed over at most
-- once per ARGV[3] ms, to the waiter first in line, and taken straight
-- back by whoever holds it in between.
-- Entries past their deadline are dropped first (at most 16 a call).
-- KEYS[1] lock; KEYS[2] line; KEYS[3] the line's deadlines; KEYS[4] the
-- line's turn (set when a release hands over, for ARGV[3] ms).
-- ARGV[1] token; ARGV[2] channel to PUBLISH on ("" for none); ARGV[3] how
-- long the head must have waited, and the turn lasts, ms (at least 1);
-- ARGV[4] the marker's TTL, ms; ARGV[5] "1" to announce a free key too,
-- "" to announce only a hand-over (a rollback: waking every waiter after
-- a split vote would split it again); ARGV[6] the holder's own waiter id,
-- or "": its entry leaves the line first (a master that refused the
-- holder's attempts keeps it in line after a quorum granted it).
-- The message is the token's first 8 characters, then "!h" and the
-- heir's first 8 (a hand-over), or "!c" and the head's first 8 (a
-- candidate), then, without a hand-over, "/" and the channel's
-- subscriber count where the ACL allows PUBSUB (as release.lua).
-- Returns 1 if the key was the token's (deleted or handed over), 0 if it
-- was absent or held another token (or a marker), as release.lua.
if ARGV[6] ~= "" then
	redis.call("ZREM", KEYS[2], ARGV[6])
	redis.call("ZREM", KEYS[3], ARGV[6])
end
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
	return 0
end
local t = redis.call("TIME")
local us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(us / 1000)
local gone = redis.call("ZRANGEBYSCORE", KEYS[3], "-inf", now, "LIMIT", 0, 16)
for _, w in ipairs(gone) do
	redis.call("ZREM", KEYS[2], w)
	redis.call("ZREM", KEYS[3], w)
end
local msg = string.sub(ARGV[1], 1, 8)
local head = redis.call("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
if head[1] and us - tonumber(head[2]) >= tonumber(ARGV[3]) * 1000
	and redis.call("EXISTS", KEYS[4]) == 0 then
	redis.call("SET", KEYS[1], "h:" .. head[1], "PX", ARGV[4])
	redis.call("SET", KEYS[4], us, "PX", ARGV[3])
	redis.call("ZREM", KEYS[2], head[1])
	redis.call("ZREM", KEYS[3], head[1])
	if ARGV[2] ~= "" then
		redis.call("PUBLISH", ARGV[2], msg .. "!h" .. string.sub(head[1], 1, 8))
	end
	return 1
end
redis.call("DEL", KEYS[1])
if ARGV[2] ~= "" and ARGV[5] ~= "" then
	if head[1] then
		msg = msg .. "!c" .. string.sub(head[1], 1, 8)
	end
	if redis.acl_check_cmd and redis.acl_check_cmd("PUBSUB", "NUMSUB", ARGV[2]) then
		msg = msg .. "/" .. redis.call("PUBSUB", "NUMSUB", ARGV[2])[2]
	end
	redis.call("PUBLISH", ARGV[2], msg)
end
return 1

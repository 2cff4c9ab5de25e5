-- Heal: put a lock back on a master that lost it (it restarted or was
-- flushed) while the lock still holds a quorum on the others. Only where
-- the key is absent: a key that holds anything else (another holder's
-- token, another kind) is never touched.
-- KEYS[1] lock key; KEYS[2] fencing counter; KEYS[3] metadata hash
-- (layout.MetaKey). ARGV[1] token; ARGV[2] TTL in milliseconds (what is
-- left of the lock's validity); ARGV[3] the lock's fencing token, a
-- decimal string without leading zeros ("0": not fenced); ARGV[4] "0" (no
-- metadata), "1" (metadata) or "2" (an election's: metadata and term);
-- ARGV[5] the metadata.
-- With the lock set, the counter is raised to the lock's fencing token
-- (never lowered), and the metadata (and an election's term, the fencing
-- token) written beside the holder, the hash given the key's TTL.
-- Returns 1 when the master holds the token now (set here, or there
-- already), else 0.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
	-- pcall: a key of another kind answers GET with an error, a refusal.
	if redis.pcall("GET", KEYS[1]) == ARGV[1] then
		return 1
	end
	return 0
end
local new = ARGV[3]
if new ~= "0" then
	local cur = redis.call("GET", KEYS[2]) or "0"
	if #new > #cur or (#new == #cur and new > cur) then
		redis.call("SET", KEYS[2], new)
	end
end
if ARGV[4] ~= "0" then
	redis.call("HSET", KEYS[3], ARGV[1], ARGV[5])
	if ARGV[4] == "2" and new ~= "0" then
		redis.call("HSET", KEYS[3], "term:" .. ARGV[1], new)
	end
	redis.call("PEXPIRE", KEYS[3], ARGV[2])
end
return 1

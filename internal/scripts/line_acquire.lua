-- A plain lock's waiting acquisition, in line: the lock goes to whoever
-- finds the key absent (SET NX), or to the waiter a release handed the key
-- over to, which finds the key holding its marker, "h:" and its waiter id
-- (line_release.lua). Refused, the waiter joins the key's line, keeping
-- its place when it is in it already, and learns how long the key has
-- left. An entry not refreshed by an attempt for ARGV[5] ms is dropped,
-- so a vanished waiter holds up the line once at most.
-- KEYS[1] lock; KEYS[2] line (zset: waiter -> arrival, µs);
-- KEYS[3] the line's deadlines (zset: waiter -> expiry, master ms).
-- ARGV[1] token; ARGV[2] TTL ms; ARGV[3] waiter id; ARGV[4] "" or "1":
-- join the line when refused; ARGV[5] entry TTL ms; ARGV[6] the waiter's
-- arrival, µs on the client's clock: the same on every master, so that
-- every master orders the line alike (ties by waiter id).
-- Returns OK if the lock was set; else the key's remaining TTL in
-- milliseconds (PTTL: -1 for a key without one), or -3 where the ACL user
-- may not run PTTL (as wait_acquire.lua).
local held = redis.call("GET", KEYS[1])
if not held or held == "h:" .. ARGV[3] then
	redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
	redis.call("ZREM", KEYS[2], ARGV[3])
	redis.call("ZREM", KEYS[3], ARGV[3])
	return {ok = "OK"}
end
if ARGV[4] ~= "" then
	local t = redis.call("TIME")
	local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
	redis.call("ZADD", KEYS[2], "NX", ARGV[6], ARGV[3])
	redis.call("ZADD", KEYS[3], now + tonumber(ARGV[5]), ARGV[3])
	-- The line lives as long as its longest-lived entry.
	if redis.call("PTTL", KEYS[2]) < tonumber(ARGV[5]) then
		redis.call("PEXPIRE", KEYS[2], ARGV[5])
		redis.call("PEXPIRE", KEYS[3], ARGV[5])
	end
end
if redis.acl_check_cmd and not redis.acl_check_cmd("PTTL", KEYS[1]) then
	return -3
end
local left = redis.pcall("PTTL", KEYS[1])
if type(left) == "table" then
	return -3
end
return left

-- A reentrant lock on one hash: field = owner, value = hold count. Only
-- one owner at a time. Counts are set, never incremented, so a master that
-- missed an update is put right by the next one.
-- KEYS[1] the lock's hash; ARGV[1] op; ARGV[2] owner.
--   "acquire" ARGV[3] TTL ms, ARGV[4] count: take or re-take the lock for
--             owner and set its count; 1, or 0 if another owner holds it.
--   "release" ARGV[3] count, ARGV[4] channel ("" for none), ARGV[5] the
--             release's id (optional): if owner holds it, set the count,
--             or with count 0 delete the lock and announce it (by its id:
--             every release of an owner needs its own, so that waiters
--             tell them apart; the owner's first 8 characters without
--             one); 1, or 0 if owner does not hold it.
--   "extend"  ARGV[3] TTL ms: give the lock a new TTL if owner holds it;
--             1, or 0.
local key, op, owner = KEYS[1], ARGV[1], ARGV[2]
local ours = redis.call("HEXISTS", key, owner) == 1
if op == "acquire" then
	if not ours and redis.call("EXISTS", key) == 1 then
		return 0
	end
	redis.call("HSET", key, owner, ARGV[4])
	redis.call("PEXPIRE", key, ARGV[3])
	return 1
end
if not ours then
	return 0
end
if op == "extend" then
	redis.call("PEXPIRE", key, ARGV[3])
	return 1
end
-- release
if tonumber(ARGV[3]) > 0 then
	redis.call("HSET", key, owner, ARGV[3])
	return 1
end
redis.call("DEL", key)
if ARGV[4] ~= "" then
	local id = ARGV[5]
	if id == nil or id == "" then
		id = string.sub(owner, 1, 8)
	end
	redis.call("PUBLISH", ARGV[4], id)
end
return 1

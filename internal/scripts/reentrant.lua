-- A reentrant lock on one hash: field = owner, value = hold count, and the
-- field "" (which no owner can be: an owner ID is never empty) = the id of
-- the hold. Only one owner at a time. Counts are set, never incremented,
-- so a master that missed an update is put right by the next one.
--
-- A hold's id is new for every acquisition attempt of a first hold and
-- kept by the rounds of the hold it grants (taking it again, extending,
-- giving holds back); it is "<name>:<n>", the name of the client's
-- Reentrant and the number of its attempt. A command that carries an id
-- acts only on the hold with that id: an owner's older release, rollback,
-- re-entry or extension that a master runs late, after the same owner's
-- newer attempt, finds another id and changes nothing. An acquisition
-- takes over only an older hold of the same name (a smaller number: a
-- hold its Reentrant no longer has); a newer one, or another Reentrant's
-- hold of the owner, refuses it as another owner would, until that hold
-- is released or expires. A hold without an id (written by a client of
-- the previous version) and a command without one (its arguments) match
-- any id of the owner, as before ids existed.
--
-- KEYS[1] the lock's hash; ARGV[1] op; ARGV[2] owner.
--   "acquire" ARGV[3] TTL ms, ARGV[4] count, ARGV[5] the hold's id
--             (optional): take or re-take the lock for owner and set its
--             count; 1, or 0 if another owner, or a hold of owner that
--             this attempt may not take over, holds it.
--   "release" ARGV[3] count, ARGV[4] channel ("" for none), ARGV[5] the
--             release's id ("" or absent for none), ARGV[6] the hold's id
--             (optional): if the hold is there, set the count, or with
--             count 0 delete the lock and announce it (by the release's
--             id: every release of an owner needs its own, so that
--             waiters tell them apart; the owner's first 8 characters
--             without one); 1, or 0 if the hold is not there.
--   "extend"  ARGV[3] TTL ms, ARGV[4] the hold's id (optional): give the
--             lock a new TTL if the hold is there; 1, or 0.
local key, op, owner = KEYS[1], ARGV[1], ARGV[2]
local id
if op == "acquire" then
	id = ARGV[5]
elseif op == "extend" then
	id = ARGV[4]
else
	id = ARGV[6]
end
local ours = redis.call("HEXISTS", key, owner) == 1
if ours and id and id ~= "" then
	local held = redis.call("HGET", key, "")
	if held and held ~= id then
		-- Another hold of this owner: not the one this command is for.
		-- An acquisition may take it over only from an older attempt of
		-- the same Reentrant (same name, smaller count).
		ours = false
		if op == "acquire" then
			local hn, hc = string.match(held, "^(.*):(%d+)$")
			local n, c = string.match(id, "^(.*):(%d+)$")
			if hn and n and hn == n and tonumber(hc) < tonumber(c) then
				ours = true
			end
		end
	end
end
if op == "acquire" then
	if not ours and redis.call("EXISTS", key) == 1 then
		return 0
	end
	if id and id ~= "" then
		redis.call("HSET", key, owner, ARGV[4], "", id)
	else
		redis.call("HSET", key, owner, ARGV[4])
	end
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
	local rid = ARGV[5]
	if rid == nil or rid == "" then
		rid = string.sub(owner, 1, 8)
	end
	redis.call("PUBLISH", ARGV[4], rid)
end
return 1

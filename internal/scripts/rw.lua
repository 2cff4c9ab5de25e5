-- A read-write lock on one hash, so that it lives in one Redis Cluster
-- slot: many readers or one writer. Every holder has its own entry with
-- its own expiry (master milliseconds): "r:<token>" or "w:<token>" ->
-- expiry. A writer blocked by readers leaves an intent ("intent" -> its
-- token, "intent:exp" -> expiry) that turns new readers away until it
-- acquires or the intent expires (a vanished writer blocks readers only
-- that long). The hash's own TTL follows its latest expiry.
-- KEYS[1] the hash; ARGV[1] op; ARGV[2] token.
--   "read"  ARGV[3] TTL ms: a read hold; 1, 0 while a writer holds it, or
--           2 while no writer holds it but a waiting writer's intent
--           stands (the reader is turned away for the writer).
--   "write" ARGV[3] TTL ms, ARGV[4] intent TTL ms, ARGV[5] the writer's
--           id (the same for all attempts of one wait): the write hold;
--           1, or 0 while another writer or any reader holds it (then the
--           intent is set or refreshed, unless another writer's stands).
--   "extend-read" / "extend-write" ARGV[3] TTL ms: a new expiry for the
--           token's own entry; 1, or 0 if it has none.
--   "release-read" / "release-write" ARGV[3] channel ("" for none):
--           delete the token's own entry, and announce it when the lock
--           became free or a writer left; 1, or 0 if it had none. A
--           writer's release (not a rollback) gives ARGV[4], its id: its
--           intent goes too, also on a master that did not grant it the
--           lock (which set the intent instead, and would otherwise turn
--           readers and other writers away until it expired).
--   "leave" a writer that gives up withdraws its intent (ARGV[2] is its
--           id) and, ARGV[3] a channel ("" or absent for none), announces
--           it unless a writer holds the lock: the readers it turned away
--           may enter; 1, or 0.
local key, op, tok = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call("TIME")
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

-- A hash with a field of no read-write lock (a reentrant lock's owner or
-- hold id) is another kind's: refuse before writing anything.
local all = redis.call("HGETALL", key)
for i = 1, #all, 2 do
	local f = all[i]
	local p = string.sub(f, 1, 2)
	if f ~= "intent" and f ~= "intent:exp" and p ~= "r:" and p ~= "w:" then
		return redis.error_reply("WRONGTYPE quorumlock: the key holds a reentrant lock")
	end
end

-- Drop what expired; count what is left.
local readers, writer, intent = 0, nil, nil
local intentExp = 0
for i = 1, #all, 2 do
	if all[i] == "intent:exp" then
		intentExp = tonumber(all[i + 1])
	end
end
for i = 1, #all, 2 do
	local f, v = all[i], all[i + 1]
	if f == "intent" then
		if intentExp > now then
			intent = v
		else
			redis.call("HDEL", key, "intent", "intent:exp")
		end
	elseif f ~= "intent:exp" then
		local e = tonumber(v)
		if not e or e <= now then
			redis.call("HDEL", key, f)
		elseif string.sub(f, 1, 2) == "r:" then
			readers = readers + 1
		else
			writer = string.sub(f, 3)
		end
	end
end

-- Set the hash's TTL to its latest expiry, or delete it when empty.
local function settle()
	local latest = 0
	local rest = redis.call("HGETALL", key)
	for i = 1, #rest, 2 do
		if rest[i] ~= "intent" then
			local e = tonumber(rest[i + 1])
			if e > latest then
				latest = e
			end
		end
	end
	if latest > now then
		redis.call("PEXPIREAT", key, latest)
	else
		redis.call("DEL", key)
	end
end

local result = 0
if op == "read" then
	if not writer and not intent then
		redis.call("HSET", key, "r:" .. tok, now + tonumber(ARGV[3]))
		result = 1
	elseif not writer then
		result = 2
	end
elseif op == "write" then
	local id = ARGV[5]
	if not writer and readers == 0 and (not intent or intent == id) then
		redis.call("HSET", key, "w:" .. tok, now + tonumber(ARGV[3]))
		if intent == id then
			redis.call("HDEL", key, "intent", "intent:exp")
		end
		result = 1
	elseif not intent or intent == id then
		redis.call("HSET", key, "intent", id, "intent:exp", now + tonumber(ARGV[4]))
	end
elseif op == "extend-read" or op == "extend-write" then
	local f = (op == "extend-read" and "r:" or "w:") .. tok
	if redis.call("HEXISTS", key, f) == 1 then
		redis.call("HSET", key, f, now + tonumber(ARGV[3]))
		result = 1
	end
elseif op == "release-read" or op == "release-write" then
	local f = (op == "release-read" and "r:" or "w:") .. tok
	if ARGV[4] and ARGV[4] ~= "" and intent == ARGV[4] then
		redis.call("HDEL", key, "intent", "intent:exp")
	end
	if redis.call("HDEL", key, f) == 1 then
		result = 1
		if op == "release-read" then
			readers = readers - 1
		end
		if ARGV[3] ~= "" and (op == "release-write" or readers == 0) then
			redis.call("PUBLISH", ARGV[3], string.sub(tok, 1, 8))
		end
	end
elseif op == "leave" then
	if intent == tok then
		redis.call("HDEL", key, "intent", "intent:exp")
		result = 1
		if ARGV[3] and ARGV[3] ~= "" and not writer then
			redis.call("PUBLISH", ARGV[3], string.sub(tok, 1, 8))
		end
	end
end
settle()
return result

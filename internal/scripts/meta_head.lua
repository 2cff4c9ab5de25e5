-- Holder metadata, wrapped around a lock script (see meta.go): the
-- script's own KEYS and ARGV come first, then one more key and three more
-- values.
-- KEYS[#KEYS] the metadata hash (field: a holder's token or owner ID,
-- value: its metadata); ARGV[#ARGV-2] "set", "keep" or "drop";
-- ARGV[#ARGV-1] the holder's token or owner ID; ARGV[#ARGV] the metadata.
-- The script runs unchanged on the rest and its reply is returned as it
-- is. Afterwards, "set" stores the metadata if the script granted the
-- lock, "drop" removes it; and the hash's TTL follows the lock key's
-- (KEYS[1]), so it lives as long as the longest hold and goes with the key.
-- No lock script ever reads the hash: metadata can neither take nor
-- release a lock.
local metaKey = KEYS[#KEYS]
local metaOp, metaID, metaValue = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local lockKey = KEYS[1]
-- A value of another type at the metadata key (a user's, a foreign
-- writer's) fails an acquisition before the lock script writes anything:
-- its WRONGTYPE, raised after the lock key's write, would read as the lock
-- key holding another kind and leave a hold nobody tracks.
if metaOp == "set" then
	local t = redis.pcall("HEXISTS", metaKey, metaID)
	if type(t) == "table" and t.err then
		return redis.error_reply("ERR quorumlock: the metadata key cannot hold metadata: " .. t.err)
	end
end
local reply
do
	local KEYS = { unpack(KEYS, 1, #KEYS - 1) }
	local ARGV = { unpack(ARGV, 1, #ARGV - 3) }
	reply = (function()

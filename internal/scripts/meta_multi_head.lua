-- Holder metadata, wrapped around multi.lua (see meta.go): every lock key
-- has its own metadata hash, so the holder of any of its keys can be told.
-- KEYS[1..n] the lock keys, KEYS[n+1..2n] their metadata hashes, in the
-- same order (field: a holder's token, value: its metadata);
-- ARGV[#ARGV-2] "set", "keep" or "drop"; ARGV[#ARGV-1] the holder's token;
-- ARGV[#ARGV] the metadata. multi.lua runs unchanged on the lock keys and
-- the rest of ARGV, and its reply is returned as it is. Afterwards, for
-- each lock key, "set" stores the metadata in its hash if the script
-- granted the lock, "drop" removes it; and each hash's TTL follows its own
-- lock key's, so it goes with that key. No lock script ever reads the
-- hashes: metadata can neither take nor release a lock.
local n = #KEYS / 2
local metaOp, metaID, metaValue = ARGV[#ARGV - 2], ARGV[#ARGV - 1], ARGV[#ARGV]
local lockKeys = { unpack(KEYS, 1, n) }
local metaKeys = { unpack(KEYS, n + 1, 2 * n) }
-- A value of another type at a metadata key fails an acquisition before
-- multi.lua writes anything (see meta_head.lua).
if metaOp == "set" then
	for i = 1, n do
		local t = redis.pcall("HEXISTS", metaKeys[i], metaID)
		if type(t) == "table" and t.err then
			return redis.error_reply("ERR quorumlock: the metadata key cannot hold metadata: " .. t.err)
		end
	end
end
local reply
do
	local KEYS = lockKeys
	local ARGV = { unpack(ARGV, 1, #ARGV - 3) }
	reply = (function()

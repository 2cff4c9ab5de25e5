-- An election's leader as this master holds it, read in one step
-- (Election.Leader): the lock key's token and TTL, the term recorded for
-- that token (fence_commit_term.lua) and its metadata. It writes nothing.
-- KEYS[1] lock key; KEYS[2] metadata hash (layout.MetaKey); ARGV[1] the
-- most bytes of a token, ARGV[2] of the metadata, that are sent back.
-- Returns {} when KEYS[1] holds no token (missing, not a string, empty or
-- longer than ARGV[1]); else {token, PTTL in ms, term or nil, metadata or
-- nil}, the metadata cut at ARGV[2] bytes.
if redis.call("TYPE", KEYS[1]).ok ~= "string" then
	return {}
end
local tok = redis.call("GET", KEYS[1])
if not tok or #tok == 0 or #tok > tonumber(ARGV[1]) then
	return {}
end
local term = redis.call("HGET", KEYS[2], "term:" .. tok)
local meta = redis.call("HGET", KEYS[2], tok)
if meta then
	meta = string.sub(meta, 1, tonumber(ARGV[2]))
end
if term and #term > 20 then
	term = string.sub(term, 1, 21)
end
return { tok, redis.call("PTTL", KEYS[1]), term, meta }

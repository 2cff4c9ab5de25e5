-- An election's leader as this master holds it, read in one step
-- (Election.Leader): the lock key's token and TTL, the term recorded for
-- that token (fence_commit_term.lua) and its metadata. It writes nothing.
-- KEYS[1] lock key; KEYS[2] metadata hash (layout.MetaKey); ARGV[1] the
-- most bytes of a token, ARGV[2] of the metadata, that are sent back.
-- Returns {} when KEYS[1] holds no token (missing, not a string, empty or
-- longer than ARGV[1]); else {token, PTTL in ms, term or nil, metadata or
-- nil}, the metadata cut at ARGV[2] bytes.
-- GET by pcall: a key of another type answers WRONGTYPE, which is no
-- token (no TYPE needed: one command fewer for an ACL to allow); any other
-- error (an ACL refusal) is the reply, not hidden as "no leader".
local tok = redis.pcall("GET", KEYS[1])
if tok and type(tok) ~= "string" and not string.find(tok.err or "", "WRONGTYPE", 1, true) then
	return tok -- the error, as the reply
end
if type(tok) ~= "string" or #tok == 0 or #tok > tonumber(ARGV[1]) then
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

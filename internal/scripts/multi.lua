-- A lock on several keys at once, all or nothing on this master.
-- KEYS the lock's keys; ARGV[1] op; ARGV[2] token.
--   "acquire" ARGV[3] TTL ms: set every key to the token if none exists;
--             1, or 0 (and nothing set) if any exists.
--   "extend"  ARGV[3] TTL ms: if every key holds the token, give each the
--             new TTL; 1, or 0 (and nothing changed).
--   "release" ARGV[3] channel prefix ("" for none): delete each key that
--             holds the token and announce it on prefix..key; 1 if every
--             key held it, else 0.
local op, tok = ARGV[1], ARGV[2]
if op == "acquire" then
	for _, k in ipairs(KEYS) do
		if redis.call("EXISTS", k) == 1 then
			return 0
		end
	end
	for _, k in ipairs(KEYS) do
		redis.call("SET", k, tok, "PX", ARGV[3])
	end
	return 1
end
if op == "extend" then
	for _, k in ipairs(KEYS) do
		if redis.call("GET", k) ~= tok then
			return 0
		end
	end
	for _, k in ipairs(KEYS) do
		redis.call("PEXPIRE", k, ARGV[3])
	end
	return 1
end
local all = 1
for _, k in ipairs(KEYS) do
	if redis.call("GET", k) == tok then
		redis.call("DEL", k)
		if ARGV[3] ~= "" then
			redis.call("PUBLISH", ARGV[3] .. k, string.sub(tok, 1, 8))
		end
	else
		all = 0
	end
end
return all

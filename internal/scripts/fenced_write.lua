-- Fenced write: store a value only for a holder whose fencing token is at
-- least the highest token this resource has seen (read or written), and
-- remember the token. KEYS[1] the data key; KEYS[2] the resource's highest
-- token seen (shares KEYS[1]'s hash slot); ARGV[1] the writer's fencing
-- token, a decimal string without leading zeros; ARGV[2] the value; ARGV[3]
-- the data's TTL in milliseconds ("0" for none).
-- Returns 0 when written, or the highest token (a decimal bulk string) when
-- the token is stale: one integer or bulk string, which a transport's reply
-- shape check admits.
local seen = redis.call("GET", KEYS[2]) or "0"
local tok = ARGV[1]
if #tok < #seen or (#tok == #seen and tok < seen) then
	return seen
end
redis.call("SET", KEYS[2], tok)
if ARGV[3] ~= "0" then
	redis.call("SET", KEYS[1], ARGV[2], "PX", ARGV[3])
else
	redis.call("SET", KEYS[1], ARGV[2])
end
return 0

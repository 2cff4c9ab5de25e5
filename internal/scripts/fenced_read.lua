-- Fenced read: return a value to a reader whose fencing token is at least
-- the highest token this resource has seen, and remember the token, so that
-- every holder with a lower token is refused from then on (its writes, and
-- its reads). KEYS[1] the data key; KEYS[2] the resource's highest token
-- seen (shares KEYS[1]'s hash slot); ARGV[1] the reader's fencing token, a
-- decimal string without leading zeros.
-- Returns one bulk string: "v" followed by the value, "n" when there is no
-- value, or "s" followed by the highest token when the token is stale.
local seen = redis.call("GET", KEYS[2]) or "0"
local tok = ARGV[1]
if #tok < #seen or (#tok == #seen and tok < seen) then
	return "s" .. seen
end
redis.call("SET", KEYS[2], tok)
local v = redis.call("GET", KEYS[1])
if v then
	return "v" .. v
end
return "n"

-- The plain acquisition as a script: SET NX PX. The plain lock sends the
-- SET itself; this form exists only to be wrapped by meta.lua when the
-- lock carries holder metadata.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] TTL in milliseconds.
-- Returns OK if the lock was set, nil if the key exists.
return redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])

-- Compare-and-delete: remove the lock only if it still holds this token,
-- and announce the release to waiters.
-- KEYS[1] lock key; ARGV[1] token; ARGV[2] channel to PUBLISH on ("" for
-- none).
-- The message is the token's first 8 characters (enough for a waiting
-- client to tell one release from another, as each master announces it;
-- not enough to act as the token), then "/" and how many connections this
-- master had subscribed to the channel (one per waiting client): a lone
-- waiter needs no delay before its attempt. The count needs PUBSUB, which
-- the minimal ACL does not grant: it is left out, without a refusal (and
-- an ACL log entry) per release, where the user may not run it, and on a
-- Redis older than 7.0, which cannot tell.
-- Returns 1 if the key was deleted, 0 if it was absent or held another token.
if redis.call("GET", KEYS[1]) == ARGV[1] then
	redis.call("DEL", KEYS[1])
	if ARGV[2] ~= "" then
		local msg = string.sub(ARGV[1], 1, 8)
		if redis.acl_check_cmd and redis.acl_check_cmd("PUBSUB", "NUMSUB", ARGV[2]) then
			msg = msg .. "/" .. redis.call("PUBSUB", "NUMSUB", ARGV[2])[2]
		end
		redis.call("PUBLISH", ARGV[2], msg)
	end
	return 1
end
return 0

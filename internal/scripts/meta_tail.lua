	end)()
end
if metaOp == "set" and reply and reply ~= 0 then
	redis.call("HSET", metaKey, metaID, metaValue)
elseif metaOp == "drop" then
	redis.pcall("HDEL", metaKey, metaID) -- a key of another type: the release stands
end
local left = redis.call("PTTL", lockKey)
if left > 0 then
	redis.call("PEXPIRE", metaKey, left)
elseif left == -2 then
	redis.call("DEL", metaKey)
end
return reply

	end)()
end
for i = 1, n do
	local metaKey = metaKeys[i]
	if metaOp == "set" and reply and reply ~= 0 then
		redis.call("HSET", metaKey, metaID, metaValue)
	elseif metaOp == "drop" then
		redis.pcall("HDEL", metaKey, metaID) -- a key of another type: the release stands
	end
	local left = redis.call("PTTL", lockKeys[i])
	if left > 0 then
		redis.call("PEXPIRE", metaKey, left)
	elseif left == -2 then
		redis.call("DEL", metaKey)
	end
end
return reply

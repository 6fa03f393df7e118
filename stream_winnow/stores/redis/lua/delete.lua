-- Deletes feature rows of one shard and keeps its row count and write counter true.
-- KEYS[1] shard row count, KEYS[2] its write counter, KEYS[3..] feature rows. Returns how many rows existed.

local n = 0
for i = 3, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
if n > 0 then
  redis.call('DECRBY', KEYS[1], n)
  redis.call('INCR', KEYS[2])
end
return n

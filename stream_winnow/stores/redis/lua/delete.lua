-- Deletes feature rows of one shard and keeps its row count, write counter and change log true.
-- KEYS[1] shard row count, KEYS[2] its write counter, KEYS[3] its change log, KEYS[4..] feature rows.
-- ARGV[1] the change log's length, ARGV[2] the rows' feature ids (packed int64, in KEYS order).
-- Returns how many rows existed.

local n = 0
for i = 4, #KEYS do n = n + redis.call('DEL', KEYS[i]) end
if n > 0 then
  redis.call('DECRBY', KEYS[1], n)
  local writes = redis.call('INCR', KEYS[2])
  redis.call('RPUSH', KEYS[3], struct.pack('<i8', writes) .. ARGV[2])
  redis.call('LTRIM', KEYS[3], -tonumber(ARGV[1]), -1)
end
return n

-- The model's table layout, checked or set, and a column for each category name (new names are appended).
-- KEYS[1] category list, KEYS[2] name -> column hash, KEYS[3] layout.
-- ARGV[1] layout, ARGV[2] categories the caller knows, ARGV[3..] names. Returns {columns, new tail of the list}.

local layout = redis.call('GET', KEYS[3])
if not layout then
  redis.call('SET', KEYS[3], ARGV[1])
elseif layout ~= ARGV[1] then
  return redis.error_reply('SWLAYOUT model has tables ' .. layout)
end
local columns = {}
for i = 3, #ARGV do
  local c = redis.call('HGET', KEYS[2], ARGV[i])
  if c then
    c = tonumber(c)
  else
    c = redis.call('RPUSH', KEYS[1], ARGV[i]) - 1
    redis.call('HSET', KEYS[2], ARGV[i], c)
  end
  columns[#columns + 1] = c
end
return {columns, redis.call('LRANGE', KEYS[1], ARGV[2], -1)}

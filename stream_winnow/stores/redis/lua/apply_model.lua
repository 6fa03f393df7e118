-- The model-level share of a batch: counters, version, the sources' seen events and watermarks.
-- KEYS[1] version, KEYS[2] the model's watermarks (hash: source -> offset, source#n -> events seen),
-- KEYS[3..] counter hashes, then one seen-events ring per source with events (by index in the plan).
-- ARGV[1] msgpack {changed events, {{counter key index, field, amount}, ...}, sources
-- {{source, expected, last, ring key index or 0}, ...}, ring capacity (events)}; ARGV[2..] per source
-- with a ring, its events' 8-byte hashes. A ring is a fixed-size string of capacity * 8 bytes written
-- round and round (SETRANGE), so its memory does not grow with the number of events.

local plan = cmsgpack.unpack(ARGV[1])
local changed, counters, sources, capacity = plan[1], plan[2], plan[3], plan[4]
for _, s in ipairs(sources) do
  local found = tonumber(redis.call('HGET', KEYS[2], s[1]) or '-1')
  if found ~= s[2] then return {-1, s[1], found} end
end
for _, c in ipairs(counters) do redis.call('HINCRBYFLOAT', KEYS[c[1]], c[2], c[3]) end
local version
if changed > 0 then version = redis.call('INCRBY', KEYS[1], changed) else version = tonumber(redis.call('GET', KEYS[1]) or '0') end
local arg = 2
for _, s in ipairs(sources) do
  redis.call('HSET', KEYS[2], s[1], s[3])
  if s[4] > 0 then
    local hashes = ARGV[arg]
    arg = arg + 1
    local count = #hashes / 8
    local field = s[1] .. '#n'
    local n = tonumber(redis.call('HGET', KEYS[2], field) or '0')
    if count > capacity then
      hashes = string.sub(hashes, (count - capacity) * 8 + 1)
      n = n + count - capacity
      count = capacity
    end
    local at = n % capacity
    local first = math.min(count, capacity - at)
    redis.call('SETRANGE', KEYS[s[4]], at * 8, string.sub(hashes, 1, first * 8))
    if first < count then redis.call('SETRANGE', KEYS[s[4]], 0, string.sub(hashes, first * 8 + 1)) end
    redis.call('HSET', KEYS[2], field, string.format('%d', n + count))
  end
end
return {0, version}

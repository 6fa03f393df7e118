-- A shard's share of a batch's delta, and the batch's watermarks, in one atomic step.
-- KEYS[1] shard row count, KEYS[2] its write counter, KEYS[3] its watermarks (hash: source -> offset),
-- KEYS[4] its change log (list), KEYS[5..] rows. ARGV[1] msgpack {G, T, combine per slot (1 multiply,
-- 0 add), low, high and initial value per slot, sources {{source, expected, last}, ...}, change log
-- length}; ARGV[2] the initial row (packed float32) at the delta's width, which fills the gaps past a
-- short row's end; ARGV[3] the rows' feature ids (packed int64, in KEYS order); ARGV[4..] per row, its
-- changes as packed (uint32 position, float64 factor or addend) pairs, positions ascending.
-- Refuses the whole step ({-1, source, found}) if a watermark is not as expected; else applies
-- w <- clip(w * factor) or clip(w + addend) at each position (a position past a short row's end
-- starts from the slot's initial value), sets the watermarks, bumps the write counter, appends
-- (int64 write counter .. the feature ids) to the change log, keeps its last entries, and returns
-- {0, write counter, created}. Only the changed positions are unpacked and packed: the rest of a row
-- is copied as it is. Rows are read with one MGET and written with one MSET per 2,000.

local plan = cmsgpack.unpack(ARGV[1])
local G, T, combine, lows, highs, inits, sources = plan[1], plan[2], plan[3], plan[4], plan[5], plan[6], plan[7]
for _, s in ipairs(sources) do
  local found = tonumber(redis.call('HGET', KEYS[3], s[1]) or '-1')
  if found ~= s[2] then return {-1, s[1], found} end
end
local sunpack, spack, ssub, concat, call, unpack = struct.unpack, struct.pack, string.sub, table.concat, redis.call, unpack
local created = 0
local tmpl = ARGV[2]
local nkeys = #KEYS
for first = 5, nkeys, 2000 do
  local last = first + 1999
  if last > nkeys then last = nkeys end
  local rows = call('MGET', unpack(KEYS, first, last))
  local out = {}
  for i = first, last do
    local changes = ARGV[i - 1]
    local row = rows[i - first + 1]
    if not row then
      created = created + 1
      row = ''
    end
    local n = #row / 4
    local parts, np, at = {}, 0, 0
    for j = 1, #changes, 12 do
      local p, d = sunpack('<I4d', changes, j)
      if p > at then
        if at < n then
          local e = p < n and p or n
          np = np + 1
          parts[np] = ssub(row, at * 4 + 1, e * 4)
          at = e
        end
        if p > at then
          np = np + 1
          parts[np] = ssub(tmpl, at * 4 + 1, p * 4)
        end
      end
      local k = p < G and p + 1 or G + (p - G) % T + 1
      local v
      if p < n then v = sunpack('<f', row, p * 4 + 1) else v = inits[k] end
      if combine[k] == 1 then v = v * d else v = v + d end
      if v < lows[k] then v = lows[k] elseif v > highs[k] then v = highs[k] end
      np = np + 1
      parts[np] = spack('<f', v)
      at = p + 1
    end
    if at < n then parts[np + 1] = ssub(row, at * 4 + 1) end
    local o = 2 * (i - first)
    out[o + 1] = KEYS[i]
    out[o + 2] = concat(parts)
  end
  call('MSET', unpack(out))
end
for _, s in ipairs(sources) do redis.call('HSET', KEYS[3], s[1], s[3]) end
if created > 0 then redis.call('INCRBY', KEYS[1], created) end
local writes
if nkeys > 4 then
  writes = redis.call('INCR', KEYS[2])
  redis.call('RPUSH', KEYS[4], spack('<i8', writes) .. ARGV[3])
  redis.call('LTRIM', KEYS[4], -plan[8], -1)
else
  writes = tonumber(redis.call('GET', KEYS[2]) or '0')
end
return {0, writes, created}

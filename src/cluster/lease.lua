-- floodgate: lease tokens from one pair of buckets (records, bytes) kept as GCRA state.
--
-- Each bucket is its TAT (theoretical arrival time, ms since floodgate's epoch) with the
-- interval (ms per token) and burst it was counted in; a full or unknown bucket has no state.
-- Grants up to `want` tokens per bucket but at least `min` in every limited bucket, or
-- nothing at all (records and bytes together: a request is never charged in one only).
--
-- KEYS[1]  the pair's hash, e.g. {fg:tenant:acme}
-- ARGV[1]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[2..6]  records: interval_ms (0: not limited), burst, want, min, level
-- ARGV[7..11] bytes:   interval_ms (0: not limited), burst, want, min, level
-- `level` is what the caller last knew the bucket to hold (its last answer plus the refill
-- since; the burst if it never asked): a bucket with no state starts there. A bucket lets its
-- state go only once full, so a caller that knew it finds it full too; but a Redis that
-- restarted empty has forgotten buckets that were not full, and starting those full gave
-- every tenant its burst again at each restart (review 37b of #37: 352 records where the
-- bound was 91).
-- Returns {granted records, granted bytes, records left, bytes left, wait µs}; wait > 0 means
-- `min` was not there: nothing was granted, and that is how long until it would be.
local EPOCH_MS = 1700000000000
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - EPOCH_MS
else
  now = tonumber(ARGV[1])
end
local stored = redis.call('HMGET', KEYS[1], 'r_tat', 'r_int', 'r_burst', 'b_tat', 'b_int', 'b_burst')

local function bucket(first, arg)
  local interval = tonumber(ARGV[arg])
  if interval <= 0 then
    return nil
  end
  local b = {
    interval = interval,
    burst = tonumber(ARGV[arg + 1]),
    want = tonumber(ARGV[arg + 2]),
    min = tonumber(ARGV[arg + 3]),
  }
  local tat = tonumber(stored[first])
  if not tat then
    local level = math.min(math.max(tonumber(ARGV[arg + 4]) or b.burst, 0), b.burst)
    tat = now + (b.burst - level) * b.interval
    b.fresh = tat > now
  end
  local old_interval = tonumber(stored[first + 1])
  local old_burst = tonumber(stored[first + 2])
  if old_interval and old_burst and (old_interval ~= b.interval or old_burst ~= b.burst) then
    -- The budget changed: keep the level, clamped to the new burst (never a refill).
    local level = old_burst - math.max(0, tat - now) / old_interval
    level = math.min(math.max(level, 0), b.burst)
    tat = now + (b.burst - level) * b.interval
  end
  b.base = math.max(tat, now)
  b.available = math.max(0, math.floor(b.burst - (b.base - now) / b.interval))
  b.grant = math.min(b.want, b.available)
  if b.grant < b.min then
    -- min tokens exist once base + min * interval - burst * interval <= now
    b.wait = b.base + b.min * b.interval - b.burst * b.interval - now
  else
    b.wait = 0
  end
  return b
end

local r = bucket(1, 2)
local b = bucket(4, 7)
local wait = math.max(r and r.wait or 0, b and b.wait or 0)
local longest = 0
local function keep(x, prefix, tat)
  -- %.17g: Lua's default number-to-string keeps 14 digits, too few for a TAT.
  redis.call('HSET', KEYS[1], prefix .. 'tat', string.format('%.17g', tat),
    prefix .. 'int', string.format('%.17g', x.interval), prefix .. 'burst', string.format('%.17g', x.burst))
  longest = math.max(longest, tat - now)
end
if wait > 0 then
  -- Nothing granted; a bucket started from the caller's level is kept, so the next caller
  -- (which may know nothing of it) does not find it full.
  if r and r.fresh then keep(r, 'r_', r.base) end
  if b and b.fresh then keep(b, 'b_', b.base) end
  if longest > 0 then
    redis.call('PEXPIRE', KEYS[1], math.ceil(longest) + 1000)
  end
  return {0, 0, r and r.available or 0, b and b.available or 0, math.max(1, math.ceil(wait * 1000))}
end

local function charge(x, prefix)
  if not x then
    return 0, 0
  end
  local tat = x.base + x.grant * x.interval
  keep(x, prefix, tat)
  return x.grant, x.available - x.grant
end
local gr, lr = charge(r, 'r_')
local gb, lb = charge(b, 'b_')
if longest > 0 then
  -- Once both buckets are full again the state says nothing: let it go.
  redis.call('PEXPIRE', KEYS[1], math.ceil(longest) + 1000)
end
return {gr, gb, lr, lb, 0}

-- floodgate: give unspent leased tokens back to a pair of buckets (see lease.lua).
-- KEYS[1]  the pair's hash
-- ARGV[1]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[2..4] records: interval_ms (0: not limited), burst, tokens
-- ARGV[5..7] bytes:   interval_ms (0: not limited), burst, tokens
-- A bucket whose budget changed since is left alone (its state is in another unit).
local EPOCH_MS = 1700000000000
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - EPOCH_MS
else
  now = tonumber(ARGV[1])
end
local stored = redis.call('HMGET', KEYS[1], 'r_tat', 'r_int', 'r_burst', 'b_tat', 'b_int', 'b_burst')
local function give(first, arg, prefix)
  local interval = tonumber(ARGV[arg])
  local burst = tonumber(ARGV[arg + 1])
  local tokens = tonumber(ARGV[arg + 2])
  local tat = tonumber(stored[first])
  if interval <= 0 or tokens <= 0 or not tat then
    return
  end
  if tonumber(stored[first + 1]) ~= interval or tonumber(stored[first + 2]) ~= burst then
    return
  end
  redis.call('HSET', KEYS[1], prefix .. 'tat', string.format('%.17g', math.max(now, tat - tokens * interval)))
end
give(1, 2, 'r_')
give(4, 5, 'b_')
return 1

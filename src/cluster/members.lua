-- floodgate: announce this replica (or take it out) and count the live members.
-- KEYS[1]  the members' sorted set (score: when the member lapses, ms since the epoch)
-- ARGV[1]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[2]  this replica's id
-- ARGV[3]  how long it counts without another heartbeat, in ms
-- ARGV[4]  '1' to leave
local EPOCH_MS = 1700000000000
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - EPOCH_MS
else
  now = tonumber(ARGV[1])
end
local ttl = tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if ARGV[4] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[2])
else
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
end
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl) * 2)
return redis.call('ZCARD', KEYS[1])

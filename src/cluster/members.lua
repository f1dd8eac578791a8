-- floodgate: announce this replica (or take it out) and count the live members.
-- KEYS[1]  the members' sorted set (score: when the member lapses, ms since the epoch)
-- KEYS[2]  the members' hash: replica id -> the instance (process) that holds it
--          (same hash tag as KEYS[1], so Redis Cluster keeps them together)
-- ARGV[1]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[2]  this replica's id
-- ARGV[3]  how long it counts without another heartbeat, in ms
-- ARGV[4]  '1' to leave
-- ARGV[5]  this process's instance id (random per start)
-- Returns the live members; -(members + 1) when the id is held by another live instance
-- (two replicas configured with one replica_id): then nothing is changed.
local EPOCH_MS = 1700000000000
local now
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000 - EPOCH_MS
else
  now = tonumber(ARGV[1])
end
local ttl = tonumber(ARGV[3])
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
for _, id in ipairs(lapsed) do
  redis.call('HDEL', KEYS[2], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local holder = redis.call('HGET', KEYS[2], ARGV[2])
local ours = (not holder) or holder == ARGV[5]
if ARGV[4] == '1' then
  if ours then
    redis.call('ZREM', KEYS[1], ARGV[2])
    redis.call('HDEL', KEYS[2], ARGV[2])
  end
else
  if not ours and redis.call('ZSCORE', KEYS[1], ARGV[2]) then
    return -(redis.call('ZCARD', KEYS[1]) + 1)
  end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
end
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl) * 2)
redis.call('PEXPIRE', KEYS[2], math.ceil(ttl) * 2)
return redis.call('ZCARD', KEYS[1])

-- floodgate: announce this replica (or take it out) and count the live members.
-- KEYS[1]  the members' sorted set (score: when the member lapses, ms since the epoch)
-- KEYS[2]  the members' hash: replica id -> the instance (process) that holds it
-- KEYS[3]  the members' beats: replica id -> heartbeats its holder has sent (so another
--          process can tell a holder that is alive from one that died without leaving)
--          (KEYS[2] and KEYS[3] share KEYS[1]'s hash tag, so Redis Cluster keeps them together)
-- ARGV[1]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[2]  this replica's id
-- ARGV[3]  how long it counts without another heartbeat, in ms
-- ARGV[4]  '1' to leave
-- ARGV[5]  this process's instance id (random per start)
-- Returns {live members, 0, '', 0, rank, fresh}, rank this replica's place (from 0) among the
-- live members' ids in byte order (what divides a budget exactly among them while Redis is
-- away), fresh 1 when this process was not held as the replica's holder before this beat (its
-- first, or Redis forgot it: restarted empty, or the entry lapsed);
-- or, when the id is held by another instance that has not lapsed (two processes with one
-- replica_id, or this replica's previous process killed less than a TTL ago), {live members +
-- 1, 1, holder's instance, holder's beats, 0}: then nothing is changed.
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
  redis.call('HDEL', KEYS[3], id)
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local holder = redis.call('HGET', KEYS[2], ARGV[2])
local ours = (not holder) or holder == ARGV[5]
if ARGV[4] == '1' then
  if ours then
    redis.call('ZREM', KEYS[1], ARGV[2])
    redis.call('HDEL', KEYS[2], ARGV[2])
    redis.call('HDEL', KEYS[3], ARGV[2])
  end
else
  if not ours and redis.call('ZSCORE', KEYS[1], ARGV[2]) then
    local beats = tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '0')
    return {redis.call('ZCARD', KEYS[1]) + 1, 1, holder, beats, 0, 0}
  end
  if holder ~= ARGV[5] then
    -- A new holder counts its beats from the start.
    redis.call('HSET', KEYS[3], ARGV[2], 0)
  end
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[2])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[5])
  redis.call('HINCRBY', KEYS[3], ARGV[2], 1)
end
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl) * 2)
redis.call('PEXPIRE', KEYS[2], math.ceil(ttl) * 2)
redis.call('PEXPIRE', KEYS[3], math.ceil(ttl) * 2)
local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
table.sort(ids)
local rank = 0
for i, id in ipairs(ids) do
  if id == ARGV[2] then
    rank = i - 1
  end
end
return {#ids, 0, '', 0, rank, (holder ~= ARGV[5]) and 1 or 0}

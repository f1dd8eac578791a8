-- Writes the state of a key one request holds, or gives it up.
-- KEYS[1]: the key. ARGV[1]: the request's token (bytes 2 to 33 of every value).
-- ARGV[2]: the new value ('C' claimed, 'P' pending, 'D' answered), or '' to give it up.
-- ARGV[3]: its lifetime in milliseconds. With an answer: KEYS[2] the tenant's index of answers,
-- ARGV[4] the most answers the tenant keeps, ARGV[5] the key's name within the tenant, ARGV[6]
-- what comes before it in a key (so a key is ARGV[6] .. ARGV[5]; both keys share the tenant's
-- hash tag, so the script works on Redis Cluster).
-- A key held by another request is left alone (answers 0). A key whose claim lapsed is taken
-- again (its holder is still at work: the claim must stand while its records may be written).
-- A state never goes back (C, then P, then D or R), so a renewal that raced the answer, or ran
-- after the key was given up, is harmless: giving up leaves 'R' and the token for ARGV[3]
-- (claim.lua takes an 'R' key as free).
-- A key another request gave up ('R' and its token) is as free as an absent one, as it is to
-- claim.lua: a holder whose claim lapsed meanwhile (Redis paused longer than its lifetime, the
-- other request claimed and gave up behind the pause) takes it back, for its records may still
-- be written; left to claim.lua, the next retry would write them again.
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 2, 33) ~= ARGV[1] then
  if string.sub(found, 1, 1) ~= 'R' or ARGV[2] == '' then
    return 0
  end
  found = nil
end
local rank = { C = 1, P = 2, D = 3, R = 3 }
local new = ARGV[2]
if new == '' then
  new = 'R' .. ARGV[1]
end
local was, now = found and string.sub(found, 1, 1), string.sub(new, 1, 1)
if was and was ~= now and (rank[was] or 0) >= (rank[now] or 0) then
  return 1
end
redis.call('SET', KEYS[1], new, 'PX', ARGV[3])
-- Storing an answer (KEYS[2], the tenant's index, given): it is indexed by when it was stored
-- (Redis's clock, one for every replica), and past ARGV[4] answers the tenant's oldest are
-- dropped — unless their key holds something newer than an answer by now (a claim made after
-- the answer expired). Index entries whose answer expired go first; the index lives as long
-- as its youngest answer.
if KEYS[2] and now == 'D' then
  local t = redis.call('TIME')
  local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ms - tonumber(ARGV[3]))
  -- Strictly the youngest, even within a millisecond, so it is never the one dropped.
  local top = redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) >= ms then
    ms = tonumber(top[2]) + 0.001
  end
  redis.call('ZADD', KEYS[2], ms, ARGV[5])
  local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[4])
  if over > 0 then
    local oldest = redis.call('ZPOPMIN', KEYS[2], over)
    for i = 1, #oldest, 2 do
      local k = ARGV[6] .. oldest[i]
      local v = redis.call('GET', k)
      if v and string.sub(v, 1, 1) == 'D' then
        redis.call('DEL', k)
      end
    end
  end
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1

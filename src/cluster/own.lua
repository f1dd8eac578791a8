-- Writes the state of a key one request holds, or gives it up.
-- KEYS[1]: the key. ARGV[1]: the request's token (bytes 2 to 33 of every value).
-- ARGV[2]: the new value ('C' claimed, 'P' pending, 'D' answered), or '' to give it up.
-- ARGV[3]: its lifetime in milliseconds.
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
return 1

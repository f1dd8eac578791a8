-- Writes, or with an empty value deletes, a key one request holds.
-- KEYS[1]: the key. ARGV[1]: the request's token (bytes 2 to 33 of every value).
-- ARGV[2]: the new value ('C' claimed, 'P' pending, 'D' answered), or '' to delete.
-- ARGV[3]: its lifetime in milliseconds.
-- A key held by another request is left alone (answers 0). A key whose claim lapsed is taken
-- again (its holder is still at work: the claim must stand while its records may be written).
-- A state never goes back (C, then P, then D), so a renewal that raced the answer is harmless.
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 2, 33) ~= ARGV[1] then
  return 0
end
local rank = { C = 1, P = 2, D = 3 }
if ARGV[2] == '' then
  if found and string.sub(found, 1, 1) ~= 'D' then
    redis.call('DEL', KEYS[1])
  end
  return 1
end
if found and (rank[string.sub(found, 1, 1)] or 0) > (rank[string.sub(ARGV[2], 1, 1)] or 0) then
  return 1
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1

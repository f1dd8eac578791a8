-- Claims an Idempotency-Key for one request, unless the key is held or answered already.
-- KEYS[1]: the key. ARGV[1]: the claim ('C' followed by the request's 32-character token).
-- ARGV[2]: how long the claim outlives a holder that stops renewing it, in milliseconds.
-- Answers nil when this request now holds the key, else the value found there: another
-- request's claim ('C'), its pending records ('P', with the fingerprint) or its answer ('D').
-- A key given up ('R', left by own.lua against late renewals) is free.
local found = redis.call('GET', KEYS[1])
if found and string.sub(found, 1, 1) ~= 'R' then
  return found
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false

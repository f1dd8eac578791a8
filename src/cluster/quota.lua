-- floodgate: lease part of a calendar quota from its shared count, one per tenant, window
-- kind and window (records and bytes). The count includes every part leased from it, so
-- what all replicas admit in the window stays within the quota.
--
-- KEYS[1]  the count's hash, e.g. {fg:tenant:acme}:quota:day:1814400000
-- KEYS[2]  the mark that the tenant's counts of this window kind exist,
--          {fg:tenant:acme}:quota:day:gen (kept 62 days; one per kind: a request counted in
--          an hour and a day quota makes both counts, and the first made must not mark the
--          second as a new window's)
-- ARGV[1]  when the count may go (Unix seconds: the window's end and a day), or 0
-- ARGV[2]  the members counted (a lease is held to a member's part of what is left)
-- ARGV[3]  the caller: its process's instance id
-- ARGV[4]  now in ms since the epoch, or '' for Redis's own clock
-- ARGV[5]  how long a count made without the tenant's mark is unsure, in ms
-- ARGV[6]  the slice fraction: a caller's part of an unsure count is fraction × limit / members
-- ARGV[7..13]  records: limit (-1: not limited), want, min, known, outage, give, received
-- ARGV[14..20] bytes:   limit (-1: not limited), want, min, known, outage, give, received
-- `known` is the count the caller last heard. `outage` is what the caller admitted without a
-- lease in this window in all, while Redis did not answer: the hash keeps what each caller
-- reported, and only the difference is added, so a report whose answer was lost is not
-- counted twice. `give` is what it gives back unspent (leaving). `received` is what the
-- caller was granted in this window as it heard the answers: the hash keeps what was granted
-- to each caller, and a grant whose answer never reached it (a call that timed out while
-- Redis was paused, then ran) is taken off the count again.
--
-- A Redis restarted empty has forgotten the counts, and a replica that never heard one
-- cannot tell that from a window's first count. The tenant's mark tells: a count made while
-- the mark exists is a new window's, from zero; one made without it is the tenant's first of
-- its kind in 62 days, or Redis forgot. That count is unsure for ARGV[5] ms: it takes the highest count
-- callers heard (the replicas that knew it push theirs when they find Redis forgot them), and
-- each caller is granted at most its part meanwhile, so a replica that knew nothing takes no
-- more than that from a count that was lost.
--
-- Grants up to `want` in each limited dimension but at least `min` in each, or nothing: a
-- request is never charged in one only. Beyond `min`, a lease takes at most a member's part
-- of what is left, so the parts held unspent shrink as the quota runs out.
-- Returns {granted records, granted bytes, count records, count bytes, refused (0/1), the ms
-- the count stays unsure (0: sure)}: a caller refused its part of an unsure count is told to
-- come back when the count is sure, not at the window's end.
local expire_at = tonumber(ARGV[1])
local members = math.max(1, tonumber(ARGV[2]))
local holder = ARGV[3]
local now
if ARGV[4] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000 + tonumber(t[2]) / 1000
else
  now = tonumber(ARGV[4])
end
local fraction = tonumber(ARGV[6])
local fields = {'r:' .. holder, 'b:' .. holder}
local reports = {'ro:' .. holder, 'bo:' .. holder}
local unsure_fields = {'ru:' .. holder, 'bu:' .. holder}
local stored = redis.call('HMGET', KEYS[1], 'r', 'b', fields[1], fields[2], reports[1], reports[2],
  unsure_fields[1], unsure_fields[2], 'unsure')
local unsure_until = tonumber(stored[9]) or 0
if not stored[1] and not stored[2] then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    unsure_until = now + tonumber(ARGV[5])
  end
end
redis.call('SET', KEYS[2], '1', 'EX', 62 * 86400)
local unsure = now < unsure_until
local dims = {}
local refused = false
for i = 0, 1 do
  local at = 7 + i * 7
  local d = {
    limit = tonumber(ARGV[at]),
    want = tonumber(ARGV[at + 1]),
    min = tonumber(ARGV[at + 2]),
  }
  local known = tonumber(ARGV[at + 3])
  d.received = tonumber(ARGV[at + 6])
  local lost = math.max(0, (tonumber(stored[i + 3]) or 0) - d.received)
  d.outage = tonumber(ARGV[at + 4])
  local added = math.max(0, d.outage - (tonumber(stored[i + 5]) or 0))
  -- A count that exists is the truth (a grant lost or given back has come off it), unless it
  -- is unsure; a count Redis no longer has starts from what the caller heard.
  local count = tonumber(stored[i + 1]) or known
  if unsure then
    count = math.max(count, known)
  end
  d.count = math.max(0, count - lost + added - tonumber(ARGV[at + 5]))
  d.unsure_granted = tonumber(stored[i + 7]) or 0
  d.grant = 0
  if d.limit >= 0 then
    local room = math.max(0, d.limit - d.count)
    if unsure then
      room = math.min(room, math.max(0, math.floor(fraction * d.limit / members) - d.unsure_granted))
    end
    if room < d.min then
      refused = true
    else
      d.grant = d.min + math.min(math.max(0, d.want - d.min), math.floor((room - d.min) / members))
    end
  end
  dims[i + 1] = d
end
for i = 1, 2 do
  if refused then dims[i].grant = 0 end
  dims[i].count = dims[i].count + dims[i].grant
end
redis.call('HSET', KEYS[1], 'r', string.format('%.0f', dims[1].count), 'b', string.format('%.0f', dims[2].count),
  fields[1], string.format('%.0f', dims[1].received + dims[1].grant),
  fields[2], string.format('%.0f', dims[2].received + dims[2].grant),
  reports[1], string.format('%.0f', dims[1].outage), reports[2], string.format('%.0f', dims[2].outage),
  'unsure', string.format('%.0f', unsure_until))
if unsure then
  redis.call('HSET', KEYS[1],
    unsure_fields[1], string.format('%.0f', dims[1].unsure_granted + dims[1].grant),
    unsure_fields[2], string.format('%.0f', dims[2].unsure_granted + dims[2].grant))
end
if expire_at > 0 then
  redis.call('EXPIREAT', KEYS[1], expire_at)
end
local unsure_left = 0
if unsure then
  unsure_left = math.ceil(unsure_until - now)
end
return {dims[1].grant, dims[2].grant, dims[1].count, dims[2].count, refused and 1 or 0, unsure_left}

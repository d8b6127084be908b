-- wheel_release.lua: forget a batch of delivered entries and leave done markers.
--
-- KEYS[1]   {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]   {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]   {p}:entries   hash: id -> encoded entry
-- KEYS[4…]  {p}:done:<id> done marker of each id, in the order of ARGV[2…]
-- ARGV[1]   done marker lifetime, ms
-- ARGV[2…]  ids
--
-- For each id: deletes the entry, removes it from inflight and (defensively) from due, and
-- sets its done marker (value: Redis now in Unix ms) to expire after ARGV[1] ms.
-- Returns the number of ids that still had an entry.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local removed = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  removed = removed + redis.call('HDEL', KEYS[3], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  redis.call('SET', KEYS[i + 2], string.format('%d', now), 'PX', ARGV[1])
end
return removed

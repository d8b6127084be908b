-- layout_advance.lua: move a shard move from phase 1 to phase 2 (store/moving.go,
-- AdvanceLayout) once every live replica acks the move, atomically with layout_ack.lua.
--
-- KEYS[1]  {p}:shards       the layout
-- KEYS[2]  {p}:shards-acks  hash: replica -> "<layout>|<Unix ms>"
-- KEYS[3]  {p}:live         sorted set: replica -> end of its liveness, Unix ms (liveness.go)
-- ARGV[1]  the layout in phase 1: "1>3"
-- ARGV[2]  the move, "1>3": an ack of it in either phase counts
-- ARGV[3]  "check": only say whether it may advance; "set": advance if it may
--
-- A replica in live that has not acked the move (one that looks only at the old count,
-- or of a version that knows of no moves) holds the phase, lapsed or not: it may come
-- back. Returns the record's layout after the call, or "ready" when checking and it may
-- advance.
local cur = redis.call('GET', KEYS[1]) or ''
if cur ~= ARGV[1] then
  return cur
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, replica in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
  local ack = redis.call('HGET', KEYS[2], replica) or ''
  local layout = string.match(ack, '^([^|]*)|') or ''
  if layout ~= ARGV[2] and string.sub(layout, 1, #ARGV[2] + 2) ~= ARGV[2] .. '+@' then
    return cur
  end
end
if ARGV[3] == 'check' then
  return 'ready'
end
local next = ARGV[2] .. '+@' .. string.format('%d', now)
redis.call('SET', KEYS[1], next)
return next

-- live_take_gone.lua: take the replica that left gone first, for one survivor to load
-- into its wheel the entries the departed replica's wheel held (they are due soon, and
-- nobody else fires them before they are overdue).
--
-- KEYS[1]  {p}:gone      sorted set: replica -> when the take-over of its holdings
--                        finished, or it left (Unix ms; wheel_claim_overdue.lua,
--                        live_leave.lua)
-- KEYS[2]  {p}:departed  sorted set: replica -> when a survivor took it (Unix ms), which
--                        beats report as absent for a while (live_beat.lua)
-- ARGV[1]  optional: the replica to take, when it is in gone (a sharded stage takes a
--          replica that one shard gave from the other shards too)
--
-- Returns the replica, which leaves gone for departed, or false when gone is empty (or
-- does not hold ARGV[1]).
local first
if ARGV[1] then
  if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
    return false
  end
  first = ARGV[1]
else
  first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
end
if not first then
  return false
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], first)
redis.call('ZADD', KEYS[2], string.format('%d', now), first)
return first

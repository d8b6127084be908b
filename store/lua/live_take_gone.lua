-- live_take_gone.lua: take the replica that left gone first, for one survivor to load
-- into its wheel the entries the departed replica's wheel held (they are due soon, and
-- nobody else fires them before they are overdue).
--
-- KEYS[1]  {p}:gone      sorted set: replica -> when the take-over of its holdings
--                        finished, or it left (Unix ms; wheel_claim_overdue.lua,
--                        live_leave.lua)
-- KEYS[2]  {p}:departed  sorted set: replica -> when a survivor took it (Unix ms), which
--                        beats report as absent for a while (live_beat.lua)
-- ARGV[1]  optional, for a stage of several shards (store/liveness.go): the replica to
--          take instead of the one gone first ("" for that one)
-- ARGV[2]  optional, "once": a replica already in departed (another shard gave it to a
--          survivor) is not taken again, only dropped from gone; and ARGV[1] is taken
--          even when it is not in gone (shard 0 records there who took a replica)
--
-- Returns the replica, which leaves gone for departed, or false when gone is empty (or
-- holds no replica to take).
local once = ARGV[2] == 'once'
local function taken(r)
  return once and redis.call('ZSCORE', KEYS[2], r)
end
local first
if ARGV[1] and ARGV[1] ~= '' then
  first = ARGV[1]
  if not once and not redis.call('ZSCORE', KEYS[1], first) then
    return false
  end
  if taken(first) then
    redis.call('ZREM', KEYS[1], first)
    return false
  end
else
  while true do
    first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
    if not first then
      return false
    end
    if not taken(first) then
      break
    end
    redis.call('ZREM', KEYS[1], first)
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREM', KEYS[1], first)
redis.call('ZADD', KEYS[2], string.format('%d', now), first)
return first

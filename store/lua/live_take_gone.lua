-- live_take_gone.lua: take the replica that left gone first, for one survivor to load
-- into its wheel the entries the departed replica's wheel held (they are due soon, and
-- nobody else fires them before they are overdue).
--
-- KEYS[1]  {p}:gone  sorted set: replica -> when the take-over of its holdings finished,
--                    or it left (Unix ms; wheel_claim_overdue.lua, live_leave.lua)
--
-- Returns the replica, which leaves gone, or false when gone is empty.
local first = redis.call('ZRANGE', KEYS[1], 0, 0)[1]
if not first then
  return false
end
redis.call('ZREM', KEYS[1], first)
return first

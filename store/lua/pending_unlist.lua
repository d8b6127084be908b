-- pending_unlist.lua: unlist an alert that will not be handed off (rejected after it
-- hopped: its target is gone).
--
-- KEYS[1]  {p}:pending      sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[2]  {p}:pending-by   hash: target -> how many of pending are its
-- KEYS[3]  {p}:trace:<id>   the alert's trace (its target: tgt)
-- ARGV[1]  id
-- ARGV[2]  the target the refused message named: the alert is unlisted only when its
--          trace names it ("" or absent: whatever its target)
local tgt = redis.call('HGET', KEYS[3], 'tgt')
if ARGV[2] and ARGV[2] ~= '' and tgt ~= ARGV[2] then
  return 0
end
pending_drop(KEYS[1], KEYS[2], ARGV[1], tgt)
return 1

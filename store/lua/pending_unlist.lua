-- pending_unlist.lua: unlist an alert that will not be handed off (rejected after it
-- hopped: its target is gone).
--
-- KEYS[1]  {p}:pending      sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[2]  {p}:pending-by   hash: target -> how many of pending are its
-- KEYS[3]  {p}:trace:<id>   the alert's trace (its target: tgt)
-- ARGV[1]  id
pending_drop(KEYS[1], KEYS[2], ARGV[1], redis.call('HGET', KEYS[3], 'tgt'))
return 1

-- episode_tidy.lua: forget an escalation episode in the list of outboxes when nothing of
-- its outbox is left to carry out (or the episode is gone: its hash expired). Such an
-- entry would stay the oldest, and the sweeper reads the oldest first.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode
-- KEYS[2]  {p}:ep-outbox    sorted set: key -> when its outbox was last set
-- ARGV[1]  the episode's key
--
-- Returns 1 when it was forgotten, 0 when something is left to carry out.
local left = redis.call('HMGET', KEYS[1], 'ob_publish', 'ob_cancel', 'ob_resolution', 'ob_ack')
if left[1] or left[2] or left[3] or left[4] then
  return 0
end
redis.call('ZREM', KEYS[2], ARGV[1])
return 1

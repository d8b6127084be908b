-- episode_done.lua: an action of an escalation episode's outbox was carried out (its
-- alert published or cancelled): clear it, if it is still the one named.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode
-- KEYS[2]  {p}:ep-outbox    sorted set: key -> when its outbox was last set
-- ARGV[1]  the episode's key
-- ARGV[2]  the episode's number (seq)
-- ARGV[3]  the action: 'publish', 'cancel', 'resolution' or 'ack'
-- ARGV[4]  its value as it was read (the step of publish and cancel, '1' otherwise)
--
-- Returns 1 when cleared, 0 when the episode or the action changed meanwhile (a newer
-- transition named another action: the caller carries that one out instead).
local ep = redis.call('HMGET', KEYS[1], 'seq', 'ob_' .. ARGV[3])
if ep[1] ~= ARGV[2] or ep[2] ~= ARGV[4] then
  return 0
end
redis.call('HDEL', KEYS[1], 'ob_' .. ARGV[3])
local left = redis.call('HMGET', KEYS[1], 'ob_publish', 'ob_cancel', 'ob_resolution', 'ob_ack')
if not (left[1] or left[2] or left[3] or left[4]) then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return 1

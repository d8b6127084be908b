-- episode_fire.lua: a firing notification of an escalation episode's group (or a start
-- through the API): start an episode, or update the content of the one that runs.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode (see episodes.go)
-- KEYS[2]  {p}:ep-seq       string: the deployment's episode counter (never expires)
-- KEYS[3]  {p}:ep-live      sorted set: key -> started (Unix ms), the episodes not ended
-- KEYS[4]  {p}:ep-outbox    sorted set: key -> when its outbox was last set (Unix ms)
-- ARGV[1]  the episode's key (<key>)
-- ARGV[2]  the policy's name
-- ARGV[3]  the content (the notification as the steps render it)
-- ARGV[4]  re-acknowledge after, ms: an acknowledged episode that still fires this long
--          after its acknowledgement ends, and the firing starts a new one
--
-- Returns {result, seq, k}:
--   'started', the new episode's number, '0': step 0 is to be published (outbox
--              publish=0);
--   'pending', its number, the step waiting to be published ('' when none): the episode
--              runs; its content is now ARGV[3];
--   'acked',   its number, '': acknowledged; the content is kept for the record;
--   'busy',    its number, '': the last episode's outbox is not done yet (a resolution or
--              a cancel not yet carried out): try again in a moment.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ep = redis.call('HMGET', KEYS[1], 'state', 'seq', 'acked_at', 'ob_publish', 'ob_cancel', 'ob_resolution', 'ob_ack')
local state, seq = ep[1], ep[2]
if state == 'pending' then
  redis.call('HSET', KEYS[1], 'content', ARGV[3])
  return {'pending', seq, ep[4] or ''}
end
if state == 'acked' and now - tonumber(ep[3]) < tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'content', ARGV[3])
  return {'acked', seq, ''}
end
if state and (ep[4] or ep[5] or ep[6] or ep[7]) then
  return {'busy', seq, ''}
end
local n = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'seq', n, 'state', 'pending', 'policy', ARGV[2], 'started', string.format('%d', now),
  'step', 0, 'sent', 0, 'content', ARGV[3], 'ob_publish', 0)
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return {'started', tostring(n), '0'}

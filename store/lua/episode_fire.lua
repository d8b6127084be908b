-- episode_fire.lua: a firing notification of an escalation episode's group (or a start
-- through the API): start an episode, or update the content of the one that runs.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode (see episodes.go)
-- KEYS[2]  {p}:ep-seq       string: the deployment's episode counter (never expires)
-- KEYS[3]  {p}:ep-live      sorted set: key -> started (Unix ms), the episodes not ended
-- KEYS[4]  {p}:ep-outbox    sorted set: key -> when its outbox was last set (Unix ms)
-- KEYS[5]  {p}:ep-alerts:<key>  set: the alerts the episode saw firing
-- KEYS[6]  {p}:ep-alerts-prev:<key>  set: the alerts the key's previous episode saw
-- ARGV[1]  the episode's key (<key>)
-- ARGV[2]  the policy's name
-- ARGV[3]  the content (the notification as the steps render it)
-- ARGV[4]  re-acknowledge after, ms: an acknowledged episode that still fires this long
--          after its acknowledgement ends, and the firing starts a new one
-- ARGV[5]  the copy window, ms: for this long after the episode resolved, a firing of
--          alerts it all saw firing is a late copy of one of its own firings
-- ARGV[6]  the policy's terms as the episode starts with them (JSON; "" for none): the
--          steps every replica judges the episode's steps by, whatever its own
--          configuration says (a policy changed on one replica first)
-- ARGV[7…] the alerts firing, each named once for good (an Alertmanager alert: its
--          fingerprint and its start); none for a start through the API
--
-- Returns {result, seq, k}:
--   'started', the new episode's number, '0': step 0 is to be published (outbox
--              publish=0);
--   'pending', its number, the step waiting to be published ('' when none): the episode
--              runs; its content is now ARGV[3];
--   'acked',   its number, '': acknowledged; the content is kept for the record;
--   'stale',   its number, '': the episode runs (pending or acknowledged), and every alert
--              of ARGV[7…] is one the key's previous episode saw and this one did not: a
--              late copy of a firing of the previous episode (the slow member of an HA
--              pair); the content is kept;
--   'resolved', its number, '': a late copy of a firing of the episode, which resolved
--              less than ARGV[5] ago: it saw every alert of ARGV[7…] firing, and each of
--              them has ended since (the second member of an Alertmanager HA pair whose
--              gossip failed sends what it has not seen sent, late); absorbed;
--   'busy',    its number, '': the last episode's outbox is not done yet (a resolution or
--              a cancel not yet carried out): try again in a moment.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ep = redis.call('HMGET', KEYS[1], 'state', 'seq', 'acked_at', 'ob_publish', 'ob_cancel', 'ob_resolution', 'ob_ack',
  'resolved_at')
local state, seq = ep[1], ep[2]
-- the episode saw the alerts of this firing
local function saw()
  for i = 7, #ARGV, 1000 do
    redis.call('SADD', KEYS[5], unpack(ARGV, i, math.min(i + 999, #ARGV)))
  end
end
-- every alert of the firing is one the previous episode saw and this one did not
local function earlier()
  if #ARGV < 7 then return false end
  for i = 7, #ARGV do
    if redis.call('SISMEMBER', KEYS[6], ARGV[i]) == 0 or redis.call('SISMEMBER', KEYS[5], ARGV[i]) == 1 then
      return false
    end
  end
  return true
end
if (state == 'pending' or state == 'acked') and earlier() then
  return {'stale', seq, ''}
end
if state == 'pending' then
  redis.call('HSET', KEYS[1], 'content', ARGV[3])
  saw()
  return {'pending', seq, ep[4] or ''}
end
if state == 'acked' and now - tonumber(ep[3]) < tonumber(ARGV[4]) then
  redis.call('HSET', KEYS[1], 'content', ARGV[3])
  saw()
  return {'acked', seq, ''}
end
if state == 'resolved' and #ARGV >= 7 and now - tonumber(ep[8]) < tonumber(ARGV[5]) then
  local seen = true
  for i = 7, #ARGV do
    if redis.call('SISMEMBER', KEYS[5], ARGV[i]) == 0 then
      seen = false
      break
    end
  end
  if seen then
    return {'resolved', seq, ''}
  end
end
if state and (ep[4] or ep[5] or ep[6] or ep[7]) then
  return {'busy', seq, ''}
end
local n = redis.call('INCR', KEYS[2])
redis.call('DEL', KEYS[1], KEYS[6])
if redis.call('EXISTS', KEYS[5]) == 1 then
  redis.call('RENAME', KEYS[5], KEYS[6])
  redis.call('PERSIST', KEYS[6])
end
redis.call('HSET', KEYS[1], 'seq', n, 'state', 'pending', 'policy', ARGV[2], 'started', string.format('%d', now),
  'step', 0, 'sent', 0, 'content', ARGV[3], 'ob_publish', 0, 'signed', 0)
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'terms', ARGV[6])
end
saw()
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZADD', KEYS[4], now, ARGV[1])
return {'started', tostring(n), '0'}

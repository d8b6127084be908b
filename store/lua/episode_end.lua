-- episode_end.lua: resolve or acknowledge an escalation episode: it stops, its step
-- waiting to be due is to be cancelled, and what the end announces is named.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode
-- KEYS[2]  {p}:ep-live      sorted set: key -> started, the episodes not ended
-- KEYS[3]  {p}:ep-outbox    sorted set: key -> when its outbox was last set (Unix ms)
-- KEYS[4]  {p}:ep-alerts:<key>  set: the alerts the episode saw firing (kept as long as
--          the episode)
-- KEYS[5]  {p}:ep-alerts-prev:<key>  set: the alerts the key's previous episode saw (kept
--          as long as the episode)
-- ARGV[1]  the episode's key
-- ARGV[2]  'resolve' or 'ack'
-- ARGV[3]  the episode's number (seq) an acknowledgement is for ('' for a resolve: the
--          current one); an acknowledgement of another episode changes nothing
-- ARGV[4]  who acknowledged (ack), or the resolution's content (resolve)
-- ARGV[5]  how long an ended episode is kept for the record, ms
-- ARGV[6…] resolve: the alerts resolved, each named once for good as the firings named
--          them (an Alertmanager alert: "<fingerprint>@<start>"); none from the API
--
-- Resolve: a running or acknowledged episode becomes resolved; when a step was sent, its
-- resolution is to be published (ob_resolution). Ack: a running episode becomes
-- acknowledged by ARGV[4]; when a step was sent, the acknowledgement is to be announced
-- to the last step's target (ob_ack). Either way the next step (step, not granted yet)
-- is to be cancelled (ob_cancel) and no longer published.
-- Returns {result, seq, step, sent, by}: result 'resolved' or 'acked' (this call ended
-- it), 'already' (it had ended that way: by is who acknowledged), 'none' (no such episode:
-- nothing runs, or the acknowledgement is for another one), 'other' (it ended the other
-- way before: an acknowledged episode is still resolved by a resolve), 'stale' (a resolve
-- of alerts that are all the previous episode's and none this one's: a late copy of the
-- previous episode's resolve; nothing changes).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ep = redis.call('HMGET', KEYS[1], 'state', 'seq', 'step', 'sent', 'acked_by')
local state, seq, step, sent, by = ep[1], ep[2], ep[3], tonumber(ep[4] or '0'), ep[5] or ''
if not state or (ARGV[3] ~= '' and seq ~= ARGV[3]) then
  return {'none', seq or '', '', '', ''}
end
local ack = ARGV[2] == 'ack'
if not ack and state ~= 'resolved' and #ARGV >= 6 then
  local earlier = true
  for i = 6, #ARGV do
    if redis.call('SISMEMBER', KEYS[5], ARGV[i]) == 0 or redis.call('SISMEMBER', KEYS[4], ARGV[i]) == 1 then
      earlier = false
      break
    end
  end
  if earlier then return {'stale', seq, step, tostring(sent), by} end
end
if state == 'resolved' then
  if ack then return {'other', seq, step, tostring(sent), by} end
  return {'already', seq, step, tostring(sent), by}
end
if ack and state == 'acked' then
  return {'already', seq, step, tostring(sent), by}
end
if ack then
  redis.call('HSET', KEYS[1], 'state', 'acked', 'acked_by', ARGV[4], 'acked_at', string.format('%d', now))
  if sent > 0 then redis.call('HSET', KEYS[1], 'ob_ack', 1) end
else
  redis.call('HSET', KEYS[1], 'state', 'resolved', 'resolved_at', string.format('%d', now))
  if sent > 0 then redis.call('HSET', KEYS[1], 'ob_resolution', 1, 'resolution', ARGV[4]) end
  redis.call('ZREM', KEYS[2], ARGV[1])
end
if state == 'pending' then
  redis.call('HSET', KEYS[1], 'ob_cancel', step)
  redis.call('HDEL', KEYS[1], 'ob_publish')
end
redis.call('ZADD', KEYS[3], now, ARGV[1])
if not ack then
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('PEXPIRE', KEYS[4], ARGV[5])
  redis.call('PEXPIRE', KEYS[5], ARGV[5])
end
local result = 'resolved'
if ack then result = 'acked' end
return {result, seq, step, tostring(sent), by}

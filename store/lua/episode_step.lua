-- episode_step.lua: step k of an escalation episode is due: grant it (it is sent) if the
-- episode still runs and is at that step, and name the next step to publish.
--
-- KEYS[1]  {p}:ep:<key>     hash: the episode
-- KEYS[2]  {p}:ep-outbox    sorted set: key -> when its outbox was last set (Unix ms)
-- ARGV[1]  the episode's key
-- ARGV[2]  the episode's number (seq) the step belongs to
-- ARGV[3]  k, the step
-- ARGV[4]  the step's target
-- ARGV[5]  the next step's k, '' when step k is the last
--
-- The next step a grant names is noted as signed (its mark is signed when it is
-- published): a step up to 'signed' whose mark is not signed is forged.
--
-- A grant stands while the episode runs: the same step due again (its hand-off repeated
-- after a crash or a lost reply, its failed send retried) is granted again, and the
-- wheel stage's claim and done marker make its send happen once. Once the episode was
-- acknowledged or resolved, nobody is paged: a step granted before whose send had not
-- gone through is withheld ('acked', 'resolved').
-- Returns {'send', 'granted'|'again'} or {'skip', why}: why is 'old' (a step of an earlier
-- episode, or of none), 'acked', 'resolved', or 'ahead' (not the episode's next step).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ep = redis.call('HMGET', KEYS[1], 'state', 'seq', 'step', 'sent')
local state, seq, step, sent = ep[1], ep[2], tonumber(ep[3]), tonumber(ep[4])
local k = tonumber(ARGV[3])
if not state or seq ~= ARGV[2] then
  return {'skip', 'old'}
end
if state ~= 'pending' then
  return {'skip', state}
end
if k < step then
  return {'send', 'again'}
end
if k > step then
  return {'skip', 'ahead'}
end
redis.call('HSET', KEYS[1], 'step', k + 1, 'sent', sent + 1, 'last', k, 'last_target', ARGV[4],
  'last_at', string.format('%d', now))
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'ob_publish', ARGV[5], 'signed', ARGV[5])
  redis.call('ZADD', KEYS[2], now, ARGV[1])
else
  redis.call('HDEL', KEYS[1], 'ob_publish')
end
return {'send', 'granted'}

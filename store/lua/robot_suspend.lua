-- robot_suspend.lua: take one robot of a group out of rotation for a while: a cool-down
-- after DingTalk throttled it, or a disable after it turned out broken.
--
-- KEYS[1]  {p:g}:cool or {p:g}:disabled   sorted set: robot -> until (Unix ms, +inf: until enabled)
-- ARGV[1]  robot name
-- ARGV[2]  duration, ms; 0 or less: until enabled again (score +inf)
--
-- An existing later deadline is kept (ZADD GT). The key expires with its last deadline,
-- and never while it holds a robot suspended until enabled.
-- Returns the robot's deadline, Unix ms, as a string ("inf" until enabled).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local d = tonumber(ARGV[2])
local untilMs = '+inf'
if d > 0 then
  untilMs = string.format('%d', now + d)
end
redis.call('ZADD', KEYS[1], 'GT', untilMs, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] == 'inf' then
  redis.call('PERSIST', KEYS[1])
elseif last[2] then
  redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + 1000)
end
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
return score

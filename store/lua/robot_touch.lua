-- robot_touch.lua (a function of robot_settle.lua): move one recorded send of a robot's window to Redis now, once its
-- request is answered (or failed). DingTalk counted the send at some moment between the
-- pick and the answer, so scoring it with the answer's time keeps the window an upper
-- bound of DingTalk's count, whatever the request's latency; until then the send was
-- scored at the end of its hold (robot_pick.lua), and this moves it back.
--
-- KEYS[1]  {p:g}:win:<robot>   sorted set: one member per send, score = send time (Unix ms)
-- KEYS[2]  {p:g}:learn         hash: doubt:r and probe:r (robot_pick.lua)
-- ARGV[1]  the member Pick recorded
-- ARGV[2]  window, ms
-- ARGV[3]  the robot's name
-- ARGV[4]  1 when the platform accepted the request: a robot in doubt is open again and
--          its strikes (robot_throttled.lua) are forgotten; 0 when it failed otherwise
--          (not throttled): its probe, if it was one, is over
--
-- Returns 1 when the member was moved, 0 when it is gone (its window expired).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if ARGV[4] == '1' then
  redis.call('HDEL', KEYS[2], 'doubt:' .. ARGV[3], 'probe:' .. ARGV[3], 'strikes:' .. ARGV[3])
else
  redis.call('HDEL', KEYS[2], 'probe:' .. ARGV[3])
end
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return 0
end
redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])
-- the key lives a window and guard past its newest member: one still in flight may be
-- scored later than now
local newest = tonumber(redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')[2])
redis.call('PEXPIREAT', KEYS[1], math.max(newest, now) + tonumber(ARGV[2]) + 1000)
return 1

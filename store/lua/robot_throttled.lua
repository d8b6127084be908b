-- robot_throttled.lua: the platform throttled a robot (DingTalk 130101, 410100, a redirect;
-- WeCom 45009, Feishu 9499, Slack 429): cool it down, and learn from how many sends its
-- window held. A function of robot_settle.lua.
--
-- KEYS[1]  {p:g}:cool          sorted set: robot -> cooling down until (Unix ms)
-- KEYS[2]  {p:g}:learn         hash: lim:r ceil:r at:r doubt:r probe:r (robot_pick.lua)
-- KEYS[3]  {p:g}:win:<robot>   sorted set: the robot's sends in the window
-- KEYS[4]  {p:g}:pace          hash: the target's pacing bucket (robot_pick.lua); debt
-- ARGV[1]  robot name
-- ARGV[2]  the refused send's window member (robot_pick.lua); it did not count at DingTalk
-- ARGV[3]  the robot's configured limit
-- ARGV[4]  cool-down, ms
-- ARGV[5]  window, ms
-- ARGV[6]  learning: 1 on, 0 off
-- ARGV[7]  longest cool-down, ms: when above ARGV[4] and learning is on, a robot throttled
--          while in doubt and out of its rest (its probe was throttled again: the
--          platform's lock-out is longer than the rest) rests twice as long as the last
--          time, up to this (strikes:r counts such throttles; robot_touch.lua clears it)
-- ARGV[8]  the platform's Retry-After, ms (0: none): the robot rests at least this long,
--          up to the longest cool-down (ARGV[7], or ARGV[4] when that is longer)
-- ARGV[9…] pairs: name and configured limit of each other robot of the target
--
-- With learning on, a throttle while the window held fewer sends than the configured
-- limit is evidence that someone else sends through the robot too: its learned limit
-- becomes three quarters of its current limit, but no more than the count that went
-- through (at least 1); that count is remembered as its ceiling, and the recovery clock
-- restarts, and the robot is no longer proven (robot_pick.lua). When this starts an
-- episode and at least one send went through, it is news about the whole target: the
-- target's other robots that have no learned limit take the count as theirs too, proven
-- or not (a robot of the same group chat is likely shared the same way, a proof may be
-- older than the sharing, and a throttle costs a robot DingTalk's ten minutes), with the
-- same ceiling, and their proofs are taken back: no robot gets a send past the count
-- until it has climbed there again one window at a time.
-- Either way the robot is in doubt: after its cool-down one probe tells whether it is open.
-- Returns {limit in effect, 1 if this throttle started an episode (the robot was at its
-- configured limit) else 0, cool-down end (Unix ms), sends in the window}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local name = ARGV[1]
local configured = tonumber(ARGV[3])
local window = tonumber(ARGV[5])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[3])
local lim = configured
local started = 0
local probed = false
if ARGV[6] == '1' then
  local cooling = tonumber(redis.call('ZSCORE', KEYS[1], name))
  probed = redis.call('HGET', KEYS[2], 'doubt:' .. name) and not (cooling and cooling > now)
  lim = tonumber(redis.call('HGET', KEYS[2], 'lim:' .. name)) or configured
  if count < configured then
    if lim >= configured then started = 1 end
    local seen = math.max(count, 1)
    lim = math.max(1, math.min(seen, math.floor(lim * 3 / 4)))
    redis.call('HSET', KEYS[2], 'lim:' .. name, lim, 'ceil:' .. name, seen, 'at:' .. name, string.format('%d', now))
    redis.call('HDEL', KEYS[2], 'proven:' .. name)
    if started == 1 and count > 0 then
      -- The count went out before the lower limit was known, on the budget of the
      -- configured limits: the pacing bucket, from now on sized by the limits in effect,
      -- is charged for them, so it does not spend this window's budget twice.
      redis.call('HINCRBY', KEYS[4], 'debt', count)
      redis.call('PEXPIRE', KEYS[4], 2 * window + 1000)
      for i = 9, #ARGV, 2 do
        local other, limit = ARGV[i], tonumber(ARGV[i + 1])
        if not redis.call('HGET', KEYS[2], 'lim:' .. other) and seen < limit then
          redis.call('HSET', KEYS[2], 'lim:' .. other, seen, 'ceil:' .. other, seen, 'at:' .. other, string.format('%d', now))
          redis.call('HDEL', KEYS[2], 'proven:' .. other)
        end
      end
    end
  end
  redis.call('HSET', KEYS[2], 'doubt:' .. name, '1')
  redis.call('HDEL', KEYS[2], 'probe:' .. name)
  redis.call('PERSIST', KEYS[2])
end
-- The rest: the cool-down, doubled per throttle in a row while in doubt, up to the longest;
-- never shorter than the platform's Retry-After (up to the longest): a request before its
-- end would be throttled again.
local rest = tonumber(ARGV[4])
local longest = math.max(tonumber(ARGV[7]), rest)
if longest > rest and ARGV[6] == '1' then
  local strikes = tonumber(redis.call('HGET', KEYS[2], 'strikes:' .. name)) or 0
  if probed then
    strikes = strikes + 1
    redis.call('HSET', KEYS[2], 'strikes:' .. name, strikes)
  end
  rest = math.min(longest, rest * (2 ^ strikes))
end
rest = math.max(rest, math.min(longest, tonumber(ARGV[8])))
local untilMs = now + rest
redis.call('ZADD', KEYS[1], 'GT', string.format('%d', untilMs), name)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] and last[2] ~= 'inf' then
  redis.call('PEXPIREAT', KEYS[1], tonumber(last[2]) + 1000)
end
return {lim, started, tonumber(redis.call('ZSCORE', KEYS[1], name)), count}

-- robot_settle.lua: what one attempt through a robot did, recorded in the robot pool in
-- one call. The functions touch, throttled and suspend are robot_touch.lua,
-- robot_throttled.lua and robot_suspend.lua, loaded before this (robotpool.go): each
-- takes its own KEYS and ARGV, as its header lists them.
--
-- KEYS[1]  {p:g}:win:<robot>   sorted set: the robot's sends in the window
-- KEYS[2]  {p:g}:learn         hash: the learned limits and doubts (robot_pick.lua)
-- KEYS[3]  {p:g}:cool          sorted set: robot -> cooling down until (Unix ms)
-- KEYS[4]  {p:g}:pace          hash: the target's pacing bucket (robot_pick.lua)
-- KEYS[5]  {p:g}:disabled      sorted set: robot -> out of rotation until (Unix ms)
-- ARGV[1]  how the attempt went: 'returned' (no request was made: the slot is free
--          again), 'answered' (the platform answered, or the request failed, and did not
--          throttle), 'throttled' (the platform throttled the robot), 'disabled' (the
--          robot is out of rotation: broken, or out of its quota)
-- ARGV[2]  the robot's name
-- ARGV[3]  the send's window member (robot_pick.lua)
-- ARGV[4]  window plus guard, ms (touch)
-- ARGV[5]  returned: 1 when the send was the robot's probe; answered: 1 when the robot is
--          open (the platform accepted or refused the message itself); else unused
-- ARGV[6…] throttled: configured limit, cool-down ms, window ms, learning 1/0, longest
--          cool-down ms, the platform's Retry-After ms (0: none), then pairs of the other
--          robots' names and configured limits (throttled's ARGV[3…]); disabled: how
--          long, ms (suspend's ARGV[2])
--
-- Returns: returned and answered {1 when the send was still in the window, else 0};
-- throttled {limit in effect, 1 if an episode started, cool-down end, sends in the
-- window} (throttled's); disabled {touched, until (Unix ms, or "inf")}.
local how = ARGV[1]
if how == 'returned' then
  if ARGV[5] == '1' then -- the probe was not made: let another go
    redis.call('HDEL', KEYS[2], 'probe:' .. ARGV[2])
  end
  return {redis.call('ZREM', KEYS[1], ARGV[3])}
end
local open = '0'
if how == 'answered' then open = ARGV[5] end
local touched = touch({KEYS[1], KEYS[2]}, {ARGV[3], ARGV[4], ARGV[2], open})
if how == 'answered' then
  return {touched}
end
if how == 'throttled' then
  local args = {ARGV[2], ARGV[3]}
  for i = 6, #ARGV do args[#args + 1] = ARGV[i] end
  return throttled({KEYS[3], KEYS[2], KEYS[1], KEYS[4]}, args)
end
return {touched, suspend({KEYS[5]}, {ARGV[2], ARGV[6]})}

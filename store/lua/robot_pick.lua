-- robot_pick.lua: pick the least-used free robot of one group and record the send,
-- atomically for every replica, with Redis TIME as the shared clock.
--
-- KEYS[1]      {p:g}:cool       sorted set: robot -> cooling down until (Unix ms)
-- KEYS[2]      {p:g}:disabled   sorted set: robot -> out of rotation until (Unix ms, +inf: until enabled)
-- KEYS[2+i]    {p:g}:win:<robot i>  sorted set: one member per send, score = send time (Unix ms)
-- ARGV[1]      window, ms
-- ARGV[2]      nonce: a random string that makes this call's window member unique
-- ARGV[1+2i]   name of robot i (i = 1 … n, in the order of KEYS[2+i])
-- ARGV[2+2i]   limit of robot i: sends allowed per window
--
-- A disabled robot is skipped and not waited for. A robot is eligible when it is not disabled, not cooling down, and has fewer than its
-- limit of sends in the window (now - window, now]. Among the eligible robots the one with
-- the fewest sends in the window wins; ties go to the one whose last send is oldest, then
-- to the first in ARGV order. Its window gets the member "<now>-<nonce>" with score now,
-- and the window key expires one window after its newest member.
--
-- Returns {1, robot, sends in window including this one, now, member}   a robot was
--                             picked; member is the send's window member (robot_touch.lua);
--         {0, wait ms, now}   none is free now; wait ms (>= 1) is when the first one will
--                             be (a window slot frees up or a cool-down ends);
--         {-1, now}           every robot is disabled.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local n = #KEYS - 2

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

local best, bestCount, bestLast = nil, nil, nil
local wait = nil
for i = 1, n do
  local name = ARGV[1 + 2 * i]
  local limit = tonumber(ARGV[2 + 2 * i])
  local win = KEYS[2 + i]
  if not redis.call('ZSCORE', KEYS[2], name) then
    local cool = redis.call('ZSCORE', KEYS[1], name)
    if cool then
      local w = tonumber(cool) - now
      if not wait or w < wait then wait = w end
    else
      redis.call('ZREMRANGEBYSCORE', win, '-inf', now - window)
      local count = redis.call('ZCARD', win)
      if count < limit then
        local last = 0
        local newest = redis.call('ZRANGE', win, -1, -1, 'WITHSCORES')
        if newest[2] then last = tonumber(newest[2]) end
        if not best or count < bestCount or (count == bestCount and last < bestLast) then
          best, bestCount, bestLast = i, count, last
        end
      else
        -- the slot of the (count - limit + 1)-th oldest send frees up first
        local oldest = redis.call('ZRANGE', win, count - limit, count - limit, 'WITHSCORES')
        local w = tonumber(oldest[2]) + window - now
        if not wait or w < wait then wait = w end
      end
    end
  end
end

if best then
  local win = KEYS[2 + best]
  local member = string.format('%d', now) .. '-' .. ARGV[2]
  redis.call('ZADD', win, now, member)
  redis.call('PEXPIRE', win, window + 1000)
  return {1, ARGV[1 + 2 * best], bestCount + 1, now, member}
end
if wait then
  if wait < 1 then wait = 1 end
  return {0, wait, now}
end
return {-1, now}

-- robot_pick.lua: pick the least-used free robot of one group and record the send,
-- atomically for every replica, with Redis TIME as the shared clock.
--
-- KEYS[1]      {p:g}:cool       sorted set: robot -> cooling down until (Unix ms)
-- KEYS[2]      {p:g}:disabled   sorted set: robot -> out of rotation until (Unix ms, +inf: until enabled)
-- KEYS[3]      {p:g}:pace       hash: tokens, ts — the group's token bucket (pacing)
-- KEYS[3+i]    {p:g}:win:<robot i>  sorted set: one member per send, score = send time (Unix ms)
-- ARGV[1]      window, ms
-- ARGV[2]      nonce: a random string that makes this call's window member unique
-- ARGV[3]      pacing: 0 none (burst), 1 paced (a pick needs a token: wait for one)
-- ARGV[4]      the bucket's size, tokens
-- ARGV[5]      the bucket's refill rate, tokens per ms
-- ARGV[4+2i]   name of robot i (i = 1 … n, in the order of KEYS[3+i])
-- ARGV[5+2i]   limit of robot i: sends allowed per window
--
-- Pacing: the group's budget is spent evenly under load. The bucket refills at its rate up
-- to its size; a paced pick with less than one token reserves the next one and waits for
-- it (the reply says how long), so waiting alerts go out one merged message per token, and the bucket's
-- size is the burst that goes at once while the recent rate is sustainable. The robots'
-- windows are enforced as ever: pacing only shapes.
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
--         {0, wait ms, now, 1}  paced, and the bucket is empty: the next token, due in wait
--                             ms, is reserved for the caller, who then picks without pacing;
--         {-1, now}           every robot is disabled.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[1])
local n = #KEYS - 3

local pacing = tonumber(ARGV[3])
local tokens, size, rate = 0, tonumber(ARGV[4]), tonumber(ARGV[5])
local function keepTokens()
  redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'ts', string.format('%d', now))
  redis.call('PEXPIRE', KEYS[3], 2 * window + 1000)
end
if pacing > 0 then
  local st = redis.call('HMGET', KEYS[3], 'tokens', 'ts')
  tokens = tonumber(st[1]) or size
  local ts = tonumber(st[2]) or now
  tokens = math.min(size, tokens + math.max(now - ts, 0) * rate)
  if tokens < 1 then
    -- Reserve the next token: the caller waits until it is due and then picks without the
    -- bucket. Reservations queue up, so replicas waiting on one target take turns instead
    -- of racing for each token.
    local w = math.ceil((1 - tokens) / rate)
    if w < 1 then w = 1 end
    tokens = tokens - 1
    keepTokens()
    return {0, w, now, 1}
  end
end

redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

local best, bestCount, bestLast = nil, nil, nil
local wait = nil
for i = 1, n do
  local name = ARGV[4 + 2 * i]
  local limit = tonumber(ARGV[5 + 2 * i])
  local win = KEYS[3 + i]
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
  local win = KEYS[3 + best]
  local member = string.format('%d', now) .. '-' .. ARGV[2]
  redis.call('ZADD', win, now, member)
  redis.call('PEXPIRE', win, window + 1000)
  if pacing > 0 then
    tokens = tokens - 1
    keepTokens()
  end
  return {1, ARGV[4 + 2 * best], bestCount + 1, now, member}
end
if pacing > 0 then
  keepTokens()
end
if wait then
  if wait < 1 then wait = 1 end
  return {0, wait, now}
end
return {-1, now}

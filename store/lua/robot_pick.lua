-- robot_pick.lua: pick a free robot of one group and record the send, atomically for every
-- replica, with Redis TIME as the shared clock.
--
-- KEYS[1]      {p:g}:cool       sorted set: robot -> cooling down until (Unix ms)
-- KEYS[2]      {p:g}:disabled   sorted set: robot -> out of rotation until (Unix ms, +inf: until enabled)
-- KEYS[3]      {p:g}:pace       hash: tokens, ts — the group's token bucket (pacing);
--                               debt: sends to charge it (robot_throttled.lua)
-- KEYS[4]      {p:g}:learn      hash: per robot r, lim:r ceil:r at:r (its learned limit),
--                               doubt:r and probe:r (its state after a throttle), proven:r
--                               (when it took its configured limit in one window)
-- KEYS[4+i]    {p:g}:win:<robot i>  sorted set: one member per send, score = send time (Unix ms)
-- ARGV[1]      window, ms
-- ARGV[2]      nonce: a random string that makes this call's window member unique
-- ARGV[3]      pacing: 0 none (burst), 1 paced (a pick needs a token: wait for one),
--              2 a full message (it takes a token when the bucket has one; when it has
--              none it goes if a robot has room now, as it would carry no more by
--              waiting, and reserves the next token like a paced pick if none has)
-- ARGV[4]      the bucket's share of the capacity: it holds capacity/share tokens and
--              refills at the rest of the capacity per window
-- ARGV[5]      second window, ms: the window of each robot's per-second limit
-- ARGV[6]      learning: 1 on (learned limits and probes), 0 off
-- ARGV[7]      how long a probe may be in flight, ms
-- ARGV[8]      the platform's busy moments recur every this many ms (0: it has none)…
-- ARGV[9]      …and last this many ms from each multiple of ARGV[8] since the epoch…
-- ARGV[10]     …during which a robot's per-second limit is at most this (Feishu asks
--              senders to avoid :00 and :30, when it refuses more readily)
-- ARGV[11]     guard, ms: a send counts in its robot's window for window + guard from
--              its answer (or its hold's end): the bytes of a request the client gave up
--              on may still be on their way, and the platform's clock ticks apart
-- ARGV[12]     hold, ms: how long the send may be in flight from the pick (the request
--              starts and ends within it); 0 counts it from the pick, as if it arrived at once
-- ARGV[10+3i]  name of robot i (i = 1 … n, in the order of KEYS[4+i])
-- ARGV[11+3i]  configured limit of robot i: sends allowed per window
-- ARGV[12+3i]  per-second limit of robot i: sends allowed per second window, 0 for none
--              (Feishu's 5 per second beside its 100 per minute)
--
-- Learning: a robot DingTalk throttled below its configured limit has a learned limit
-- (robot_throttled.lua) that is used instead; it comes back up by one per window without a
-- throttle up to the count that last went through (ceil), and past that by one per ten
-- such windows, and is forgotten once it is the configured limit again. A robot out of
-- its cool-down is in doubt until one request to it is answered: only one request (a
-- probe) may be in flight to it at a time, across all replicas.
--
-- Scouting: a robot is known when it has a learned limit or is proven (it took its
-- configured limit in one window, proven:r is when; a proof lasts 60 windows), unknown
-- otherwise. Picks prefer known robots, the most used first (fill one robot before the
-- next: a robot whose real limit fell since its proof meets the platform's throttle
-- after a few sends, and its news reaches the others before they spent theirs;
-- robot_throttled.lua); when no
-- known robot is free they go to the most used free unknown robot, the scout, so the
-- robots are approached one at a time: if their real limit is lower than configured
-- (someone else sends through them) only the scout meets DingTalk's throttle, and its
-- throttle gives the count that went through to the robots not proven yet
-- (robot_throttled.lua) before any of them is throttled.
--
-- Pacing: the group's budget is spent evenly under load. The capacity is the sum of the
-- robots' limits in effect (learned ones included) of the robots not disabled. The
-- bucket refills at its rate up to its size; a paced pick with less than one token reserves the next one and waits for
-- it (the reply says how long), so waiting alerts go out one merged message per token, and the bucket's
-- size is the burst that goes at once while the recent rate is sustainable. The robots'
-- windows are enforced as ever: pacing only shapes.
--
-- A disabled robot is skipped and not waited for. A robot is eligible when it is not disabled, not cooling down, and has fewer than its
-- limit of sends in the window with its guard (now - window - guard, now] and, with a per-second limit, fewer than
-- that many in the second window (now - second window, now]. Among the eligible robots the one with
-- the most sends in the window wins with learning (the fewest without: a round robin);
-- ties go to the one whose last send is oldest, then to the first in ARGV order. Its window
-- gets the member "<now>-<nonce>" with score now + hold, and the window key expires one
-- window and guard after its newest member.
--
-- In flight: the platform counts a send when its request arrives, at a moment between the
-- pick and the answer that nobody here knows; so a send counts from the pick until it is
-- answered (robot_touch.lua moves it to the answer's time) and, if nobody ever says, until
-- the hold ends, by which the request was answered or given up: a replica that dies
-- mid-request, or a request that took long to arrive, never frees its slot early. A slot
-- that waits for an answer is polled (every guard, at least a second window), not waited
-- for until the hold ends.
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
local guard = tonumber(ARGV[11])
local hold = tonumber(ARGV[12])
local n = #KEYS - 4
local learn = ARGV[6] == '1'
local probeTTL = tonumber(ARGV[7])
local secWindow = tonumber(ARGV[5])
local busyEvery, busyFor = tonumber(ARGV[8]), tonumber(ARGV[9])
local busyPerSecond = 0
if busyEvery > 0 and now % busyEvery < busyFor then
  busyPerSecond = tonumber(ARGV[10])
end

-- effective returns robot name's limit in effect, applying the recovery due since its
-- last change.
local function effective(name, limit)
  if not learn then return limit end
  local st = redis.call('HMGET', KEYS[4], 'lim:' .. name, 'ceil:' .. name, 'at:' .. name)
  local lim = tonumber(st[1])
  if not lim then return limit end
  local ceil = tonumber(st[2]) or limit
  local at = tonumber(st[3]) or now
  local steps = math.floor((now - at) / window)
  if steps < 1 then return math.min(lim, limit) end
  if lim < ceil then
    lim = math.min(ceil, lim + steps)
    at = at + steps * window
  elseif steps >= 10 then
    lim = lim + 1
    ceil = lim
    at = now
  else
    return math.min(lim, limit)
  end
  if lim >= limit then
    redis.call('HDEL', KEYS[4], 'lim:' .. name, 'ceil:' .. name, 'at:' .. name)
    return limit
  end
  redis.call('HSET', KEYS[4], 'lim:' .. name, lim, 'ceil:' .. name, ceil, 'at:' .. name, string.format('%d', at))
  return lim
end

local pacing = tonumber(ARGV[3])
local tokens, size, rate = 0, 0, 0
local fullWithout = false -- a full message's pick that found no token: it goes only if a robot has room
local function keepTokens()
  redis.call('HSET', KEYS[3], 'tokens', tostring(tokens), 'ts', string.format('%d', now))
  redis.call('PEXPIRE', KEYS[3], 2 * window + 1000)
end
-- reserve reserves the next token: the caller waits until it is due and then picks
-- without the bucket. Reservations queue up, so replicas waiting on one target take turns
-- instead of racing for each token.
local function reserve()
  local w = math.ceil((1 - tokens) / rate)
  if w < 1 then w = 1 end
  tokens = tokens - 1
  keepTokens()
  return {0, w, now, 1}
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now)

-- The robots' limits in effect, and the capacity the bucket paces.
local limits, capacity = {}, 0
for i = 1, n do
  local name = ARGV[10 + 3 * i]
  limits[i] = effective(name, tonumber(ARGV[11 + 3 * i]))
  if not redis.call('ZSCORE', KEYS[2], name) then
    capacity = capacity + limits[i]
  end
end
if pacing > 0 and capacity > 0 then
  local share = tonumber(ARGV[4])
  size = math.max(capacity / share, 1)
  rate = math.max(capacity - size, capacity / share) / window
  local st = redis.call('HMGET', KEYS[3], 'tokens', 'ts')
  tokens = tonumber(st[1]) or size
  local ts = tonumber(st[2]) or now
  tokens = math.min(size, tokens + math.max(now - ts, 0) * rate)
  -- a throttle episode's debt (robot_throttled.lua): sends made before the lower limits
  -- were known, which the capacity in effect now must count
  local debt = tonumber(redis.call('HGET', KEYS[3], 'debt'))
  if debt then
    tokens = tokens - debt
    redis.call('HDEL', KEYS[3], 'debt')
  end
  if tokens < 1 and pacing == 2 then
    -- a full message goes without a token if a robot has room now (below), and reserves
    -- one like a paced pick if none has; the bucket keeps its refill and debt
    pacing = 0
    fullWithout = true
    keepTokens()
  elseif tokens < 1 then
    return reserve()
  end
end

-- freesIn is how long until a slot held by a send scored at score, of a window of span,
-- frees: when the send is still in flight (its score is ahead) it may be answered any
-- moment, so it is asked again after a poll.
local poll = math.max(guard, secWindow, 1)
local function freesIn(score, span)
  local w = score + span - now
  if score > now and w > poll then return poll end
  return w
end

-- known reports whether robot name is known (scouting, above).
local function known(name)
  if not learn then return true end
  local st = redis.call('HMGET', KEYS[4], 'lim:' .. name, 'proven:' .. name)
  if st[1] then return true end
  local proven = tonumber(st[2])
  return proven ~= nil and proven > now - 60 * window
end

local best, bestCount, bestLast, bestLimit, bestProbe = nil, nil, nil, nil, false
local scout, scoutCount, scoutLimit, scoutProbe = nil, nil, nil, false
local wait = nil
for i = 1, n do
  local name = ARGV[10 + 3 * i]
  local limit = limits[i]
  local perSecond = tonumber(ARGV[12 + 3 * i])
  if busyPerSecond > 0 and (perSecond == 0 or busyPerSecond < perSecond) then
    perSecond = busyPerSecond -- the platform's busy moment: spread the sends
  end
  local win = KEYS[4 + i]
  local probing = false
  if learn and redis.call('HGET', KEYS[4], 'doubt:' .. name) then
    local inFlight = tonumber(redis.call('HGET', KEYS[4], 'probe:' .. name))
    if inFlight and inFlight > now then
      probing = nil -- its one probe is in flight: wait for its answer
      local w = inFlight - now
      if not wait or w < wait then wait = w end
    else
      probing = true
    end
  end
  if probing ~= nil and not redis.call('ZSCORE', KEYS[2], name) then
    local cool = redis.call('ZSCORE', KEYS[1], name)
    if cool then
      local w = tonumber(cool) - now
      if not wait or w < wait then wait = w end
    else
      redis.call('ZREMRANGEBYSCORE', win, '-inf', now - window - guard)
      local count = redis.call('ZCARD', win)
      local recent = 0
      if perSecond > 0 then
        recent = redis.call('ZCOUNT', win, '(' .. (now - secWindow), '+inf')
      end
      if count < limit and recent >= perSecond and perSecond > 0 then
        -- over the per-second limit: the (recent - perSecond + 1)-th oldest of the second
        -- window leaves it first
        local oldest = redis.call('ZRANGEBYSCORE', win, '(' .. (now - secWindow), '+inf', 'WITHSCORES', 'LIMIT', recent - perSecond, 1)
        local w = freesIn(tonumber(oldest[2]), secWindow)
        if not wait or w < wait then wait = w end
      elseif count < limit then
        local last = 0
        local newest = redis.call('ZRANGE', win, -1, -1, 'WITHSCORES')
        if newest[2] then last = tonumber(newest[2]) end
        if not known(name) then
          if not scout or count > scoutCount then
            scout, scoutCount, scoutLimit, scoutProbe = i, count, limit, probing
          end
        elseif not best or (learn and count > bestCount) or (not learn and count < bestCount)
            or (count == bestCount and last < bestLast) then
          best, bestCount, bestLast, bestLimit, bestProbe = i, count, last, limit, probing
        end
      else
        -- the slot of the (count - limit + 1)-th oldest send frees up first
        local oldest = redis.call('ZRANGE', win, count - limit, count - limit, 'WITHSCORES')
        local w = freesIn(tonumber(oldest[2]), window + guard)
        if not wait or w < wait then wait = w end
      end
    end
  end
end

if not best and scout then
  best, bestCount, bestLimit, bestProbe = scout, scoutCount, scoutLimit, scoutProbe
  if scoutCount + 1 >= scoutLimit then
    -- the scout takes its configured limit in this window: proven (a throttle of this
    -- send takes the proof back)
    redis.call('HSET', KEYS[4], 'proven:' .. ARGV[10 + 3 * scout], string.format('%d', now))
  end
end
if best then
  local win = KEYS[4 + best]
  local member = string.format('%d', now) .. '-' .. ARGV[2]
  redis.call('ZADD', win, now + hold, member)
  redis.call('PEXPIRE', win, hold + window + guard + 1000)
  if pacing > 0 and rate > 0 then
    tokens = tokens - 1
    keepTokens()
  end
  local probe = 0
  if bestProbe then
    probe = 1
    redis.call('HSET', KEYS[4], 'probe:' .. ARGV[10 + 3 * best], string.format('%d', now + probeTTL))
  end
  return {1, ARGV[10 + 3 * best], bestCount + 1, now, member, bestLimit, probe}
end
if fullWithout then
  return reserve()
end
if pacing > 0 and rate > 0 then
  keepTokens()
end
if wait then
  if wait < 1 then wait = 1 end
  return {0, wait, now}
end
return {-1, now}

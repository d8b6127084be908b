-- principal_episodes.lua: a principal opens an escalation episode, within its cap.
--
-- KEYS[1]  {p}:principal:eps:<name>     set of the episode keys it opened
-- KEYS[2]  {p}:ep-live                  sorted set: key -> started, the episodes not ended
-- KEYS[3]  {p}:principal:eps-at:<name>  sorted set: key -> when it was recorded here (Unix
--                                       ms, Redis clock)
-- ARGV[1]  the episode key
-- ARGV[2]  the most it may have open at once
-- ARGV[3]  how long a key recorded here counts while its episode is not live yet (ms):
--          its start (the caller's next step) may still be on its way
--
-- Forgets the keys whose episodes ended (once seen live), or that never started within
-- ARGV[3]. Returns
-- {1, open} when the key is one of its open episodes already or it may open it (then it
-- is recorded), {0, open} when it has ARGV[2] open; open counts them, the new one
-- included. A key recorded by a concurrent request whose start has not landed yet
-- counts, so requests at once cannot open more than the cap between them.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local open = 0
local mine = false
for _, k in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  local live = redis.call('ZSCORE', KEYS[2], k)
  if live then
    redis.call('ZREM', KEYS[3], k) -- started: from now on it counts while it is live
  end
  local starting = not live and tonumber(redis.call('ZSCORE', KEYS[3], k) or '0') > now - tonumber(ARGV[3])
  if live or starting then
    open = open + 1
    if k == ARGV[1] then
      mine = true
    end
  else
    redis.call('SREM', KEYS[1], k)
    redis.call('ZREM', KEYS[3], k)
  end
end
if mine then
  return {1, open}
end
if open >= tonumber(ARGV[2]) then
  return {0, open}
end
redis.call('SADD', KEYS[1], ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
return {1, open + 1}

-- roster_known.lua: how long ago a replica last said it knows a target.
--
-- KEYS[1]  {p}:targets  hash target → when a replica last said it knows it, Unix ms
-- ARGV[1]  the target
--
-- Returns the milliseconds since, by the Redis clock (0 at least); -1 when no replica
-- ever did.
local v = redis.call('HGET', KEYS[1], ARGV[1])
if not v then
  return -1
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return math.max(0, now - tonumber(v))

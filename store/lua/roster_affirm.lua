-- roster_affirm.lua: a replica says which targets its configuration has.
--
-- KEYS[1]  {p}:targets  hash target → when a replica last said it knows it, Unix ms
-- ARGV     the target names
--
-- Records the Redis clock's now for each; returns it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV do
  redis.call('HSET', KEYS[1], ARGV[i], now)
end
return now

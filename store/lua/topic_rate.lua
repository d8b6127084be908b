-- topic_rate.lua: take up to N tokens of a rate (a topic target's, a principal's), for all
-- replicas together, on Redis's clock (GCRA: the key holds the theoretical arrival time
-- of the next token; each token moves it one interval later, and it may run at most
-- `burst` intervals ahead of now).
--
-- KEYS[1]  {p:g}:rate   string: the theoretical arrival time, Unix µs
-- ARGV[1]  tokens wanted, at least 1
-- ARGV[2]  rate, tokens per second, positive (a fraction: fewer than one a second)
-- ARGV[3]  burst, tokens that may go at once, at least 1
--
-- Returns {granted, wait}: granted tokens (0 to ARGV[1]); when 0, wait is how many µs
-- until one is free.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local want = tonumber(ARGV[1])
local interval = 1000000 / tonumber(ARGV[2])
local burst = tonumber(ARGV[3])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then
  tat = now
end
local room = math.floor((now + burst * interval - tat) / interval)
if room <= 0 then
  return {0, math.ceil(tat + interval - burst * interval - now)}
end
local granted = math.min(want, room)
tat = math.floor(tat + granted * interval)
redis.call('SET', KEYS[1], string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
return {granted, 0}

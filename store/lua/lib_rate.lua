-- lib_rate.lua: a rate for all replicas together, on Redis's clock (GCRA: the key holds
-- the theoretical arrival time of the next token; each token moves it one interval
-- later, and it may run at most `burst` intervals ahead of now). Loaded before the
-- scripts that take a rate (topic_rate.lua, principal_publish.lua).

-- take_rate takes up to want tokens of the rate held in key (rate tokens per second, a
-- fraction for fewer than one a second; bursts of burst) and returns {granted, wait}:
-- granted tokens (0 to want); when 0, wait is how many µs until one is free.
local function take_rate(key, want, rate, burst)
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local interval = 1000000 / rate
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then
    tat = now
  end
  local room = math.floor((now + burst * interval - tat) / interval)
  if room <= 0 then
    return {0, math.ceil(tat + interval - burst * interval - now)}
  end
  local granted = math.min(want, room)
  tat = math.floor(tat + granted * interval)
  redis.call('SET', key, string.format('%.0f', tat), 'PX', math.ceil((tat - now) / 1000) + 1000)
  return {granted, 0}
end

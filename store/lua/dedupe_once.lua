-- dedupe_once.lua: the id every copy of one event gets within a window (dedupe.go).
--
-- KEYS[1]  {p}:once:<key>  string: "<id>|<until, Unix ms>", the id the event's first
--                          copy picked and when its window ends by the callers' clock
-- ARGV[1]  the id this copy would pick
-- ARGV[2]  now, Unix ms, by the caller's clock (the service's reference clock)
-- ARGV[3]  the window, ms
--
-- The window is judged by ARGV[2], not by the key's lifetime, so that a clock the caller
-- injects decides it; the key lives the window (PX) only so that Redis forgets it.
-- Returns the id: the recorded one while its window lasts, else ARGV[1], now recorded.
local rec = redis.call('GET', KEYS[1])
if rec then
  local sep = string.find(rec, '|', 1, true)
  if sep and tonumber(ARGV[2]) < tonumber(string.sub(rec, sep + 1)) then
    return string.sub(rec, 1, sep - 1)
  end
end
local window = tonumber(ARGV[3])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. string.format('%d', tonumber(ARGV[2]) + window), 'PX', window)
return ARGV[1]

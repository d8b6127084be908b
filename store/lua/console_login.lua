-- console_login.lua: a console login is about to be tried: count it against its client's
-- and everyone's failed logins first, so that logins at once cannot all pass a count read
-- before any of them is counted. One over a limit is taken back and waits.
--
-- KEYS[1]  {p}:console:fails:<client>  string: the client's failures in its window
-- KEYS[2]  {p}:console:fails:          string: everyone's
-- ARGV[1]  failures a client may have in a window
-- ARGV[2]  failures everyone together may have in a window
-- ARGV[3]  the window, ms: it starts at the first failure
--
-- Returns 0 when the login may be tried (counted as a failure until it succeeds:
-- console.go takes it back then), else the ms until the window that refused it ends.
local limits = {tonumber(ARGV[1]), tonumber(ARGV[2])}
local counts = {}
for i = 1, 2 do
  counts[i] = redis.call('INCR', KEYS[i])
  if redis.call('PTTL', KEYS[i]) < 0 then
    redis.call('PEXPIRE', KEYS[i], ARGV[3])
  end
end
for i = 1, 2 do
  if counts[i] > limits[i] then
    redis.call('DECR', KEYS[1])
    redis.call('DECR', KEYS[2])
    return math.max(redis.call('PTTL', KEYS[i]), 1)
  end
end
return 0

-- console_login_ok.lua: a console login counted by console_login.lua succeeded: take it
-- back from its client's and everyone's failures (never below zero: a window that ended
-- meanwhile starts again at the next failure).
--
-- KEYS[1]  {p}:console:fails:<client>
-- KEYS[2]  {p}:console:fails:
for i = 1, 2 do
  if tonumber(redis.call('GET', KEYS[i]) or '0') > 0 then
    redis.call('DECR', KEYS[i])
  end
end
return 1

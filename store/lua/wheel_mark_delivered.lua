-- wheel_mark_delivered.lua: leave the done marker of an id delivered outside the wheel
-- stage (by the failed-sends retry job), as wheel_release.lua does.
--
-- KEYS[1]  {p}:done:<id>  done marker of this id
-- ARGV[1]  the marker's value: the delivery time, Unix ms
-- ARGV[2]  done marker lifetime, ms
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1

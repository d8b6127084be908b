-- wheel_mark_delivered.lua: leave the done markers of ids delivered, as wheel_release.lua
-- does: for an alert delivered outside the wheel stage (by the failed-sends retry job),
-- or delivered by a hand-off whose release waits behind others (scheduler/release.go).
--
-- KEYS[1…] {p}:done:<id>  done marker of each id
-- ARGV[1]  the markers' value: the delivery time, Unix ms
-- ARGV[2]  done marker lifetime, ms
for _, key in ipairs(KEYS) do
  redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
end
return #KEYS

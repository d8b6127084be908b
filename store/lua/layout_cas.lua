-- layout_cas.lua: change the wheel stage's layout record (store/moving.go) from one
-- value to another, unless it holds something else.
--
-- KEYS[1]  {p}:shards      the layout: "3", "1>3" or "1>3+@<ms>"
-- KEYS[2]  {p}:fence-lift  the count whose shards' fences are to be lifted (LiftFences)
-- ARGV[1]  the value it must hold
-- ARGV[2]  the value it takes
-- ARGV[3]  when not empty, the count KEYS[2] takes with the change: a move that settles
--          leaves its fences to be lifted, by whichever replica gets there
--
-- Returns the value it holds after the call.
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2])
  if ARGV[3] ~= '' then
    redis.call('SET', KEYS[2], ARGV[3])
  end
  return ARGV[2]
end
return cur or ''

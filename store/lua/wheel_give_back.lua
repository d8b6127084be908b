-- wheel_give_back.lua: return an entry whose hand-off failed to due, for a retry.
--
-- KEYS[1]  {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- ARGV[1]  id
-- ARGV[2]  retry time, Unix ms (the new score in due)
--
-- Returns 1 when the id was in flight and is now in due, 0 when it was not in flight
-- (released, cancelled or given back already: nothing changed).
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
  return 1
end
return 0

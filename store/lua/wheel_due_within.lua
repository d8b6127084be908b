-- wheel_due_within.lua: list the entries due soon (read only).
--
-- KEYS[1]  {p}:due  sorted set: id -> next due time (Unix ms)
-- ARGV[1]  window, ms
-- ARGV[2]  limit: most ids to return
--
-- Returns a flat array id1, due1, id2, due2, … (due as Unix ms) of the ids whose due time
-- is at most Redis now + window, earliest first.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('%d', now + tonumber(ARGV[1])),
  'WITHSCORES', 'LIMIT', 0, tonumber(ARGV[2]))

-- live_view.lua: what the liveness keys say, at one moment of Redis's clock (read only).
--
-- KEYS[1]  {p}:live       sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- KEYS[2]  {p}:live-meta  hash: last -> the last beat of any replica, quiet -> take-overs
--                         wait until then (Unix ms)
-- KEYS[3]  {p}:gone       sorted set: replica -> when the take-over of its holdings
--                         finished (Unix ms)
--
-- Returns {now, {replica, end of its liveness, …}, last beat or "", quiet until or "",
-- {replica gone, …}}, times in Unix ms, gone in the order the take-overs finished.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return {string.format('%d', now), redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES'),
  redis.call('HGET', KEYS[2], 'last') or '', redis.call('HGET', KEYS[2], 'quiet') or '',
  redis.call('ZRANGE', KEYS[3], 0, -1)}

-- live_beat.lua: a replica's heartbeat: it stays live until Redis now + the liveness
-- period, whatever it holds (one write, however many ids it holds).
--
-- KEYS[1]  {p}:live       sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- KEYS[2]  {p}:live-meta  hash: last -> the last beat of any replica, quiet -> take-overs
--                         wait until then (Unix ms)
-- KEYS[3]  {p}:gone       sorted set: replica -> when the take-over of its holdings
--                         finished (Unix ms; wheel_claim_overdue.lua)
-- KEYS[4]  {p}:departed   sorted set: gone replica -> when a survivor took it (Unix ms;
--                         live_take_gone.lua)
-- ARGV[1]  the replica's id
-- ARGV[2]  liveness period T, ms
-- ARGV[3]  how long a departed replica is reported absent, ms
--
-- A gap in everyone's beats longer than T/2 (Redis was down, restarted or failed over, or
-- cut off from every replica) opens a quiet window until Redis now + T: no take-over
-- until then (wheel_claim_overdue.lua), so every replica has a whole period to beat again
-- before any of them counts as lapsed.
-- Returns {lapsed, gone}: lapsed is 1 when the replica had lapsed (its liveness ran out
-- before this beat, or its holdings were taken over: it is in gone), 0 when it was live,
-- or is new; a replica that lapsed keeps what was not taken over yet. gone counts the
-- replicas in gone (live_take_gone.lua takes them). absent lists, up to 64 of each, the
-- replicas that lapsed (still in live, past their liveness), are gone, or departed
-- within ARGV[3]: the scheduler's consumers leave their queues to live ones. A replica
-- that beats is not departed (any more).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local period = tonumber(ARGV[2])
local last = tonumber(redis.call('HGET', KEYS[2], 'last') or '')
if last and now - last > math.floor(period / 2) then
  redis.call('HSET', KEYS[2], 'quiet', string.format('%d', now + period))
end
redis.call('HSET', KEYS[2], 'last', string.format('%d', now))
local was = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '')
redis.call('ZADD', KEYS[1], string.format('%d', now + period), ARGV[1])
local lapsed = 0
if (was and was < now) or (not was and redis.call('ZSCORE', KEYS[3], ARGV[1])) then
  lapsed = 1
end
redis.call('ZREM', KEYS[4], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', string.format('(%d', now - tonumber(ARGV[3])))
local absent = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', string.format('(%d', now), 'LIMIT', 0, 64)
for _, r in ipairs(redis.call('ZRANGE', KEYS[3], 0, 63)) do
  table.insert(absent, r)
end
for _, r in ipairs(redis.call('ZRANGE', KEYS[4], 0, 63)) do
  table.insert(absent, r)
end
return {lapsed, redis.call('ZCARD', KEYS[3]), absent}

-- wheel_extend_lease.lua: renew the leases of entries a claimer still holds.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner     hash: id -> token of the claim that holds it
-- ARGV[1]  lease, ms
-- ARGV[2…] pairs: id, token of the claim the caller holds it by
--
-- Sets the lease expiry of every id still in inflight and owned by its token to Redis now
-- + lease. An id that is not in flight any more, or is owned by another claim (its lease
-- expired and another replica's sweeper took it), is left alone.
-- Returns the ids that were not renewed: the caller no longer holds them.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local lost = {}
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', KEYS[1], id) and redis.call('HGET', KEYS[2], id) == token then
    redis.call('ZADD', KEYS[1], 'XX', expiry, id)
  else
    lost[#lost + 1] = id
  end
end
return lost

-- wheel_extend_lease.lua: renew the leases of entries still in flight.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- ARGV[1]  lease, ms
-- ARGV[2…] ids
--
-- Sets the lease expiry of every id still in inflight to Redis now + lease; ids not in
-- inflight are skipped (never added).
-- Returns the number of ids whose lease was renewed.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local n = 0
for i = 2, #ARGV do
  if redis.call('ZSCORE', KEYS[1], ARGV[i]) then
    redis.call('ZADD', KEYS[1], 'XX', expiry, ARGV[i])
    n = n + 1
  end
end
return n

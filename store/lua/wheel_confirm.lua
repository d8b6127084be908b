-- wheel_confirm.lua: check, right before a send (or a record of its failure), that the
-- claim still holds the entry, and renew its lease so the step has a whole lease to finish.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner     hash: id -> token of the claim that holds it
-- ARGV[1]  lease, ms
-- ARGV[2]  id
-- ARGV[3]  token of the caller's claim
--
-- Returns 1 when the entry is in flight and owned by the token (lease renewed), 0 when
-- not (released, cancelled, or claimed by another replica after this claim's lease ran
-- out): the caller must not send it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if redis.call('ZSCORE', KEYS[1], ARGV[2]) and redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[3] then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[1])), ARGV[2])
  return 1
end
return 0

-- wheel_mark_failed.lua: note that the send of an entry failed for good, so that whoever
-- hands it off next (this replica after a give-back, or another after a crash) only
-- records the failure and never sends it again.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[3]  {p}:failed    hash: id -> the failure of its send
-- ARGV[1]  id
-- ARGV[2]  token of the caller's claim
-- ARGV[3]  the failure, encoded by the caller
--
-- Returns 1 when noted, 0 when the caller's claim does not hold the entry any more.
if redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('HGET', KEYS[2], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[3], ARGV[1], ARGV[3])
  return 1
end
return 0

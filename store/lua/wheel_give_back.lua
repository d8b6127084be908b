-- wheel_give_back.lua: return an entry whose hand-off did not finish to due, for a retry.
--
-- KEYS[1]  {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[4]  {p}:tries     hash: id -> hand-offs given back so far
-- KEYS[5]  {p}:parts     hash: id -> leading parts of a split alert delivered so far
-- KEYS[6]  {p}:by        hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[7]  {p}:held      sorted set: "<replica>/<id>" of each id in by
-- ARGV[1]  id
-- ARGV[2]  token of the caller's claim
-- ARGV[3]  retry time, Unix ms (the new score in due)
-- ARGV[4]  leading parts of a split alert the hand-off delivered ("0": none)
--
-- Only the claim that holds the entry can give it back: its tries count goes up by one,
-- and no replica is responsible for it any more.
-- The parts delivered are noted in any case (they were delivered, whoever holds the
-- entry now), never lowered, so the next hand-off sends from the next part.
-- Returns 1 when the id was in flight under the token and is now in due, 0 otherwise
-- (released, cancelled, given back already, or claimed by another replica: nothing
-- changed but the parts).
local parts = tonumber(ARGV[4])
if parts > 0 and redis.call('ZSCORE', KEYS[2], ARGV[1])
    and parts > tonumber(redis.call('HGET', KEYS[5], ARGV[1]) or '0') then
  redis.call('HSET', KEYS[5], ARGV[1], ARGV[4])
end
if redis.call('ZSCORE', KEYS[2], ARGV[1]) and redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[2] then
  redis.call('ZREM', KEYS[2], ARGV[1])
  redis.call('HDEL', KEYS[3], ARGV[1])
  unhold(KEYS[6], KEYS[7], ARGV[1])
  redis.call('HINCRBY', KEYS[4], ARGV[1], 1)
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
  return 1
end
return 0

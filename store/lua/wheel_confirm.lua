-- wheel_confirm.lua: check, right before a send (or a record of its failure), that the
-- claim still holds the entry, and renew its lease so the step has a whole lease to finish.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[3]  {p}:parts     hash: id -> leading parts of a split alert delivered so far
-- KEYS[4]  {p}:guard     sorted set: id -> until when a confirmed send of it may still be
--                        on the wire (Unix ms)
-- ARGV[1]  lease, ms
-- ARGV[2]  id
-- ARGV[3]  token of the caller's claim
-- ARGV[4]  leading parts of a split alert delivered before this step ("0": none)
-- ARGV[5]  guard G, ms: how long after the confirm its send may start; "0": liveness is
--          off, no guard
--
-- The parts delivered are noted first, in any case and never lowered (they were
-- delivered, whoever holds the entry now), so a later hand-off resumes after them.
-- Returns 1 when the entry is in flight and owned by the token (lease renewed, and with
-- liveness on guarded until Redis now + G: a take-over of the claim's replica leaves it
-- until then, wheel_claim_overdue.lua), 0 when not (released, cancelled, or taken by
-- another replica after this claim's lease ran out or its replica lapsed): the caller
-- must not send it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local inflight = redis.call('ZSCORE', KEYS[1], ARGV[2])
local parts = tonumber(ARGV[4])
if inflight and parts > 0 and parts > tonumber(redis.call('HGET', KEYS[3], ARGV[2]) or '0') then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
end
if inflight and redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[3] then
  redis.call('ZADD', KEYS[1], 'XX', string.format('%d', now + tonumber(ARGV[1])), ARGV[2])
  if ARGV[5] ~= '0' then
    redis.call('ZADD', KEYS[4], string.format('%d', now + tonumber(ARGV[5])), ARGV[2])
  end
  return 1
end
return 0

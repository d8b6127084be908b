-- wheel_adopt.lua: claim the parked entries of one target with the lowest turns
-- (wheel_park.lua: every share's next alert first, in the order each share parked them).
--
-- KEYS[1…10] as wheel_claim.lua: due, inflight, entries, owner, tries, failed, parts, by,
--             held, live
-- KEYS[11]  {p}:park:<g>       sorted set: id -> its turn, the target's parked ids
-- KEYS[12]  {p}:adopt:<token>  sorted set: id -> its turn, the ids this claim adopted
--                              (lives an hour, or a lease if longer)
-- ARGV[1]   lease, ms
-- ARGV[2]   token of this claim: "<replica>/<…>"
-- ARGV[3]   the park's owner token ("parked:<target>")
-- ARGV[4]   the most entries to claim
-- ARGV[5]   liveness period, ms; "0": liveness is off
--
-- The parked ids of the lowest turns leave the park; each one still owned by the park moves to this
-- claim with a fresh lease, as wheel_claim.lua's claims do. An id the park no longer owns
-- (the sweeper claimed it after the park's lease ran out, or it was cancelled or
-- released) only leaves the park. The ids adopted are noted under the token, so the same
-- adopt run again (its reply was lost and the caller repeats it with the same token)
-- returns what the first run took and the token still holds, with a renewed lease, and
-- takes nothing more, as wheel_claim_overdue.lua does. The token's replica becomes
-- responsible for each id adopted (by, held). With liveness on, a replica that is not
-- live adopts nothing: the script fails with LAPSED.
-- Returns {claimed, left}: claimed is {id, entry, tries, failure, parts, …} as
-- wheel_claim.lua's, lowest turn first; left the ids still parked.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local want = tonumber(ARGV[4])
local claimed, n = {}, 0
local replica = replica_of(ARGV[2])
if ARGV[5] ~= '0' and lapsed(KEYS[10], replica, now) then
  return lapsed_error(replica)
end

local function emit(id, entry)
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = entry
  claimed[#claimed + 1] = redis.call('HGET', KEYS[5], id) or '0'
  claimed[#claimed + 1] = redis.call('HGET', KEYS[6], id) or ''
  claimed[#claimed + 1] = redis.call('HGET', KEYS[7], id) or '0'
  n = n + 1
end

if redis.call('EXISTS', KEYS[12]) == 1 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[12], 0, -1)) do
    local entry = redis.call('HGET', KEYS[3], id)
    if entry and redis.call('HGET', KEYS[4], id) == ARGV[2] and redis.call('ZSCORE', KEYS[2], id) then
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
      emit(id, entry)
    end
  end
  return {claimed, redis.call('ZCARD', KEYS[11])}
end

while n < want do
  local parked = redis.call('ZRANGE', KEYS[11], 0, want - n - 1, 'WITHSCORES')
  if #parked == 0 then break end
  for i = 1, #parked, 2 do
    local id = parked[i]
    redis.call('ZREM', KEYS[11], id)
    local entry = redis.call('HGET', KEYS[3], id)
    if entry and redis.call('HGET', KEYS[4], id) == ARGV[3] and redis.call('ZSCORE', KEYS[2], id) then
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
      redis.call('HSET', KEYS[4], id, ARGV[2])
      hold(KEYS[8], KEYS[9], id, replica)
      redis.call('ZADD', KEYS[12], parked[i + 1], id)
      emit(id, entry)
    end
  end
end
if n > 0 then
  -- An hour (or a lease, if longer): an adopter that cannot tell whether its adopt ran
  -- repeats it until it can, and the repeat must still find what this run took.
  redis.call('PEXPIRE', KEYS[12], math.max(tonumber(ARGV[1]), 3600000))
end
return {claimed, redis.call('ZCARD', KEYS[11])}

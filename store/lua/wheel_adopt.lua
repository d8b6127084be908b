-- wheel_adopt.lua: claim the earliest parked entries of one target (wheel_park.lua).
--
-- KEYS[1…7] as wheel_claim.lua: due, inflight, entries, owner, tries, failed, parts
-- KEYS[8]   {p}:park:<g>  sorted set: id -> due time (Unix ms), the target's parked ids
-- ARGV[1]   lease, ms
-- ARGV[2]   token of this claim
-- ARGV[3]   the park's owner token ("parked:<target>")
-- ARGV[4]   the most entries to claim
--
-- The earliest parked ids leave the park; each one still owned by the park moves to this
-- claim with a fresh lease, as wheel_claim.lua's claims do. An id the park no longer owns
-- (the sweeper claimed it after the park's lease ran out, or it was cancelled or
-- released) only leaves the park.
-- Returns {claimed, left}: claimed is {id, entry, tries, failure, parts, …} as
-- wheel_claim.lua's, left the ids still parked.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local want = tonumber(ARGV[4])
local claimed, n = {}, 0
while n < want do
  local ids = redis.call('ZRANGE', KEYS[8], 0, want - n - 1)
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    redis.call('ZREM', KEYS[8], id)
    local entry = redis.call('HGET', KEYS[3], id)
    if entry and redis.call('HGET', KEYS[4], id) == ARGV[3] and redis.call('ZSCORE', KEYS[2], id) then
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
      redis.call('HSET', KEYS[4], id, ARGV[2])
      claimed[#claimed + 1] = id
      claimed[#claimed + 1] = entry
      claimed[#claimed + 1] = redis.call('HGET', KEYS[5], id) or '0'
      claimed[#claimed + 1] = redis.call('HGET', KEYS[6], id) or ''
      claimed[#claimed + 1] = redis.call('HGET', KEYS[7], id) or '0'
      n = n + 1
    end
  end
end
return {claimed, redis.call('ZCARD', KEYS[8])}

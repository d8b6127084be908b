-- wheel_park.lua: park claimed entries of one target, busy at its robots, where every
-- replica can adopt them: the claim ends, the entries stay in flight under the park.
--
-- KEYS[1]  {p}:inflight     sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner        hash: id -> token of the claim that holds it
-- KEYS[3]  {p}:park:<g>     sorted set: id -> due time (Unix ms), the target's parked ids
-- KEYS[4]  {p}:by           hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[5]  {p}:held         sorted set: "<replica>/<id>" of each id in by
-- KEYS[6]  {p}:live         sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- ARGV[1]  the park's lease, ms: how long a parked entry waits for an adopter before the
--          sweeper of any replica claims it as an expired claim
-- ARGV[2]  the park's owner token ("parked:<target>"; no claim ever has it)
-- ARGV[3]  liveness period, ms; "0": liveness is off
-- ARGV[4…] triples: id, token of the caller's claim ("<replica>/<…>"), due time (Unix ms)
--
-- Only the claim that holds an entry can park it. A parked entry is in flight, owned by
-- the park's token, with the park's lease; it is in the target's park by due time. No
-- claim holds it, so only wheel_adopt.lua (or the sweeper, once the park's lease ran out)
-- can take it, and Confirm of its former claim fails. The replica of the claim stays
-- responsible for a parked id (by, held): its take-over moves the id's parks too. With
-- liveness on, a replica that is not live parks nothing: the script fails with LAPSED.
-- Returns the ids parked.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local parked = {}
if ARGV[3] ~= '0' then
  for i = 4, #ARGV, 3 do
    local replica = replica_of(ARGV[i + 1])
    if lapsed(KEYS[6], replica, now) then
      return lapsed_error(replica)
    end
  end
end
for i = 4, #ARGV, 3 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', KEYS[1], id) and redis.call('HGET', KEYS[2], id) == token then
    redis.call('ZADD', KEYS[1], 'XX', expiry, id)
    redis.call('HSET', KEYS[2], id, ARGV[2])
    hold(KEYS[4], KEYS[5], id, replica_of(token))
    redis.call('ZADD', KEYS[3], ARGV[i + 2], id)
    parked[#parked + 1] = id
  end
end
if #parked > 0 then
  redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[1]))
end
return parked

-- wheel_park.lua: park claimed entries of one target, busy at its robots, where every
-- replica can adopt them: the claim ends, the entries stay in flight under the park.
--
-- KEYS[1]  {p}:inflight     sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner        hash: id -> token of the claim that holds it
-- KEYS[3]  {p}:park:<g>     sorted set: id -> its turn (below), the target's parked ids
-- KEYS[4]  {p}:by           hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[5]  {p}:held         sorted set: "<replica>/<id>" of each id in by
-- KEYS[6]  {p}:live         sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- KEYS[7]  {p}:turn:<g>     hash: share -> the turn its next parked id gets
-- ARGV[1]  the park's lease, ms: how long a parked entry waits for an adopter before the
--          sweeper of any replica claims it as an expired claim
-- ARGV[2]  the park's owner token ("parked:<target>"; no claim ever has it)
-- ARGV[3]  liveness period, ms; "0": liveness is off
-- ARGV[4…] quadruples: id, token of the caller's claim ("<replica>/<…>"), due time (Unix
--          ms; unused), share (the principal whose share of the target's robots it takes)
--
-- Fair turns: a parked id's score is its turn, start-time fair queuing over the shares:
-- the share's next turn, but no earlier than the park's lowest turn now (the one being
-- served), and the share's next turn is one more. Adopts take the lowest turns first, so
-- while the target is busy every share with alerts parked gets one alert adopted per
-- round, in the order each share parked them, and a flood from one principal cannot keep
-- another's alert waiting behind it. An empty park starts the turns again.
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
  for i = 4, #ARGV, 4 do
    local replica = replica_of(ARGV[i + 1])
    if lapsed(KEYS[6], replica, now) then
      return lapsed_error(replica)
    end
  end
end
local lowest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')[2]
local serving = 0
if lowest then
  serving = tonumber(lowest)
else
  redis.call('DEL', KEYS[7])
end
for i = 4, #ARGV, 4 do
  local id, token, share = ARGV[i], ARGV[i + 1], ARGV[i + 3]
  if redis.call('ZSCORE', KEYS[1], id) and redis.call('HGET', KEYS[2], id) == token then
    redis.call('ZADD', KEYS[1], 'XX', expiry, id)
    redis.call('HSET', KEYS[2], id, ARGV[2])
    hold(KEYS[4], KEYS[5], id, replica_of(token))
    local turn = math.max(tonumber(redis.call('HGET', KEYS[7], share)) or 0, serving)
    redis.call('HSET', KEYS[7], share, turn + 1)
    redis.call('ZADD', KEYS[3], turn, id)
    parked[#parked + 1] = id
  end
end
if #parked > 0 then
  redis.call('PEXPIRE', KEYS[3], 2 * tonumber(ARGV[1]))
  redis.call('PEXPIRE', KEYS[7], 2 * tonumber(ARGV[1]))
end
return parked

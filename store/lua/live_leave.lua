-- live_leave.lua: a replica that stops hands back what it holds, as a take-over of it
-- would (wheel_claim_overdue.lua), so that the other replicas' sweepers claim all of it
-- at their next run instead of after a lease or the replica's liveness.
--
-- KEYS[1]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[2]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[3]  {p}:by        hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[4]  {p}:held      sorted set: "<replica>/<id>" of each id in by
-- KEYS[5]  {p}:live      sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- KEYS[6]  {p}:guard     sorted set: id -> until when a confirmed send of it may still be
--                        on the wire (Unix ms; wheel_confirm.lua)
-- KEYS[7]  {p}:gone      sorted set: replica -> when it held nothing any more (Unix ms)
-- ARGV[1]  the replica's id
-- ARGV[2]  the most holdings to hand back in this run
-- ARGV[3…] ids the replica keeps: their hand-offs still run (a request on the wire)
--
-- Up to ARGV[2] of the replica's holdings (held), but the kept ones, end: each in flight
-- gets owner "left:<replica>" (its claim or park can no longer confirm, give back, mark,
-- park or adopt it) and lease expiry Redis now, or its guard while a send confirmed
-- within it may still be on the wire; it leaves by and held. A parked id leaves its park
-- at the next adopt. Once the replica holds nothing it leaves live for gone, so the
-- others load its wheel's due-soon entries (live_take_gone.lua).
-- Returns {ended, left}: how many holdings this run ended, and how many the replica
-- still holds (kept, or past this run's limit).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replica = ARGV[1]
local limit = tonumber(ARGV[2])
local keep = {}
for i = 3, #ARGV do
  keep[ARGV[i]] = true
end
local ended = 0
for _, member in ipairs(holdings(KEYS[4], replica, limit + #ARGV - 2)) do
  if ended >= limit then
    break
  end
  if not keep[string.sub(member, #replica + 2)] then
    hand_over(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], member, replica, 'left:' .. replica, now)
    ended = ended + 1
  end
end
local left = redis.call('ZLEXCOUNT', KEYS[4], '[' .. replica .. '/', '(' .. replica .. '0')
if left == 0 then
  depart(KEYS[5], KEYS[7], replica, now)
end
return {ended, left}

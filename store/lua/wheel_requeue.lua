-- wheel_requeue.lua: settle generation g of an alert that a reschedule sent back to the
-- broker (wheel_reschedule.lua allocated g and returned the entry; a hop carrying
-- RD_GEN=g was published, or its publish failed). Run by the rescheduler after its
-- publish, and by the scheduler when a copy of generation g arrives first: whichever
-- runs first decides, the other learns the decision.
--
-- KEYS[1]  {p}:due           sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight      sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries       hash: id -> encoded entry
-- KEYS[4]  {p}:done:<id>     done marker of this id
-- KEYS[5]  {p}:cancel:<id>   cancel tombstone of this id
-- KEYS[6]  {p}:trace:<id>    the alert's trace (trace_hop.lua lists its fields)
-- KEYS[7]  {p}:resched:<id>  reschedule record: the due time, Unix ms, of every later
--                            arrival of the alert
-- KEYS[8]  {p}:gen:<id>      generation record, hash: live (the generation of the one
--                            copy that may be delivered; absent: 0), decided (every
--                            generation up to it is settled), next (the last allocated)
-- KEYS[9]  {p}:tries         hash: id -> hand-offs given back so far
-- KEYS[10] {p}:failed        hash: id -> the failure of its send
-- KEYS[11] {p}:parts         hash: id -> leading parts of a split alert delivered so far
-- ARGV[1]  id
-- ARGV[2]  g
-- ARGV[3]  generation g's due time, Unix ms
-- ARGV[4]  "commit" (g's copy is in the broker) or "refuse" (its publish failed)
-- KEYS[12] {p}:pending       sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[13] {p}:pending-by    hash: target -> how many of pending are its
-- ARGV[5]  the records' lifetime, ms (a cancel tombstone's)
-- ARGV[6]  who settles it ("" for a copy that arrived first and settles itself); the move
--          is recorded as by whoever asked for the reschedule that allocated g (the
--          generation record's by:<g>, wheel_reschedule.lua), else by ARGV[6]
--
-- A commit (1) is the move: on the alert's record (note_move, lib_move.lua), and in
-- pending at the new due time.
--
-- Returns {code, ms}: ms is g's due time for 1, else 0.
--         1 moved (g is the live generation: the entry that waited is gone, the copy of
--           generation g in the broker is the alert, due at ARGV[3]; every other copy is
--           stale and dropped on arrival),
--         2 too late (the alert was in flight, partly sent, settled by another
--           generation meanwhile, or is neither waiting nor hopping by its trace: g is
--           refused, its copy is dropped on arrival),
--         3 already delivered, 4 cancelled, 5 recorded, 7 withheld (g is refused),
--         8 refused (ARGV[4] was "refuse", and g was not decided before: nothing changed).
-- A generation already decided is answered as decided: 1 if it is the live one, else 2.
local id = ARGV[1]
local g = tonumber(ARGV[2])
local gens = redis.call('HMGET', KEYS[8], 'live', 'decided')
if g <= tonumber(gens[2] or '0') then
  if g == tonumber(gens[1] or '0') then
    return {1, tonumber(redis.call('GET', KEYS[7]) or ARGV[3])}
  end
  return {2, 0}
end
redis.call('HSET', KEYS[8], 'decided', ARGV[2])
redis.call('PEXPIRE', KEYS[8], ARGV[5])
if ARGV[4] == 'refuse' then
  return {8, 0}
end
if redis.call('ZSCORE', KEYS[2], id) or redis.call('HEXISTS', KEYS[11], id) == 1 then
  return {2, 0}
end
local from = redis.call('ZSCORE', KEYS[1], id) or redis.call('HGET', KEYS[6], 'due')
local waiting = redis.call('ZREM', KEYS[1], id) == 1
if waiting then
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[9], id)
  redis.call('HDEL', KEYS[10], id)
else
  local marker = redis.call('GET', KEYS[4])
  if marker then
    return {done_code(marker), 0}
  end
  if redis.call('EXISTS', KEYS[5]) == 1 then
    return {4, 0}
  end
  -- Not in Redis: the live copy is hopping, as its trace says, and becomes stale. With
  -- no trace that says so, the alert may be long delivered, its done marker gone
  -- (doneTTL is shorter than a move can reach): g is refused rather than sent again.
  if redis.call('HGET', KEYS[6], 'st') ~= 'hopping' then
    return {2, 0}
  end
end
redis.call('HSET', KEYS[8], 'live', ARGV[2])
redis.call('SET', KEYS[7], ARGV[3], 'PX', ARGV[5])
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if from then
  -- The move is the one who asked for the reschedule that allocated g (by:<g>), whoever
  -- settles it: often the copy itself, arriving first.
  local who = redis.call('HGET', KEYS[8], 'by:' .. ARGV[2]) or ARGV[6]
  note_move(KEYS[6], string.format('%d', tonumber(from)), ARGV[3], tonumber(now), who)
end
if waiting or redis.call('EXISTS', KEYS[6]) == 1 then
  redis.call('HSET', KEYS[6], 'st', 'hopping', 'due', ARGV[3], 'carried', ARGV[3], 'hop', now, 'next', now)
  redis.call('PEXPIRE', KEYS[6], ARGV[5])
  pending_note(KEYS[12], KEYS[13], id, ARGV[3], redis.call('HGET', KEYS[6], 'tgt'))
end
return {1, tonumber(ARGV[3])}

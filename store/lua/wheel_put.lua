-- wheel_put.lua: store one entry of the wheel stage, atomically and idempotently.
--
-- KEYS[1]  {p}:due          sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight     sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries      hash: id -> encoded entry
-- KEYS[4]  {p}:done:<id>    done marker of this id
-- KEYS[5]  {p}:cancel:<id>  cancel tombstone of this id
-- KEYS[6]  {p}:trace:<id>   the alert's trace for operators (trace_hop.lua lists its fields)
-- KEYS[7]  {p}:resched:<id> reschedule record (wheel_reschedule.lua): the due time, Unix
--                           ms, every arrival of the alert must carry
-- KEYS[8]  {p}:gen:<id>     generation record (wheel_requeue.lua): live, decided, next
-- KEYS[9]  {p}:pending      sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[10] {p}:pending-by   hash: target -> how many of pending are its
-- ARGV[1]  id
-- ARGV[2]  due time, Unix ms
-- ARGV[3]  encoded entry
-- ARGV[4]  target
-- ARGV[5]  broker hops taken
-- ARGV[6]  the trace's lifetime, ms
-- ARGV[7]  the arriving copy's generation (RD_GEN; 0 when absent)
-- ARGV[8]  priority;  ARGV[9]  principal (for the trace: pri, who)
--
-- A stored entry's trace says st=waiting (and acc, the first time rocketdelay saw the
-- alert, if no hop wrote it before), and the alert is listed in pending at its due time.
-- A delivered or cancelled id is unlisted (a hop's note may have listed it).
-- Returns 1 stored (entry written, id added to due),
--         2 duplicate (the id is already waiting or in flight: nothing changed),
--         3 done (the id was delivered already: nothing changed),
--         4 cancelled (the id has a cancel tombstone: nothing stored, tombstone kept),
--         5 moved (the id has a reschedule record naming another due time than ARGV[2]:
--           nothing stored; the caller routes the alert by the record's due time),
--         6 stale (the copy's generation is not the live one, and was decided: a
--           reschedule sent the alert back to the broker as another copy, or refused
--           this one; or it was never allocated; nothing stored),
--         7 undecided (the copy's generation is above every decided one and was
--           allocated: its requeue was not settled yet; nothing stored: the caller
--           settles it, wheel_requeue.lua, and puts again).
local id = ARGV[1]
local gens = redis.call('HMGET', KEYS[8], 'live', 'decided', 'next')
local gen = tonumber(ARGV[7])
if gen ~= tonumber(gens[1] or '0') then
  -- A generation no reschedule allocated is no copy of the service's (RD_GEN set by a
  -- producer, never by rocketdelay's own): stale, it cannot displace the alert.
  if gen > tonumber(gens[2] or '0') and gen <= tonumber(gens[3] or '0') then
    return 7
  end
  return 6
end
if redis.call('HEXISTS', KEYS[3], id) == 1
    or redis.call('ZSCORE', KEYS[1], id)
    or redis.call('ZSCORE', KEYS[2], id) then
  return 2
end
if redis.call('EXISTS', KEYS[4]) == 1 then
  pending_drop(KEYS[9], KEYS[10], id, ARGV[4])
  return 3
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  pending_drop(KEYS[9], KEYS[10], id, ARGV[4])
  return 4
end
local moved = redis.call('GET', KEYS[7])
if moved and moved ~= ARGV[2] then
  return 5
end
redis.call('HSET', KEYS[3], id, ARGV[3])
redis.call('ZADD', KEYS[1], ARGV[2], id)
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
redis.call('HSETNX', KEYS[6], 'acc', now)
redis.call('HSET', KEYS[6], 'st', 'waiting', 'put', now, 'due', ARGV[2], 'tgt', ARGV[4], 'hops', ARGV[5],
  'pri', ARGV[8], 'who', ARGV[9])
redis.call('PEXPIRE', KEYS[6], ARGV[6])
pending_note(KEYS[9], KEYS[10], id, ARGV[2], ARGV[4])
return 1

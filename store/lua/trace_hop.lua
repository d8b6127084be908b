-- trace_hop.lua: note, for operators, that an alert took a broker hop (one write per
-- hop; the hop itself never waits for Redis).
--
-- KEYS[1]  {p}:trace:<id>  hash, the alert's trace:
--            acc    first time rocketdelay saw the alert, Unix ms (Redis clock)
--            st     hopping, waiting (wheel_put.lua), delivered or recorded
--                   (wheel_release.lua)
--            due    due time, Unix ms (the reschedule record's, if it has one)
--            carried  the due time the hopping message carries, Unix ms
--            tgt    target;  hops  broker hops taken
--            hop    the last hop's time;  next  when that hop is expected back, Unix ms
--            put    when the alert entered the wheel stage
--            at     when its hand-off ended;  late  ms after the due time
--            robot, merged, parts, by   how it was delivered, by which replica
--            pri    its priority ("" normal);  who  the principal that published it, as
--                   its signature proves ("" when none)
--            om     the offset message id of its last hop's message
-- KEYS[2]  {p}:resched:<id>  reschedule record (wheel_reschedule.lua): the due time that
--                            overrides the message's
-- KEYS[3]  {p}:cancel:<id>   cancel tombstone of this id
-- KEYS[4]  {p}:pending       sorted set: id -> due time (Unix ms) of every alert accepted
--                            and not yet handed off or cancelled (pending.go)
-- KEYS[5]  {p}:pending-by    hash: target -> how many of pending are its
-- ARGV[1]  the due time the message carries, Unix ms
-- ARGV[2]  target
-- ARGV[3]  hops taken, this one included
-- ARGV[4]  the hop's delay, ms
-- ARGV[5]  the trace's lifetime, ms
-- KEYS[6]  {p}:gen:<id>      generation record (wheel_requeue.lua lists its fields)
-- ARGV[6]  priority;  ARGV[7]  principal;  ARGV[8]  id
-- ARGV[9]  the offset message id of the hop's message ("" when unknown), kept as om: a
--          reschedule earlier reads the alert back by it (wheel_reschedule.lua)
-- ARGV[10] the copy's generation (RD_GEN; 0 when absent)
--
-- A trace whose alert is done (delivered, recorded or withheld: a late copy still
-- hopping) is left alone, and so is it by a copy that is not the live one (its
-- generation is not the live generation: a reschedule made another copy the alert, or
-- has not settled this one yet, or never made it) or by a message of another principal
-- with the same id (its proven principal is not the trace's: its hop is not this
-- alert's, and its message must never be read back as this alert's). The alert is
-- listed in pending (pending_note in lib_pending.lua) unless it has a cancel tombstone.
-- Returns 1 when written.
local was = redis.call('HMGET', KEYS[1], 'st', 'who')
local st, who = was[1], was[2]
if st == 'delivered' or st == 'recorded' or st == 'withheld' then
  return 0
end
if tonumber(ARGV[10]) ~= tonumber(redis.call('HGET', KEYS[6], 'live') or '0') then
  return 0
end
if who and who ~= ARGV[7] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSETNX', KEYS[1], 'acc', string.format('%d', now))
local due = redis.call('GET', KEYS[2]) or ARGV[1]
redis.call('HSET', KEYS[1], 'st', 'hopping', 'due', due, 'carried', ARGV[1],
  'tgt', ARGV[2], 'hops', ARGV[3],
  'hop', string.format('%d', now), 'next', string.format('%d', now + tonumber(ARGV[4])),
  'pri', ARGV[6], 'who', ARGV[7], 'om', ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
if redis.call('EXISTS', KEYS[3]) == 0 then
  pending_note(KEYS[4], KEYS[5], ARGV[8], due, ARGV[2])
end
return 1

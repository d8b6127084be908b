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
-- KEYS[2]  {p}:resched:<id>  reschedule record (wheel_reschedule.lua): the due time that
--                            overrides the message's
-- ARGV[1]  the due time the message carries, Unix ms
-- ARGV[2]  target
-- ARGV[3]  hops taken, this one included
-- ARGV[4]  the hop's delay, ms
-- ARGV[5]  the trace's lifetime, ms
--
-- A trace whose alert is done (delivered or recorded: a late copy still hopping) is left
-- alone. Returns 1 when written.
local st = redis.call('HGET', KEYS[1], 'st')
if st == 'delivered' or st == 'recorded' then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSETNX', KEYS[1], 'acc', string.format('%d', now))
redis.call('HSET', KEYS[1], 'st', 'hopping', 'due', redis.call('GET', KEYS[2]) or ARGV[1], 'carried', ARGV[1],
  'tgt', ARGV[2], 'hops', ARGV[3],
  'hop', string.format('%d', now), 'next', string.format('%d', now + tonumber(ARGV[4])))
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1

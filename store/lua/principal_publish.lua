-- principal_publish.lua: what a principal's publish asks of Redis, in one round trip:
-- one request of its rate (take_rate, lib_rate.lua), then the ownership of the alert id
-- it publishes (the first principal to use an id owns it; its own record is kept at
-- least the TTL from now). A request over the rate records nothing.
--
-- KEYS[1]  {p}:rate:principal:<n>   string: the principal's rate (lib_rate.lua)
-- KEYS[2]  {p}:principal:alert:<id> string: the id's owner
-- KEYS[3]  {p}:trace:<id>           the alert's trace, when it is in this slot (a wheel
--                                   stage of one shard): an id without an owner record
--                                   whose trace names another (its who: a principal, ""
--                                   for an alert published to the topic directly) is not
--                                   taken. Absent: the caller read the trace itself (in
--                                   another slot, several shards) and says in ARGV[5].
-- ARGV[1]  rate, requests per second; 0: none
-- ARGV[2]  burst, requests that may come at once
-- ARGV[3]  the principal's name
-- ARGV[4]  how long the owner is kept, ms
-- ARGV[5]  without KEYS[3]: the principal the trace names when it names another ("" for
--          an alert published to the topic directly), absent when it names none or the
--          principal
--
-- Returns {0, wait}: over the rate, wait µs until a request may go; {1, owner}: the id's
-- owner (ARGV[3] when it is now, or already was, the principal's); {2, who}: the id has
-- no owner record but the wheel stage holds it as who's.
local rate = tonumber(ARGV[1])
if rate > 0 then
  local took = take_rate(KEYS[1], 1, rate, tonumber(ARGV[2]))
  if took[1] == 0 then
    return {0, took[2]}
  end
end
local prev = redis.call('GET', KEYS[2])
if not prev then
  if KEYS[3] then
    local tr = redis.call('HMGET', KEYS[3], 'st', 'who')
    if tr[1] and (tr[2] or '') ~= ARGV[3] then
      return {2, tr[2] or ''}
    end
  elseif ARGV[5] then
    return {2, ARGV[5]}
  end
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
  return {1, ARGV[3]}
end
if prev == ARGV[3] and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[4]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
end
return {1, prev}

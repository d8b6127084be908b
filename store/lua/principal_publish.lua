-- principal_publish.lua: what a principal's publish of an unscoped alert id asks of Redis,
-- in one round trip: a lease of its rate (take_rate, lib_rate.lua; none when its replica
-- holds a request of it already), then the ownership of the id (the first principal to
-- use an id owns it; its own record is kept at least the TTL from now). A publish over
-- the rate records nothing. A scoped id (@<principal>:<name>) is its principal's by its
-- name and never comes here.
--
-- KEYS[1]  {p}:rate:principal:<n>   string: the principal's rate (lib_rate.lua)
-- KEYS[2]  {p}:principal:alert:<id> string: the id's owner
-- KEYS[3]  {p}:trace:<id>           the alert's trace, when it is in this slot (a wheel
--                                   stage of one shard): an id without an owner record
--                                   whose trace names another (its who: a principal, ""
--                                   for an alert published to the topic directly) is not
--                                   taken. Absent: the caller read the trace itself (in
--                                   another slot, several shards) and says in ARGV[6].
-- ARGV[1]  rate, requests per second; 0: none taken
-- ARGV[2]  burst, requests that may come at once
-- ARGV[3]  requests of the rate wanted (a lease), at least 1
-- ARGV[4]  the principal's name
-- ARGV[5]  how long the owner is kept, ms
-- ARGV[6]  without KEYS[3]: the principal the trace names when it names another ("" for
--          an alert published to the topic directly), absent when it names none or the
--          principal
--
-- Returns {0, wait}: over the rate, wait µs until a request may go; {granted, 1, owner}:
-- granted requests of the rate (0 when none was taken), and the id's owner (ARGV[4] when
-- it is now, or already was, the principal's); {granted, 2, who}: the id has no owner
-- record but the wheel stage holds it as who's.
local granted = 0
local rate = tonumber(ARGV[1])
if rate > 0 then
  local took = take_rate(KEYS[1], tonumber(ARGV[3]), rate, tonumber(ARGV[2]))
  if took[1] == 0 then
    return {0, took[2]}
  end
  granted = took[1]
end
local prev = redis.call('GET', KEYS[2])
if not prev then
  if KEYS[3] then
    local tr = redis.call('HMGET', KEYS[3], 'st', 'who')
    if tr[1] and (tr[2] or '') ~= ARGV[4] then
      return {granted, 2, tr[2] or ''}
    end
  elseif ARGV[6] then
    return {granted, 2, ARGV[6]}
  end
  redis.call('SET', KEYS[2], ARGV[4], 'PX', ARGV[5])
  return {granted, 1, ARGV[4]}
end
if prev == ARGV[4] and redis.call('PTTL', KEYS[2]) < tonumber(ARGV[5]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[5])
end
return {granted, 1, prev}

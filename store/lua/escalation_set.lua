-- escalation_set.lua: write the record of an Alertmanager group's delayed escalation,
-- only if nobody wrote another version since the caller read it (two notifications of
-- one group at once, from two Alertmanagers or two replicas, write one record).
--
-- KEYS[1]  {p}:esc:<group>   hash: v (the record's version), rec (the record, JSON)
-- ARGV[1]  the version the caller read (0: there was no record)
-- ARGV[2]  the new version
-- ARGV[3]  the new record
-- ARGV[4]  how long the record lives, ms
--
-- Returns 1 when written, 0 when the record's version is no longer ARGV[1].
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
if v ~= tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'v', ARGV[2], 'rec', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1

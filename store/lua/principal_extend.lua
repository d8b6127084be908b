-- principal_extend.lua: keep an id's owner record, whoever's it is, at least a TTL from
-- now (an alert moved later is its owner's as long as it waits); create none.
--
-- KEYS[1]  {p}:principal:<kind>:<id>  string: the owner
-- ARGV[1]  how long it is kept at least, ms
--
-- Returns the owner, "" when the id has none.
local owner = redis.call('GET', KEYS[1])
if not owner then
  return ''
end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
end
return owner

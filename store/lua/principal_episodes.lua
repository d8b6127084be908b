-- principal_episodes.lua: a principal opens an escalation episode, within its cap.
--
-- KEYS[1]  {p}:principal:eps:<name>  set of the episode keys it opened
-- KEYS[2]  {p}:ep-live               sorted set: key -> started, the episodes not ended
-- ARGV[1]  the episode key
-- ARGV[2]  the most it may have open at once
--
-- Forgets the keys whose episodes ended. Returns {1, open} when the key is one of its open
-- episodes already or it may open it (then it is recorded), {0, open} when it has ARGV[2]
-- open; open counts them, the new one included.
local open = 0
local mine = false
for _, k in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('ZSCORE', KEYS[2], k) then
    open = open + 1
    if k == ARGV[1] then
      mine = true
    end
  else
    redis.call('SREM', KEYS[1], k)
  end
end
if mine then
  return {1, open}
end
if open >= tonumber(ARGV[2]) then
  return {0, open}
end
redis.call('SADD', KEYS[1], ARGV[1])
return {1, open + 1}

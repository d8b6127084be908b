-- layout_ack.lua: a replica says the layout it acts in (store/moving.go, AckLayout), and
-- reads the record, atomically with AdvanceLayout's check.
--
-- KEYS[1]  {p}:shards       the layout
-- KEYS[2]  {p}:shards-acks  hash: replica -> "<layout>|<Unix ms>"
-- KEYS[3]  {p}:fence        the count a move away from reached phase 2 (AdvanceLayout)
-- ARGV[1]  the replica
-- ARGV[2]  the layout it acts in
--
-- A record that is gone (the database flushed, a failover to an empty primary) is
-- written again as this replica's layout. Returns {the record's layout, the fence}.
-- Replicas ack again every liveness period: an ack an hour old is a replica's that is
-- gone, and is forgotten.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. '|' .. string.format('%d', now))
local acks = redis.call('HGETALL', KEYS[2])
for i = 1, #acks, 2 do
  local at = tonumber(string.match(acks[i + 1], '|(%d+)$') or '')
  if not at or at < now - 3600000 then
    redis.call('HDEL', KEYS[2], acks[i])
  end
end
redis.call('SET', KEYS[1], ARGV[2], 'NX')
return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[3]) or ''}

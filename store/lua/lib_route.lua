-- lib_route.lua: where an id's records are while the wheel stage moves from one shard
-- count to another (online resharding, store/moving.go). A script of an id run on the
-- id's shard of the old count, with a guard, first asks route_elsewhere: true means the
-- id lives in its shard of the new count, and the caller runs the script there instead.
--
-- fwd    {p}:fwd:<id> of the old shard: set once the id moved to the new count's shard
-- phase  "1": ids stay where their records are, new ones in the old count's shard;
--        "2": an id with no record in the old shard moves (fwd is set);
--        "0:<n>": the stage is settled at n shards, and this is the id's shard: the
--        script runs here, unless a move from n reached phase 2 ({p}:fence holds n):
--        then it fails with RDLAYOUT (a replica that looks at the old count alone must
--        not act once ids move; it starts again and follows the move)
-- ttl    how long fwd lives, ms: longer than any record of the id
--
-- An id's records in a shard are its entry, its done marker, its cancel tombstone, its
-- reschedule and generation records, and its place among the pending alerts. Once fwd is
-- set no script of the id runs on the old shard again, so the id's records are only ever
-- in one of its two shards.
local function route(fwd, phase, ttl)
  local at = string.find(fwd, '}:fwd:', 1, true)
  local tag, id = string.sub(fwd, 1, at + 1), string.sub(fwd, at + 6)
  if string.sub(phase, 1, 2) == '0:' then
    if redis.call('GET', tag .. 'fence') == string.sub(phase, 3) then
      return 'fenced'
    end
    return 'here'
  end
  if redis.call('EXISTS', fwd) == 1 then
    return 'moved'
  end
  if phase ~= '2' then
    return 'here'
  end
  if redis.call('HEXISTS', tag .. 'entries', id) == 1
      or redis.call('EXISTS', tag .. 'done:' .. id, tag .. 'cancel:' .. id, tag .. 'resched:' .. id, tag .. 'gen:' .. id) > 0
      or redis.call('ZSCORE', tag .. 'pending', id) then
    return 'here'
  end
  redis.call('SET', fwd, '1', 'PX', ttl)
  return 'moved'
end

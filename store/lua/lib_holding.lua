-- lib_holding.lua: functions that the wheel-stage scripts changing who holds an id start
-- with (store/embed.go puts this file before them); on its own it does nothing. They keep
-- two indexes in step with {p}:owner, so that one replica's holdings are found without
-- reading anyone else's:
--   {p}:by    hash: id -> the replica responsible for it (its claimer; for a parked id,
--             the replica that parked it)
--   {p}:held  sorted set, every score 0: "<replica>/<id>" of each id in by, so that
--             ZRANGEBYLEX held [<replica>/ (<replica>0 lists one replica's holdings
-- and tell whether a replica is live by {p}:live (live_beat.lua).

-- replica_of returns the replica of a claim token: the part before its first "/" (a
-- token without one is its own replica).
local function replica_of(token)
  return string.match(token, '^[^/]*')
end

-- hold makes replica the one responsible for id.
local function hold(by, held, id, replica)
  local was = redis.call('HGET', by, id)
  if was == replica then
    return
  end
  if was then
    redis.call('ZREM', held, was .. '/' .. id)
  end
  redis.call('HSET', by, id, replica)
  redis.call('ZADD', held, 0, replica .. '/' .. id)
end

-- unhold forgets who is responsible for id.
local function unhold(by, held, id)
  local was = redis.call('HGET', by, id)
  if was then
    redis.call('ZREM', held, was .. '/' .. id)
    redis.call('HDEL', by, id)
  end
end

-- lapsed reports whether replica's liveness ran out before now (Unix ms), or it never beat.
local function lapsed(live, replica, now)
  local till = redis.call('ZSCORE', live, replica)
  return not till or tonumber(till) < now
end

-- lapsed_error is the reply of a script that refuses a lapsed replica; the store reads its
-- LAPSED prefix as ErrLapsed.
local function lapsed_error(replica)
  return redis.error_reply('LAPSED replica ' .. replica .. ' is not live')
end


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

-- hand_over ends the holding member ("<replica>/<id>") of replica, which lapsed or left:
-- an id in flight gets owner label, so that none of the replica's claims can confirm,
-- give back, mark or park it any more, and lease expiry now, or its guard (an id -> until
-- when, Unix ms) when a send confirmed within it may still be on the wire, so that the
-- sweeper of any replica claims it then; the id leaves by and held. A parked id leaves
-- its park at the next adopt (wheel_adopt.lua drops ids the park no longer owns).
local function hand_over(inflight, owner, by, held, guard, member, replica, label, now)
  local id = string.sub(member, #replica + 2)
  if redis.call('ZSCORE', inflight, id) then
    local at = now
    local guarded = tonumber(redis.call('ZSCORE', guard, id) or '')
    if guarded and guarded > now then
      at = guarded
    end
    redis.call('ZADD', inflight, 'XX', string.format('%d', at), id)
    redis.call('HSET', owner, id, label)
  end
  redis.call('HDEL', by, id)
  redis.call('ZREM', held, member)
end

-- holdings returns up to limit members of replica's holdings in held.
local function holdings(held, replica, limit)
  return redis.call('ZRANGEBYLEX', held, '[' .. replica .. '/', '(' .. replica .. '0', 'LIMIT', 0, limit)
end

-- depart records that replica holds nothing any more: it leaves live for gone, where
-- the other replicas learn that its wheel's entries have nobody to fire them
-- (Liveness.TakeGone).
local function depart(live, gone, replica, now)
  redis.call('ZREM', live, replica)
  redis.call('ZADD', gone, string.format('%d', now), replica)
end

-- lib_pending.lua: functions of the scripts that keep the index of pending alerts
-- (pending.go); prepended to them (store/embed.go, scriptWith).
--
-- pending   {p}:pending     sorted set: id -> due time (Unix ms) of every alert accepted
--                           and not yet handed off or cancelled
-- by        {p}:pending-by  hash: target -> how many ids of pending are its

-- pending_note lists id at due (or moves it there), counting it for target when it is
-- new to the index; with no target (false: its trace is gone) it only moves a listed id.
local function pending_note(pending, by, id, due, target)
  if not target then
    redis.call('ZADD', pending, 'XX', due, id)
    return
  end
  if redis.call('ZADD', pending, due, id) == 1 then
    redis.call('HINCRBY', by, target, 1)
  end
end

-- pending_drop unlists id, no longer counting it for target (false: not known).
local function pending_drop(pending, by, id, target)
  if redis.call('ZREM', pending, id) == 1 and target then
    if redis.call('HINCRBY', by, target, -1) <= 0 then
      redis.call('HDEL', by, target)
    end
  end
end

-- lib_move.lua: the record of an alert's moves in its trace (wheel_reschedule.lua, and
-- wheel_requeue.lua for a move that sent the alert back to the broker); prepended to
-- them (store/embed.go, scriptWith). The trace keeps the due time the alert was first
-- accepted with (due0, set by the first move), counts the moves (moves), and notes each
-- of the first maxMoves as move:<n> = "<when> <from> <to> <who>" (Unix ms, Redis clock).
local maxMoves = 20

-- note_move records in the trace, if there is one, that the alert moved from the due
-- time from to to at now, by who ("" when unknown).
local function note_move(trace, from, to, now, who)
  if redis.call('EXISTS', trace) == 0 then
    return
  end
  redis.call('HSETNX', trace, 'due0', from)
  local n = redis.call('HINCRBY', trace, 'moves', 1)
  if n <= maxMoves then
    redis.call('HSET', trace, 'move:' .. n, string.format('%d', now) .. ' ' .. from .. ' ' .. to .. ' ' .. who)
  end
end

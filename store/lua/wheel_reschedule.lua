-- wheel_reschedule.lua: move one alert that is not sent yet to a new due time, keeping
-- its id, atomically against its claim (wheel_claim.lua, wheel_claim_overdue.lua).
--
-- KEYS[1]  {p}:due           sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight      sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries       hash: id -> encoded entry
-- KEYS[4]  {p}:done:<id>     done marker of this id
-- KEYS[5]  {p}:cancel:<id>   cancel tombstone of this id
-- KEYS[6]  {p}:trace:<id>    the alert's trace (trace_hop.lua lists its fields)
-- KEYS[7]  {p}:resched:<id>  reschedule record: the due time, Unix ms, that overrides the
--                            RD_DELIVER_AT_MS of the alert when it reaches the wheel
--                            stage (wheel_put.lua)
-- KEYS[8]  {p}:gen:<id>      generation record (wheel_requeue.lua lists its fields)
-- KEYS[9]  {p}:parts         hash: id -> leading parts of a split alert delivered so far
-- KEYS[10] {p}:pending       sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[11] {p}:pending-by    hash: target -> how many of pending are its
-- ARGV[1]  id
-- ARGV[2]  new due time, Unix ms; a time before Redis now means now
-- ARGV[3]  reach, ms: a waiting entry moves only to a due time less than this from now
--          (the hop threshold: farther than that, the alert belongs to the broker)
-- ARGV[4]  the records' lifetime, ms (a cancel tombstone's)
-- ARGV[5]  the Pub/Sub channel of moves: a move of a waiting entry is published there as
--          "<id> <new due, Unix ms>", for the replica whose wheel holds its timer
-- ARGV[6]  who moved it ("" when unknown), for the trace; a generation allocated for a
--          copy (8, 11) keeps it in the generation record as by:<g>, for the move its
--          settle records whoever settles it (wheel_requeue.lua)
--
-- A move (1 and 6) moves the alert in pending too (8 and 11 once their copy is settled:
-- wheel_requeue.lua). A move is on the alert's record (note_move, lib_move.lua). A move
-- (1 and 6) overrules an earlier one's generation not settled yet (overrule).
--
-- Returns {code, ms}: ms is the effective due time for 1, 6 and 8, the due time the
-- hopping message carries for 9 and 11, else 0; for 8 also the allocated generation and
-- the encoded entry; for 11 also the allocated generation, the offset message id of the
-- alert's last hop, and the effective due time.
--         1 moved (was waiting in due: its score and the due time inside its entry are
--           the new due time; a record, if any, too),
--         2 too late (in flight: claimed or parked; nothing changed),
--         3 already delivered (done marker),
--         4 cancelled (tombstone),
--         5 recorded (the done marker says its failure is in failed_sends: its row
--           decides; nothing changed),
--         6 hop moved (not in Redis, the trace says hopping, and the new due time is not
--           before the one its message carries: the record now names the new due time,
--           and the wheel stage's Put routes the alert by it when it arrives there),
--         7 withheld (done marker "withheld:"),
--         8 too far (waiting, and the new due time is beyond the reach: the alert goes
--           back to the broker. A generation g is allocated, {8, due, g, entry}; the
--           caller publishes a hop of the entry carrying RD_GEN=g and settles g with
--           wheel_requeue.lua. Until then nothing else changed; a split alert partly
--           sent is too late instead),
--         9 in hop (hopping, the new due time is before the one its message carries,
--           and the trace names no message to read back (its hop was noted by a release
--           before this one): the hops lead there, and an arrival reads no record on the
--           way (a hop never waits for Redis), so it could only be met late; nothing
--           changed),
--        10 unknown (no trace, nothing in Redis),
--        11 recall (hopping, the new due time is before the one its message carries, and
--           the trace names its last hop's message (om, trace_hop.lua): the alert's body
--           and properties are in the broker only, so the caller reads that message back,
--           publishes a copy of it carrying RD_GEN=g at the new due time, and settles g
--           with wheel_requeue.lua, as for 8. Until then nothing else changed).
local id = ARGV[1]

-- overrule makes the move made now the last one accepted: a generation allocated by an
-- earlier move and not settled yet (its copy on its way, 8 or 11) is decided refused,
-- so its settle answers too late and its copy is dropped on arrival, where it would
-- have undone this move; and the generation record is kept as long as the reschedule
-- record, so a copy that hops on past the record's first lifetime is still its alert's.
local function overrule()
  local gens = redis.call('HMGET', KEYS[8], 'next', 'decided')
  local nxt = tonumber(gens[1] or '0')
  if nxt > tonumber(gens[2] or '0') then
    redis.call('HSET', KEYS[8], 'decided', string.format('%d', nxt))
  end
  if redis.call('EXISTS', KEYS[8]) == 1 then
    redis.call('PEXPIRE', KEYS[8], ARGV[4])
  end
end

if redis.call('ZSCORE', KEYS[2], id) then
  return {2, 0}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local due = math.max(tonumber(ARGV[2]), now)
local dues = string.format('%d', due)
if redis.call('ZSCORE', KEYS[1], id) then
  local rec = redis.call('HGET', KEYS[3], id)
  if due - now >= tonumber(ARGV[3]) then
    if redis.call('HEXISTS', KEYS[9], id) == 1 then
      return {2, 0}
    end
    local gens = redis.call('HMGET', KEYS[8], 'next', 'decided')
    local g = math.max(tonumber(gens[1] or '0'), tonumber(gens[2] or '0')) + 1
    redis.call('HSET', KEYS[8], 'next', string.format('%d', g), 'by:' .. g, ARGV[6])
    redis.call('PEXPIRE', KEYS[8], ARGV[4])
    return {8, due, g, rec or ''}
  end
  overrule()
  if rec then
    -- The record (store/wheelstage.go, encodeWheelEntry) is a version byte, then the due
    -- time as a zigzag varint (2*ms for ms >= 0), then the rest: swap the varint.
    local i = 2
    while string.byte(rec, i) >= 128 do
      i = i + 1
    end
    local v, out = 2 * due, {}
    while v >= 128 do
      out[#out + 1] = string.char(v % 128 + 128)
      v = math.floor(v / 128)
    end
    out[#out + 1] = string.char(v)
    redis.call('HSET', KEYS[3], id, string.sub(rec, 1, 1) .. table.concat(out) .. string.sub(rec, i + 1))
  end
  local from = redis.call('ZSCORE', KEYS[1], id)
  redis.call('ZADD', KEYS[1], dues, id)
  if redis.call('EXISTS', KEYS[7]) == 1 then
    redis.call('SET', KEYS[7], dues, 'KEEPTTL')
  end
  note_move(KEYS[6], string.format('%d', tonumber(from)), dues, now, ARGV[6])
  if redis.call('EXISTS', KEYS[6]) == 1 then
    redis.call('HSET', KEYS[6], 'due', dues)
    pending_note(KEYS[10], KEYS[11], id, dues, redis.call('HGET', KEYS[6], 'tgt'))
  end
  redis.call('PUBLISH', ARGV[5], id .. ' ' .. dues)
  return {1, due}
end
local marker = redis.call('GET', KEYS[4])
if marker then
  return {done_code(marker), 0}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {4, 0}
end
if redis.call('HGET', KEYS[6], 'st') ~= 'hopping' then
  return {10, 0}
end
local carried = tonumber(redis.call('HGET', KEYS[6], 'carried') or redis.call('HGET', KEYS[6], 'due') or '0')
if due < carried then
  local om = redis.call('HGET', KEYS[6], 'om')
  if not om or om == '' then
    return {9, carried}
  end
  local gens = redis.call('HMGET', KEYS[8], 'next', 'decided')
  local g = math.max(tonumber(gens[1] or '0'), tonumber(gens[2] or '0')) + 1
  redis.call('HSET', KEYS[8], 'next', string.format('%d', g), 'by:' .. g, ARGV[6])
  redis.call('PEXPIRE', KEYS[8], ARGV[4])
  return {11, carried, g, om, due}
end
overrule()
redis.call('SET', KEYS[7], dues, 'PX', ARGV[4])
note_move(KEYS[6], redis.call('HGET', KEYS[6], 'due') or string.format('%d', carried), dues, now, ARGV[6])
redis.call('HSET', KEYS[6], 'due', dues)
pending_note(KEYS[10], KEYS[11], id, dues, redis.call('HGET', KEYS[6], 'tgt'))
return {6, due}

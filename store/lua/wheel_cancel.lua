-- wheel_cancel.lua: cancel one alert, wherever it is.
--
-- KEYS[1]  {p}:due          sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight     sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries      hash: id -> encoded entry
-- KEYS[4]  {p}:done:<id>    done marker of this id
-- KEYS[5]  {p}:cancel:<id>  cancel tombstone of this id
-- KEYS[6]  {p}:tries        hash: id -> hand-offs given back so far
-- KEYS[7]  {p}:failed       hash: id -> the failure of its send
-- KEYS[8]  {p}:parts        hash: id -> leading parts of a split alert delivered so far
-- KEYS[9]  {p}:trace:<id>   the alert's trace (its target: tgt)
-- KEYS[10] {p}:pending      sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[11] {p}:pending-by   hash: target -> how many of pending are its
-- ARGV[1]  id
-- ARGV[2]  tombstone lifetime, ms
--
-- Returns 1 removed (was waiting in due: entry deleted, tombstone set so a redelivered
--           copy is refused by wheel_put.lua),
--         2 too late (in flight: being sent now; nothing changed),
--         3 already delivered (the done marker says delivered; nothing changed),
--         4 tombstoned (not in Redis: the alert is still hopping through the broker; the
--           tombstone makes its arrival a no-op),
--         5 recorded (the done marker says its hand-off recorded its failure in
--           failed_sends, "recorded:" (wheel_release.lua): it was not delivered, and its
--           failed_sends row decides; nothing changed),
--         7 withheld (the done marker says "withheld:": a step of an escalation episode
--           that ended before it was due; it will never be sent).
-- The tombstone's value is Redis now in Unix ms. A removed or tombstoned alert is
-- unlisted from pending.
local id = ARGV[1]
if redis.call('ZSCORE', KEYS[2], id) then
  return 2
end
local t = redis.call('TIME')
local now = string.format('%d', tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000))
if redis.call('ZREM', KEYS[1], id) == 1 then
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[6], id)
  redis.call('HDEL', KEYS[7], id)
  redis.call('HDEL', KEYS[8], id)
  redis.call('SET', KEYS[5], now, 'PX', ARGV[2])
  pending_drop(KEYS[10], KEYS[11], id, redis.call('HGET', KEYS[9], 'tgt'))
  return 1
end
local marker = redis.call('GET', KEYS[4])
if marker then
  return done_code(marker)
end
redis.call('SET', KEYS[5], now, 'PX', ARGV[2])
pending_drop(KEYS[10], KEYS[11], id, redis.call('HGET', KEYS[9], 'tgt'))
return 4

-- wheel_claim.lua: claim a batch of ids the in-process wheel fired, atomically.
--
-- KEYS[1]  {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries   hash: id -> encoded entry
-- ARGV[1]  lease, ms
-- ARGV[2…] ids to claim
--
-- Every id still in due moves to inflight with score = Redis now + lease. Ids not in due
-- (claimed elsewhere, cancelled, delivered) are skipped; an id in due without an entry (never
-- written by these scripts) is dropped from due.
-- Returns a flat array id1, entry1, id2, entry2, … of the claimed ids, in ARGV order.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local out = {}
for i = 2, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    local entry = redis.call('HGET', KEYS[3], id)
    if entry then
      redis.call('ZADD', KEYS[2], expiry, id)
      out[#out + 1] = id
      out[#out + 1] = entry
    end
  end
end
return out

-- wheel_claim.lua: claim a batch of ids the in-process wheel fired, atomically.
--
-- KEYS[1]  {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries   hash: id -> encoded entry
-- KEYS[4]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[5]  {p}:tries     hash: id -> hand-offs given back so far
-- KEYS[6]  {p}:failed    hash: id -> the failure of its send, once decided
-- ARGV[1]  lease, ms
-- ARGV[2]  token of this claim
-- ARGV[3…] ids to claim
--
-- Every id still in due moves to inflight with score = Redis now + lease, owned by the
-- token. Ids not in due (claimed elsewhere, cancelled, delivered) are skipped; an id in
-- due without an entry (never written by these scripts) is dropped from due.
-- Returns a flat array id, entry, tries, failure, … of the claimed ids, in ARGV order
-- (tries "0" and failure "" when there are none).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local out = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[1], id) == 1 then
    local entry = redis.call('HGET', KEYS[3], id)
    if entry then
      redis.call('ZADD', KEYS[2], expiry, id)
      redis.call('HSET', KEYS[4], id, ARGV[2])
      out[#out + 1] = id
      out[#out + 1] = entry
      out[#out + 1] = redis.call('HGET', KEYS[5], id) or '0'
      out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
    end
  end
end
return out

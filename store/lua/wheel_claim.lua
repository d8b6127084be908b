-- wheel_claim.lua: claim a batch of ids the in-process wheel fired, atomically.
--
-- KEYS[1]  {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries   hash: id -> encoded entry
-- KEYS[4]  {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[5]  {p}:tries     hash: id -> hand-offs given back so far
-- KEYS[6]  {p}:failed    hash: id -> the failure of its send, once decided
-- KEYS[7]  {p}:parts     hash: id -> leading parts of a split alert delivered so far
-- KEYS[8]  {p}:by        hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[9]  {p}:held      sorted set: "<replica>/<id>" of each id in by
-- KEYS[10] {p}:live      sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- ARGV[1]  lease, ms
-- ARGV[2]  token of this claim: "<replica>/<…>"
-- ARGV[3]  liveness period, ms; "0": liveness is off
-- ARGV[4…] ids to claim
--
-- Every id in due whose due time has come by Redis's clock (score <= Redis now) moves to
-- inflight with score = Redis now + lease, owned by the token. An id in due that is not
-- due yet stays where it is: no replica, whatever its own clock says, can take an entry
-- early. An id in flight that the token owns already is returned again with a renewed
-- lease, so a claim whose reply was lost (a cut connection; go-redis or the caller
-- retries it with the same token) loses nothing. Other ids (claimed elsewhere,
-- cancelled, delivered) are skipped; an id in due without an entry (never written by
-- these scripts) is dropped from due. The token's replica becomes responsible for each id
-- claimed (by, held). With liveness on, a replica that is not live claims nothing: the
-- script fails with LAPSED.
-- Returns two arrays: {id, entry, tries, failure, parts, …} of the claimed ids in ARGV
-- order (tries and parts "0", failure "" when there are none), and {id, ms until due, …}
-- of the ids not due yet.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expiry = string.format('%d', now + tonumber(ARGV[1]))
local claimed, early = {}, {}
local replica = replica_of(ARGV[2])
if ARGV[3] ~= '0' and lapsed(KEYS[10], replica, now) then
  return lapsed_error(replica)
end

local function emit(id, entry)
  claimed[#claimed + 1] = id
  claimed[#claimed + 1] = entry
  claimed[#claimed + 1] = redis.call('HGET', KEYS[5], id) or '0'
  claimed[#claimed + 1] = redis.call('HGET', KEYS[6], id) or ''
  claimed[#claimed + 1] = redis.call('HGET', KEYS[7], id) or '0'
end

for i = 4, #ARGV do
  local id = ARGV[i]
  local score = redis.call('ZSCORE', KEYS[1], id)
  if score then
    local wait = tonumber(score) - now
    if wait > 0 then
      early[#early + 1] = id
      early[#early + 1] = string.format('%d', wait)
    else
      redis.call('ZREM', KEYS[1], id)
      local entry = redis.call('HGET', KEYS[3], id)
      if entry then
        redis.call('ZADD', KEYS[2], expiry, id)
        redis.call('HSET', KEYS[4], id, ARGV[2])
        hold(KEYS[8], KEYS[9], id, replica)
        emit(id, entry)
      end
    end
  elseif redis.call('HGET', KEYS[4], id) == ARGV[2] and redis.call('ZSCORE', KEYS[2], id) then
    local entry = redis.call('HGET', KEYS[3], id)
    if entry then
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
      emit(id, entry)
    end
  end
end
return {claimed, early}

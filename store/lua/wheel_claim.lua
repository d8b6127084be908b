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
-- ARGV[4]  ahead, ms: how long before its due time an id may be claimed ("0": not before)
-- ARGV[5…] ids to claim
--
-- Every id in due whose due time comes within ahead by Redis's clock (score <= Redis now
-- + ahead) moves to inflight with score = Redis now + ahead + lease, owned by the token.
-- An id in due that is not due that soon stays where it is. The caller hands an entry
-- off no sooner than its due time by Redis's clock, which the reply gives (now): no
-- replica, whatever its own clock says, can send an entry early.
-- An id in flight that the token owns already is returned again with a renewed
-- lease, so a claim whose reply was lost (a cut connection; go-redis or the caller
-- retries it with the same token) loses nothing. Other ids (claimed elsewhere,
-- cancelled, delivered) are skipped; an id in due without an entry (never written by
-- these scripts) is dropped from due. The token's replica becomes responsible for each id
-- claimed (by, held). With liveness on, a replica that is not live claims nothing: the
-- script fails with LAPSED.
-- Returns two arrays and a time: {id, entry, tries, failure, parts, …} of the claimed ids
-- in ARGV order (tries and parts "0", failure "" when there are none), {id, ms until
-- due, …} of the ids not due within ahead, and Redis now (Unix ms) as the script read it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ahead = tonumber(ARGV[4])
local expiry = string.format('%d', now + ahead + tonumber(ARGV[1]))
local nowText = string.format('%d', now)
local claimed, early = {}, {}
local replica = replica_of(ARGV[2])
if ARGV[3] ~= '0' and lapsed(KEYS[10], replica, now) then
  return lapsed_error(replica)
end
local ids = {}
for i = 5, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return {claimed, early, nowText}
end

-- The batch goes with one variadic command per key (the caller sends at most a few
-- hundred ids per call): first where each id stands.
local scores = redis.call('ZMSCORE', KEYS[1], unpack(ids))
local due, other = {}, {} -- positions in ids: due by Redis's clock; not in due
for j, id in ipairs(ids) do
  local score = scores[j]
  if score then
    local wait = tonumber(score) - now
    if wait > ahead then
      early[#early + 1] = id
      early[#early + 1] = string.format('%d', wait)
    else
      due[#due + 1] = j
    end
  else
    other[#other + 1] = j
  end
end

local function pick(at)
  local picked = {}
  for n, j in ipairs(at) do
    picked[n] = ids[j]
  end
  return picked
end

local entry = {} -- position -> the entry of each id claimed or claimed again
local taken = {} -- ids newly claimed
if #due > 0 then
  local dueIDs = pick(due)
  redis.call('ZREM', KEYS[1], unpack(dueIDs))
  local entries = redis.call('HMGET', KEYS[3], unpack(dueIDs))
  for n, j in ipairs(due) do
    if entries[n] then
      entry[j] = entries[n]
      taken[#taken + 1] = ids[j]
    end
  end
end
if #taken > 0 then
  local inflight, owner, by, held = {}, {}, {}, {}
  local was = redis.call('HMGET', KEYS[8], unpack(taken))
  local moved = {}
  for n, id in ipairs(taken) do
    inflight[#inflight + 1] = expiry
    inflight[#inflight + 1] = id
    owner[#owner + 1] = id
    owner[#owner + 1] = ARGV[2]
    if was[n] ~= replica then
      if was[n] then
        moved[#moved + 1] = was[n] .. '/' .. id
      end
      by[#by + 1] = id
      by[#by + 1] = replica
      held[#held + 1] = 0
      held[#held + 1] = replica .. '/' .. id
    end
  end
  redis.call('ZADD', KEYS[2], unpack(inflight))
  redis.call('HSET', KEYS[4], unpack(owner))
  if #moved > 0 then
    redis.call('ZREM', KEYS[9], unpack(moved))
  end
  if #by > 0 then
    redis.call('HSET', KEYS[8], unpack(by))
    redis.call('ZADD', KEYS[9], unpack(held))
  end
end

-- An id in flight that this token owns already (its claim's reply was lost and the
-- claim is repeated): returned again with a renewed lease.
if #other > 0 then
  local otherIDs = pick(other)
  local owners = redis.call('HMGET', KEYS[4], unpack(otherIDs))
  local mine = {}
  for n, j in ipairs(other) do
    if owners[n] == ARGV[2] then
      mine[#mine + 1] = j
    end
  end
  if #mine > 0 then
    local mineIDs = pick(mine)
    local leases = redis.call('ZMSCORE', KEYS[2], unpack(mineIDs))
    local entries = redis.call('HMGET', KEYS[3], unpack(mineIDs))
    local renew = {}
    for n, j in ipairs(mine) do
      if leases[n] and entries[n] then
        entry[j] = entries[n]
        renew[#renew + 1] = expiry
        renew[#renew + 1] = ids[j]
      end
    end
    if #renew > 0 then
      redis.call('ZADD', KEYS[2], 'XX', unpack(renew))
    end
  end
end

-- What the claimed ids carry, in the order of ids.
local got = {}
for j = 1, #ids do
  if entry[j] then
    got[#got + 1] = j
  end
end
if #got > 0 then
  local gotIDs = pick(got)
  local tries = redis.call('HMGET', KEYS[5], unpack(gotIDs))
  local failed = redis.call('HMGET', KEYS[6], unpack(gotIDs))
  local parts = redis.call('HMGET', KEYS[7], unpack(gotIDs))
  for n, j in ipairs(got) do
    claimed[#claimed + 1] = ids[j]
    claimed[#claimed + 1] = entry[j]
    claimed[#claimed + 1] = tries[n] or '0'
    claimed[#claimed + 1] = failed[n] or ''
    claimed[#claimed + 1] = parts[n] or '0'
  end
end
return {claimed, early, nowText}

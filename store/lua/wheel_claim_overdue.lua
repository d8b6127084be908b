-- wheel_claim_overdue.lua: the sweeper's claim of entries nobody else is taking care of.
--
-- KEYS[1]  {p}:due            sorted set: id -> next due time (Unix ms)
-- KEYS[2]  {p}:inflight       sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]  {p}:entries        hash: id -> encoded entry
-- KEYS[4]  {p}:owner          hash: id -> token of the claim that holds it
-- KEYS[5]  {p}:tries          hash: id -> hand-offs given back so far
-- KEYS[6]  {p}:failed         hash: id -> the failure of its send, once decided
-- KEYS[7]  {p}:parts          hash: id -> leading parts of a split alert delivered so far
-- KEYS[8]  {p}:by             hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[9]  {p}:held           sorted set: "<replica>/<id>" of each id in by
-- KEYS[10] {p}:live           sorted set: replica -> end of its liveness (Unix ms, Redis clock)
-- KEYS[11] {p}:sweep:<token>  set: the ids this claim took (lives an hour, or a lease if
--                             longer)
-- KEYS[12] {p}:live-meta      hash: last -> the last beat of any replica, quiet -> take-overs
--                             wait until then (Unix ms; live_beat.lua)
-- KEYS[13] {p}:guard          sorted set: id -> until when a confirmed send of it may still
--                             be on the wire (Unix ms; wheel_confirm.lua)
-- KEYS[14] {p}:gone           sorted set: replica -> when the take-over of its holdings
--                             finished (Unix ms)
-- ARGV[1]  grace, ms: only due times earlier than Redis now - grace count as overdue
-- ARGV[2]  limit: most entries to claim
-- ARGV[3]  lease, ms
-- ARGV[4]  token of this claim: "<replica>/<…>"
-- ARGV[5]  liveness period T, ms; "0": liveness is off
--
-- Claims, oldest first, entries of inflight whose lease has expired (lease expiry <= now),
-- then entries of due overdue by more than grace, up to limit in all; each gets
-- score = Redis now + lease in inflight and the token as its owner, so the claim it
-- replaces can no longer extend, give back or confirm it. An entry of inflight may be
-- due up to a claim's ahead later (wheel_claim.lua: claimed ahead, then handed back or
-- taken over before its due time): the caller waits for its due time by Redis's clock,
-- which the reply gives (now). The ids taken are noted under
-- the token, so the same claim run again (its reply was lost) returns what the first run
-- took, still held by the token, instead of taking more. The token's replica becomes
-- responsible for each id taken (by, held). With liveness on, a replica that is not live
-- claims nothing: the script fails with LAPSED.
--
-- With liveness on, a take-over comes first: unless a quiet window is open (or nobody
-- beat for T/2: Redis is just back from a silence, and the first beat opens one), the
-- replica whose liveness ran out first has up to 5000 of its holdings (held) ended: each
-- in flight gets owner "lapsed:<replica>", so none of its claims can confirm, give back,
-- mark or park it any more, and lease expiry Redis now, or its guard when a send
-- confirmed within the guard may still be on the wire; it leaves by and held. A parked
-- id leaves its park at the next adopt (wheel_adopt.lua drops ids the park no longer
-- owns). Once the replica holds nothing it leaves live for gone. The expired claims are
-- then claimed as any others, in this same run. Expired guards are dropped. And an
-- expired claim of a replica that is live is renewed instead of taken: liveness, not the
-- lease, tells that its holder is gone; while a quiet window is open (or nobody beat for
-- T/2), so is the expired claim of any replica, live or not: after a silence of Redis
-- the replicas get a whole T to beat again before anything of theirs moves.
-- Returns a flat array id, entry, tries, failure, parts, … of the claimed ids, and Redis
-- now (Unix ms) as the script read it.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[2])
local lease = tonumber(ARGV[3])
local expiry = string.format('%d', now + lease)
local out = {}
local n = 0
local replica = replica_of(ARGV[4])
if ARGV[5] ~= '0' and lapsed(KEYS[10], replica, now) then
  return lapsed_error(replica)
end

local function emit(id, entry)
  out[#out + 1] = id
  out[#out + 1] = entry
  out[#out + 1] = redis.call('HGET', KEYS[5], id) or '0'
  out[#out + 1] = redis.call('HGET', KEYS[6], id) or ''
  out[#out + 1] = redis.call('HGET', KEYS[7], id) or '0'
  n = n + 1
end

if redis.call('EXISTS', KEYS[11]) == 1 then
  for _, id in ipairs(redis.call('SMEMBERS', KEYS[11])) do
    local entry = redis.call('HGET', KEYS[3], id)
    if entry and redis.call('HGET', KEYS[4], id) == ARGV[4] and redis.call('ZSCORE', KEYS[2], id) then
      redis.call('ZADD', KEYS[2], 'XX', expiry, id)
      emit(id, entry)
    end
  end
  return {out, string.format('%d', now)}
end

local period = tonumber(ARGV[5])
local calm = false -- liveness on, and no quiet window open: a lapse means a death
if period > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[13], '-inf', '(' .. string.format('%d', now))
  local last = tonumber(redis.call('HGET', KEYS[12], 'last') or '')
  local quiet = tonumber(redis.call('HGET', KEYS[12], 'quiet') or '')
  calm = last ~= nil and now - last <= math.floor(period / 2) and not (quiet and now < quiet)
  local lost = redis.call('ZRANGEBYSCORE', KEYS[10], '-inf', '(' .. string.format('%d', now), 'LIMIT', 0, 1)[1]
  if lost and calm then
    local batch = 5000
    local members = holdings(KEYS[9], lost, batch)
    for _, member in ipairs(members) do
      hand_over(KEYS[2], KEYS[4], KEYS[8], KEYS[9], KEYS[13], member, lost, 'lapsed:' .. lost, now)
    end
    if #members < batch then
      depart(KEYS[10], KEYS[14], lost, now)
    end
  end
end

-- spared reports whether id is held by a claim of a replica that is live, or of any
-- replica while it is not calm.
local function spared(id)
  local owner = redis.call('HGET', KEYS[4], id)
  local by = redis.call('HGET', KEYS[8], id)
  return owner and by and replica_of(owner) == by and (not calm or not lapsed(KEYS[10], by, now))
end

local function take(id)
  local entry = redis.call('HGET', KEYS[3], id)
  if entry then
    redis.call('ZADD', KEYS[2], expiry, id)
    redis.call('HSET', KEYS[4], id, ARGV[4])
    hold(KEYS[8], KEYS[9], id, replica)
    redis.call('SADD', KEYS[11], id)
    emit(id, entry)
  else
    -- An index entry without a payload cannot be delivered: drop it.
    redis.call('ZREM', KEYS[2], id)
    redis.call('HDEL', KEYS[4], id)
    unhold(KEYS[8], KEYS[9], id)
  end
end

local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', string.format('%d', now), 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  if period > 0 and spared(id) then
    redis.call('ZADD', KEYS[2], 'XX', expiry, id)
  else
    take(id)
  end
end
if n < limit then
  local overdue = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf',
    '(' .. string.format('%d', now - tonumber(ARGV[1])), 'LIMIT', 0, limit - n)
  for _, id in ipairs(overdue) do
    redis.call('ZREM', KEYS[1], id)
    take(id)
  end
end
if n > 0 then
  -- An hour (or a lease, if longer): a sweeper that cannot tell whether its claim ran
  -- repeats it until it can, however long Redis is unreachable or short of its replicas,
  -- and the repeat must still find what this run took.
  redis.call('PEXPIRE', KEYS[11], math.max(lease, 3600000))
end
return {out, string.format('%d', now)}

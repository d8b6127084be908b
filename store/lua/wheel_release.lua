-- wheel_release.lua: forget a batch of entries whose hand-off is done (delivered, or its
-- failure recorded), leave done markers, and write how it ended into each trace.
--
-- KEYS[1]   {p}:due       sorted set: id -> next due time (Unix ms)
-- KEYS[2]   {p}:inflight  sorted set: id -> lease expiry (Unix ms, Redis clock)
-- KEYS[3]   {p}:entries   hash: id -> encoded entry
-- KEYS[4]   {p}:owner     hash: id -> token of the claim that holds it
-- KEYS[5]   {p}:tries     hash: id -> hand-offs given back so far
-- KEYS[6]   {p}:failed    hash: id -> the failure of its send
-- KEYS[7]   {p}:parts     hash: id -> leading parts of a split alert delivered so far
-- KEYS[8]   {p}:by        hash: id -> the replica responsible for it (lib_holding.lua)
-- KEYS[9]   {p}:held      sorted set: "<replica>/<id>" of each id in by
-- KEYS[10]  {p}:pending     sorted set: id -> due time of every pending alert (lib_pending.lua)
-- KEYS[11]  {p}:pending-by  hash: target -> how many of pending are its
-- KEYS[12…] per id, in the order of ARGV's groups: {p}:done:<id>, then {p}:trace:<id>
-- ARGV[1]   done marker (and trace) lifetime, ms
-- ARGV[2…]  groups of 9 per id: id, token of the claim the caller held it by, done
--           marker prefix ("" for delivered, "recorded:" for a recorded failure,
--           "withheld:" for an alert not sent on purpose: an ended escalation's step),
--           robot, merged, parts ("" when not known), the releasing replica, and the
--           entry's due time (Unix ms) and target, "" when the caller does not know
--           them: then both are read from the trace
--
-- One call releases the hand-offs of many workers at once (scheduler/release.go), each
-- ended its own way.
--
-- For each id: deletes the entry and its claim state (no replica is responsible for it
-- any more), removes it from inflight and (defensively) from due, and sets its done
-- marker (value: the prefix, then Redis now in Unix ms) to expire after ARGV[1] ms, and
-- unlists it from pending (its target, and its due time for the trace's lateness, given
-- by the caller, who holds the entry; read from its trace only when not given). A
-- done marker is never downgraded: a "recorded:" release of an id whose marker says
-- delivered (the retry job delivered it meanwhile) keeps that marker and only renews its
-- lifetime, and its trace keeps saying delivered.
-- A release is not conditional on the token: the hand-off is done, so the entry must not
-- be sent by anyone else, even by a claim that took it over after this one's lease ran
-- out (that claim's confirm then fails).
-- Returns the positions (1, 2, … in ARGV's groups) of the ids whose owner was not the
-- given token (claims lost on the way).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local nowms = string.format('%d', now)
local ids, lost = {}, {}
for i = 2, #ARGV, 9 do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  return lost
end
-- The batch's state goes with one variadic command per key (the caller sends at most a
-- few hundred ids per call), the done markers and traces id by id.
local owners = redis.call('HMGET', KEYS[4], unpack(ids))
local was = redis.call('HMGET', KEYS[8], unpack(ids))
local members = {}
for j, id in ipairs(ids) do
  if owners[j] ~= ARGV[2 + (j - 1) * 9 + 1] then
    lost[#lost + 1] = j
  end
  if was[j] then
    members[#members + 1] = was[j] .. '/' .. id
  end
end
if #members > 0 then
  redis.call('ZREM', KEYS[9], unpack(members))
end
for _, key in ipairs({KEYS[3], KEYS[4], KEYS[8], KEYS[5], KEYS[6], KEYS[7]}) do
  redis.call('HDEL', key, unpack(ids))
end
redis.call('ZREM', KEYS[2], unpack(ids))
redis.call('ZREM', KEYS[1], unpack(ids))
-- The batch leaves pending: one ZMSCORE and one ZREM, and one HINCRBY per target (each
-- listed id's target taken in the loop below).
local listed = redis.call('ZMSCORE', KEYS[10], unpack(ids))
local unlist, unlisted, gone = {}, {}, {}
-- An id's own keys cannot stop the batch: SET replaces a key of any type, and the
-- marker's read and the trace's reads and writes (for operators) are pcalls, so a key
-- damaged by another writer costs its own trace at most, never the other ids' done markers.
local k = 12
for i = 2, #ARGV, 9 do
  local j = (k - 10) / 2
  local tf = {ARGV[i + 7], ARGV[i + 8]}
  if tf[2] == '' then
    tf = redis.pcall('HMGET', KEYS[k + 1], 'due', 'tgt')
    if type(tf) ~= 'table' or tf.err then
      tf = {}
    end
  end
  if listed[j] and not unlisted[ids[j]] then -- an id twice in the batch leaves once
    unlisted[ids[j]] = true
    unlist[#unlist + 1] = ids[j]
    if tf[2] then
      gone[tf[2]] = (gone[tf[2]] or 0) + 1
    end
  end
  local prefix = ARGV[i + 2]
  local marker = prefix ~= '' and redis.pcall('GET', KEYS[k])
  if type(marker) == 'table' then
    marker = false
  end
  local trace = KEYS[k + 1]
  if marker and string.sub(marker, 1, #prefix) ~= prefix then
    redis.call('PEXPIRE', KEYS[k], ARGV[1])
  else
    redis.call('SET', KEYS[k], prefix .. nowms, 'PX', ARGV[1])
    local st = 'delivered'
    if prefix ~= '' then
      st = string.sub(prefix, 1, #prefix - 1)
    end
    local fields = {'st', st, 'at', nowms, 'by', ARGV[i + 6]}
    local due = tonumber(tf[1])
    if due then
      fields[#fields + 1] = 'late'
      fields[#fields + 1] = string.format('%d', now - due)
    end
    for j, field in ipairs({'robot', 'merged', 'parts'}) do
      if ARGV[i + 2 + j] ~= '' then
        fields[#fields + 1] = field
        fields[#fields + 1] = ARGV[i + 2 + j]
      end
    end
    redis.pcall('HSET', trace, unpack(fields))
  end
  redis.pcall('PEXPIRE', trace, ARGV[1])
  k = k + 2
end
if #unlist > 0 then
  redis.call('ZREM', KEYS[10], unpack(unlist))
  for tgt, n in pairs(gone) do
    if redis.call('HINCRBY', KEYS[11], tgt, -n) <= 0 then
      redis.call('HDEL', KEYS[11], tgt)
    end
  end
end
return lost

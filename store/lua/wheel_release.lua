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
-- KEYS[10…] per id, in the order of ARGV's groups: {p}:done:<id>, then {p}:trace:<id>
-- ARGV[1]   done marker (and trace) lifetime, ms
-- ARGV[2]   done marker prefix: "" for delivered, "recorded:" for a recorded failure,
--           "withheld:" for an alert not sent on purpose (an ended escalation's step)
-- ARGV[3…]  groups of 6 per id: id, token of the claim the caller held it by, robot,
--           merged, parts ("" when not known), the releasing replica
--
-- For each id: deletes the entry and its claim state (no replica is responsible for it
-- any more), removes it from inflight and (defensively) from due, and sets its done
-- marker (value: the prefix, then Redis now in Unix ms) to expire after ARGV[1] ms. A
-- done marker is never downgraded: a "recorded:" release of an id whose marker says
-- delivered (the retry job delivered it meanwhile) keeps that marker and only renews its
-- lifetime, and its trace keeps saying delivered.
-- A release is not conditional on the token: the hand-off is done, so the entry must not
-- be sent by anyone else, even by a claim that took it over after this one's lease ran
-- out (that claim's confirm then fails).
-- Returns the number of ids whose owner was not the given token (claims lost on the way).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lost = 0
local k = 10
local prefix = ARGV[2]
for i = 3, #ARGV, 6 do
  local id, token = ARGV[i], ARGV[i + 1]
  if redis.call('HGET', KEYS[4], id) ~= token then
    lost = lost + 1
  end
  redis.call('HDEL', KEYS[3], id)
  redis.call('HDEL', KEYS[4], id)
  unhold(KEYS[8], KEYS[9], id)
  redis.call('HDEL', KEYS[5], id)
  redis.call('HDEL', KEYS[6], id)
  redis.call('HDEL', KEYS[7], id)
  redis.call('ZREM', KEYS[2], id)
  redis.call('ZREM', KEYS[1], id)
  local marker = prefix ~= '' and redis.call('GET', KEYS[k])
  local trace = KEYS[k + 1]
  if marker and string.sub(marker, 1, #prefix) ~= prefix then
    redis.call('PEXPIRE', KEYS[k], ARGV[1])
  else
    redis.call('SET', KEYS[k], prefix .. string.format('%d', now), 'PX', ARGV[1])
    local st = 'delivered'
    if prefix ~= '' then
      st = string.sub(prefix, 1, #prefix - 1)
    end
    redis.call('HSET', trace, 'st', st, 'at', string.format('%d', now), 'by', ARGV[i + 5])
    local due = tonumber(redis.call('HGET', trace, 'due'))
    if due then
      redis.call('HSET', trace, 'late', string.format('%d', now - due))
    end
    for j, field in ipairs({'robot', 'merged', 'parts'}) do
      if ARGV[i + 1 + j] ~= '' then
        redis.call('HSET', trace, field, ARGV[i + 1 + j])
      end
    end
  end
  redis.call('PEXPIRE', trace, ARGV[1])
  k = k + 2
end
return lost

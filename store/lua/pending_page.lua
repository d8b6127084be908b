-- pending_page.lua: the next ids of the index of pending alerts after a cursor (read only).
--
-- KEYS[1]  {p}:pending  sorted set: id -> due time (Unix ms) of every pending alert
--                       (lib_pending.lua)
-- ARGV[1]  the cursor's due time, Unix ms
-- ARGV[2]  the cursor's id: the page starts after (ARGV[1], ARGV[2]) in the index's order
--          (by due time, then by id); "" starts at the first id due at ARGV[1] or later
-- ARGV[3]  the last due time to return, Unix ms
-- ARGV[4]  most ids to return
--
-- Returns a flat array id1, due1, id2, due2, … in the index's order. The start is found
-- by rank (ZRANK of the cursor's id while it is listed at its due time; otherwise the ids
-- due before the cursor are counted and those due at it up to its id skipped), so a page
-- costs O(log n + page) however many ids share one due time.
local at, after, last = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local count = tonumber(ARGV[4])
local start
if after ~= '' then
  local score = redis.call('ZSCORE', KEYS[1], after)
  if score and tonumber(score) == at then
    start = redis.call('ZRANK', KEYS[1], after) + 1
  end
end
if not start then
  start = redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. ARGV[1])
  if after ~= '' then
    -- The cursor's id left the index: skip the ids due at its time that sort up to it.
    local same = redis.call('ZRANGE', KEYS[1], start, start + 999, 'WITHSCORES')
    for i = 1, #same, 2 do
      if tonumber(same[i + 1]) ~= at or same[i] > after then
        break
      end
      start = start + 1
    end
  end
end
local out = {}
local page = redis.call('ZRANGE', KEYS[1], start, start + count - 1, 'WITHSCORES')
for i = 1, #page, 2 do
  if tonumber(page[i + 1]) > last then
    break
  end
  out[#out + 1] = page[i]
  out[#out + 1] = page[i + 1]
end
return out

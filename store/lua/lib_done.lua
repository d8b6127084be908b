-- lib_done.lua: functions of the scripts that answer for an alert by its done marker
-- (cancel, reschedule, requeue); prepended to them (store/embed.go, scriptWith).

-- done_code is the answer a done marker gives: 5 recorded (its hand-off recorded its
-- failure in failed_sends, "recorded:"), 7 withheld (a step of an ended escalation
-- episode, "withheld:"), else 3 already delivered.
local function done_code(marker)
  if string.sub(marker, 1, 9) == 'recorded:' then
    return 5
  end
  if string.sub(marker, 1, 9) == 'withheld:' then
    return 7
  end
  return 3
end

package mutants

// List is the curated mutants, by the invariant they break: never early, the fences and
// the liveness take-over, the robot windows and pacing, the episode transitions, the
// at-once dedupe, cancel and reschedule, failed_sends claims and retention, the
// simulators' rules and the fault suite's judge. Each From occurs exactly once in its
// File; the comment says which assertion of its Tests fails.
var List = []Mutant{
	{
		// killed: the entry due in 1ms ('barely') is handed off: require.Zero(rec.count("barely")) fails
		Name:      "handoff-early",
		Invariant: "never early: a claimed alert is not handed off before its due time by the replica's clock",
		File:      "scheduler/handoff.go",
		From:      "early > 0",
		To:        "early > 2*time.Second",
		Package:   "./scheduler",
		Tests:     "^TestDeliverRefusesWhatIsNotDueByTheReplicasClock$",
	},
	{
		// killed: keys of the walked slot due up to a tick later fire at once ('afterWake' at 15ms instead of 20ms): the require.Equal on fire times fails
		Name:      "wheel-fires-a-tick-early",
		Invariant: "never early: the wheel fires a key only at a wake-up at or after its own time",
		File:      "timewheel/wheel.go",
		From:      "if e.at > now {",
		To:        "if e.at > now+w.tickNs {",
		Package:   "./timewheel",
		Tests:     "^(TestIntermediateWakeFiresDueKeys|TestDueKeysOfNextTickFireAtLateWakeUp)$",
	},
	{
		// killed: the id named twice comes back twice: require.Equal([]string{"d"}, ids(got)) fails
		Name:      "claim-keeps-repeated-ids",
		Invariant: "exactly one hand-off: an id named twice in one claim is claimed once",
		File:      "store/wheelstage.go",
		From:      "ids = distinct(ids)",
		To:        "_ = distinct(ids)",
		Package:   "./store",
		Tests:     "^TestWheelStageClaim$",
	},
	{
		// killed: the entry due in an hour is claimed with the due one: require.Equal([]string{"now"}, ids(c.Entries)) fails
		Name:      "claim-takes-not-due",
		Invariant: "never early: the claim script takes an entry only once it is due by Redis TIME",
		File:      "store/lua/wheel_claim.lua",
		From:      "if wait > ahead then",
		To:        "if wait > 86400000 then",
		Package:   "./store",
		Tests:     "^TestWheelStageClaimNeverEarly$",
	},
	{
		// killed: the entry claimed 2s ahead comes back with no wait: require.GreaterOrEqual(wait, soon.Sub(after)) fails
		Name:      "claim-ahead-without-wait",
		Invariant: "never early: an entry claimed ahead of its due time says how long until it is due by Redis's clock",
		File:      "store/wheelstage.go",
		From:      "c.Entries[i].DueIn = max(c.Entries[i].DueAt.Sub(at), 0)",
		To:        "c.Entries[i].DueIn = min(c.Entries[i].DueAt.Sub(at), 0)",
		Package:   "./store",
		Tests:     "^TestWheelStageClaimAhead$",
	},
	{
		// killed: with every release held, no done marker goes ahead and only 512 of the 2048 are sent: require.Equal(n, rec.countAll(ids)) fails
		Name:      "release-marks-nothing-ahead",
		Invariant: "a burst waits for done markers, not releases: a delivered hand-off whose release waits has its marker left first",
		File:      "scheduler/release.go",
		From:      "case r.Receipt.Outcome == store.Delivered && len(rl.slots)",
		To:        "case r.Receipt.Outcome != store.Delivered && len(rl.slots)",
		Package:   "./scheduler",
		Tests:     "^TestDoneMarkersGoAheadOfReleasesThatWait$",
	},
	{
		// killed: the alert claimed ahead by a replica gone is swept 9s before its due time and handed off at once by a survivor 30s fast: require.False(at.Before(due)) fails
		Name:      "sweep-hands-off-before-due",
		Invariant: "never early: an entry swept before its due time (claimed ahead by a replica since gone) waits for it by Redis's clock",
		File:      "scheduler/sweeper.go",
		From:      "s.handOff(ctx, s.pool.undone(ctx, c.Entries), true)",
		To:        "s.pool.enqueue(ctx, s.pool.undone(ctx, c.Entries))",
		Package:   "./scheduler",
		Tests:     "^TestATakeOverBeforeTheDueTimeIsNotEarly$",
	},
	{
		// killed: with every release held, markers go on until the backlog is full: require.Less(sent, n) fails
		Name:      "markers-never-yield",
		Invariant: "the releases keep up: past half the backlog the markers stop and the releases go on",
		File:      "scheduler/release.go",
		From:      "return len(rl.queued) >= releaseBacklog/2",
		To:        "return len(rl.queued) < 0",
		Package:   "./scheduler",
		Tests:     "^TestMarkersYieldToReleasesPastHalfTheBacklog$",
	},
	{
		// killed: a scoped id with no proof passes the producer's check: require.NotNil(check("@team:disk-1", "", "")) fails
		Name:      "scoped-id-unreserved",
		Invariant: "only the service grants power: a scoped id goes only with its principal's proof",
		File:      "wire/contract.go",
		From:      "if principal, ok := Scope(id); ok {",
		To:        "if principal, ok := Scope(id); ok && false {",
		Package:   "./wire",
		Tests:     "^TestAScopedIDIsItsPrincipals$",
	},
	{
		// killed: shop's publish in team's scope is not 403 foreign_id: require.Equal(http.StatusForbidden, code) fails
		Name:      "publish-in-anothers-scope",
		Invariant: "a credential allows only what it names: no principal publishes in another's scope",
		File:      "ingress/api.go",
		From:      "if principal, ok := wire.Scope(pub.ID); ok && principal != p.Name {",
		To:        "if principal, ok := wire.Scope(pub.ID); ok && principal == \"\" {",
		Package:   "./ingress",
		Tests:     "^TestScopedIDsAreTheirPrincipals$",
	},
	{
		// killed: a lapsed lease's unspent requests are spent later: require.Equal(5, c.trips) fails
		Name:      "lease-never-lapses",
		Invariant: "a principal's rate holds: a lease is spent within leaseLife of its grant, never later",
		File:      "ingress/rates.go",
		From:      "case l.left > 0 && now.Before(l.until):",
		To:        "case l.left > 0:",
		Package:   "./ingress",
		Tests:     "^TestRatesAreTakenALeaseAtATime$",
	},
	{
		// killed: requests one at a time take whole leases and waste them: request 1 is refused (require.Zero(wait))
		Name:      "lease-wastes-the-rate",
		Invariant: "a principal's rate holds: a lease asks for what its replica spent, so requests one at a time waste none",
		File:      "ingress/rates.go",
		From:      "want = l.spent",
		To:        "want = leaseSize(p)",
		Package:   "./ingress",
		Tests:     "^TestRatesAreTakenALeaseAtATime$",
	},
	{
		// killed: the publishes that spend the lease take the rate again, and the burst is spent by the 46th: require.Equal(http.StatusAccepted, code) fails
		Name:      "lease-taken-twice",
		Invariant: "a principal's rate holds: a request is counted once, from its replica's lease or from Redis",
		File:      "ingress/principals.go",
		From:      "perSecond = 0 // spent of this replica's lease already",
		To:        "perSecond, want = p.RatePerSecond, 1",
		Package:   "./ingress",
		Tests:     "^TestALeasedRateIsTakenOncePerPublish$",
	},
	{
		// killed: one empty read revokes the principal: require.False(t, reload(), "one empty read changes nothing") fails
		Name:      "principals-emptied-at-once",
		Invariant: "a credential ends only by the operator's word: a principals file read while it is written in place revokes nobody",
		File:      "ingress/principals.go",
		From:      "if len(file) == 0 && ps.fromFile > 0 && !ps.emptied {",
		To:        "if len(file) == 0 && ps.fromFile > 0 && false {",
		Package:   "./ingress",
		Tests:     "^TestAnEmptiedPrincipalsFileRevokesOnTheNextReadThatAgrees$",
	},
	{
		// killed: an emptied file never revokes: require.True(t, reload(), "the next empty read agrees: revoked") fails
		Name:      "principals-emptied-never",
		Invariant: "a credential allows only what it names: an emptied principals file revokes its principals",
		File:      "ingress/principals.go",
		From:      "if len(file) == 0 && ps.fromFile > 0 && !ps.emptied {",
		To:        "if len(file) == 0 && ps.fromFile > 0 {",
		Package:   "./ingress",
		Tests:     "^TestAnEmptiedPrincipalsFileRevokesOnTheNextReadThatAgrees$|^TestPrincipalsFileFollowsItsSecrets$",
	},
	{
		// killed: the swept alerts whose markers are left are sent again: require.Zero(h.rec.count("swept-done-1")) fails
		Name:      "sweep-sends-what-is-done",
		Invariant: "exactly one hand-off: an entry taken over whose done marker is left is released, not sent again",
		File:      "scheduler/handoff.go",
		From:      "if done[i] == 0 {",
		To:        "if true {",
		Package:   "./scheduler",
		Tests:     "^TestSweptAlertsWhoseMarkersAreLeftAreNotSentAgain$",
	},
	{
		// killed: the replica 5s fast, uncorrected, hands each alert off as soon as its claim ahead lands, up to 100ms early: require.False(at.Before(due)) fails
		Name:      "handoff-before-claim-ahead-wait",
		Invariant: "never early: an entry claimed ahead is handed off only once its wait by Redis's clock has passed",
		File:      "scheduler/fireloop.go",
		From:      "entries[n].DueIn <= since &&",
		To:        "entries[n].DueIn <= since+time.Hour &&",
		Package:   "./scheduler",
		Tests:     "^TestFastClockNeverSendsEarly$",
	},
	{
		// killed: with grace 1m the second sweep takes 'in-2s' too: require.Equal([]string{"old-10m"}, ...) fails
		Name:      "claim-overdue-grace-sign",
		Invariant: "never early: the sweeper takes only entries overdue by more than grace (Redis now - grace), never ones due within grace ahead",
		File:      "store/lua/wheel_claim_overdue.lua",
		From:      "'(' .. string.format('%d', now - tonumber(ARGV[1]))",
		To:        "'(' .. string.format('%d', now + tonumber(ARGV[1]))",
		Package:   "./store",
		Tests:     "^TestWheelStageClaimOverdue$",
	},
	{
		// killed: Now is the replica's clock minus the offset: require.Equal(replica.now.Add(c.Offset()), c.Now()) fails for ahead=5s
		Name:      "refclock-offset-sign",
		Invariant: "never early: the reference clock is the replica's clock plus the measured offset to Redis",
		File:      "scheduler/refclock.go",
		From:      "return c.base.Now().Add(c.Offset())",
		To:        "return c.base.Now().Add(-c.Offset())",
		Package:   "./scheduler",
		Tests:     "^(TestRefClockMeasuresItsOffsetByTheShortestRoundTrip|TestRefClockFollowsRedis)$",
	},
	{
		// killed: the zombie's Confirm after the sweeper took the entry succeeds: require.ErrorIs(ws.Confirm(zombie), ErrNotHeld) fails
		Name:      "confirm-ignores-owner",
		Invariant: "fence: only the claim that owns an in-flight entry may confirm (send) it",
		File:      "store/lua/wheel_confirm.lua",
		From:      "if inflight and redis.call('HGET', KEYS[2], ARGV[2]) == ARGV[3] then",
		To:        "if inflight then",
		Package:   "./store",
		Tests:     "^TestWheelStageClaimsHaveOwners$",
	},
	{
		// killed: the zombie's GiveBack returns true: require.False(ok, "a lost claim cannot give the entry back") fails
		Name:      "give-back-ignores-owner",
		Invariant: "fence: only the claim that holds an entry may give it back to due",
		File:      "store/lua/wheel_give_back.lua",
		From:      "if redis.call('ZSCORE', KEYS[2], ARGV[1]) and redis.call('HGET', KEYS[3], ARGV[1]) == ARGV[2] then",
		To:        "if redis.call('ZSCORE', KEYS[2], ARGV[1]) then",
		Package:   "./store",
		Tests:     "^TestWheelStageClaimsHaveOwners$",
	},
	{
		// killed: after ra's liveness ran out its Claim of d succeeds: requireLapsed(err) (ErrorIs ErrLapsed) fails
		Name:      "lapsed-never",
		Invariant: "liveness: a replica whose liveness ran out by Redis's clock is lapsed and claims nothing",
		File:      "store/lua/lib_holding.lua",
		From:      "return not till or tonumber(till) < now",
		To:        "return not till",
		Package:   "./store",
		Tests:     "^TestClaimRefusedWhileLapsed$",
	},
	{
		// killed: the guarded x gets lease expiry now and the same sweep claims it: require.Equal([]string{"y"}, sweep(...)) fails
		Name:      "hand-over-ignores-guard",
		Invariant: "take-over: an entry whose send was confirmed within the guard is not re-claimed before the guard ends",
		File:      "store/lua/lib_holding.lua",
		From:      "      at = guarded",
		To:        "      at = now",
		Package:   "./store",
		Tests:     "^TestTakeOverWaitsForAGuardedSend$",
	},
	{
		// killed: ra stays in gone, so all four racing TakeGone calls return it: require.Equal(["","","","ra"], taken) fails
		// Killed with the stage in one shard (make mutants does not set ROCKETDELAY_TEST_SHARDS).
		Name:      "take-gone-twice",
		Invariant: "take-over: each departed replica is taken (its wheel's entries loaded) by exactly one survivor",
		File:      "store/lua/live_take_gone.lua",
		From: `redis.call('ZREM', KEYS[1], first)
redis.call('ZADD', KEYS[2]`,
		To:      "redis.call('ZADD', KEYS[2]",
		Package: "./store",
		Tests:   "^TestTakeGoneGivesEachDepartedReplicaOnce$",
	},
	{
		// killed: the beat just past T/2 of silence opens no window: requireWithin(v.QuietUntil, ...) fails on the zero time
		Name:      "beat-quiet-after-full-period",
		Invariant: "liveness: a silence of every replica longer than T/2 opens a quiet window (no take-over for T)",
		File:      "store/lua/live_beat.lua",
		From:      "now - last > math.floor(period / 2)",
		To:        "now - last > period",
		Package:   "./store",
		Tests:     "^TestBeatAfterSilenceSetsQuiet$",
	},
	{
		// killed: the send a window and half a guard old is pruned and the pick gets a: require.Empty(p.Robot) fails
		Name:      "robot-prune-without-guard",
		Invariant: "robot windows: a send counts in its robot's window for window + guard",
		File:      "store/lua/robot_pick.lua",
		From:      "redis.call('ZREMRANGEBYSCORE', win, '-inf', now - window - guard)",
		To:        "redis.call('ZREMRANGEBYSCORE', win, '-inf', now - window)",
		Package:   "./store",
		Tests:     "^TestRobotPoolGuardKeepsAnOldSendInTheWindow$",
	},
	{
		// killed: the send is scored at its pick, not its hold's end: require.EqualValues(p.At.Add(hold)…) fails; and the
		// staged slow request is overtaken by the next send and throttled at the simulator
		Name:      "robot-send-not-held-in-flight",
		Invariant: "robot windows: a send holds its slot from the pick until it is answered (or its hold ends)",
		File:      "store/lua/robot_pick.lua",
		From:      "redis.call('ZADD', win, now + hold, member)",
		To:        "redis.call('ZADD', win, now, member)",
		Package:   "./store ./sender",
		Tests:     "^(TestRobotPoolHoldsASendInFlight|TestSlowRequestKeepsItsSlotUntilAnswered)$",
	},
	{
		// killed: an answered send keeps its hold's end: require.LessOrEqual(score, now, "moved back…") fails
		Name:      "robot-answer-not-moved-back",
		Invariant: "robot windows: an answered send counts a window from its answer",
		File:      "store/lua/robot_touch.lua",
		From:      "redis.call('ZADD', KEYS[1], 'XX', now, ARGV[1])",
		To:        "redis.call('ZADD', KEYS[1], 'XX', 'GT', now, ARGV[1])",
		Package:   "./store",
		Tests:     "^TestRobotPoolHoldsASendInFlight$",
	},
	{
		// killed: the queue's order alone: the first message is the flood's 50, the other's alert waits for the second
		Name:      "queue-without-turns",
		Invariant: "fair shares: a busy target's waiting alerts go in turns over their principals",
		File:      "sender/coalesce.go",
		From:      "	if !slices.ContainsFunc(waiting, func(w *waiter) bool { return w.principal != waiting[0].principal }) {",
		To:        "	if true {",
		Package:   "./sender",
		Tests:     "^TestAFloodCannotKeepAnotherPrincipalWaiting$",
	},
	{
		// killed: the late share's turns start at 0, so l0 and l1 go before the flood's f4: ElementsMatch{f4, l0} fails
		Name:      "park-turn-ignores-serving",
		Invariant: "fair shares: a share that comes while the park drains joins the turn being served",
		File:      "store/lua/wheel_park.lua",
		From:      "local turn = math.max(tonumber(redis.call('HGET', KEYS[7], share)) or 0, serving)",
		To:        "local turn = tonumber(redis.call('HGET', KEYS[7], share)) or 0",
		Package:   "./store",
		Tests:     "^TestParkTakesSharesInTurns$",
	},
	{
		// killed: by due time alone the flood's f0 and f1 are adopted first: ElementsMatch{f0, o0} fails
		Name:      "park-without-turns",
		Invariant: "fair shares: the park takes its shares in turns",
		File:      "store/lua/wheel_park.lua",
		From:      "redis.call('ZADD', KEYS[3], turn, id)",
		To:        "redis.call('ZADD', KEYS[3], ARGV[i + 2], id)",
		Package:   "./store",
		Tests:     "^TestParkTakesSharesInTurns$",
	},
	{
		// killed: with limit 1 the second pick gets a again: require.Empty(again.Robot) fails
		Name:      "robot-limit-off-by-one",
		Invariant: "robot windows: a robot with limit sends in its window is not picked",
		File:      "store/lua/robot_pick.lua",
		From:      "elseif count < limit then",
		To:        "elseif count <= limit then",
		Package:   "./store",
		Tests:     "^(TestRobotPoolGuardHoldsTheSlotLonger|TestRobotPoolPicksLeastUsedThenWaits)$",
	},
	{
		// killed: the wait is one window, not window+guard: require.InDelta((window+guard).Milliseconds(), ...) fails
		Name:      "robot-wait-forgets-guard",
		Invariant: "robot windows: a full robot's slot frees window + guard after its oldest send",
		File:      "store/lua/robot_pick.lua",
		From:      "local w = freesIn(tonumber(oldest[2]), window + guard)",
		To:        "local w = freesIn(tonumber(oldest[2]), window)",
		Package:   "./store",
		Tests:     "^TestRobotPoolGuardHoldsTheSlotLonger$",
	},
	{
		// killed: the bucket of 2 never empties, so the third paced pick gets a: require.Empty(p.Robot, "the bucket is empty") fails
		Name:      "robot-pacing-spends-no-token",
		Invariant: "pacing: every paced pick spends a token of the group's bucket",
		File:      "store/lua/robot_pick.lua",
		From: `  if pacing > 0 and rate > 0 then
    tokens = tokens - 1
    keepTokens()
  end
  local probe`,
		To: `  if pacing > 0 and rate > 0 then
    keepTokens()
  end
  local probe`,
		Package: "./store",
		Tests:   "^TestRobotPoolPacesPicks$",
	},
	{
		// killed: StepDue(first, 1) after Resolve is granted: require.False(send, "a step due after the resolve is not sent") fails
		Name:      "episode-step-after-resolve",
		Invariant: "episodes: a step that falls due after its episode resolved is not granted",
		File:      "store/lua/episode_step.lua",
		From:      "if state ~= 'pending' then",
		To:        "if state == 'acked' then",
		Package:   "./store",
		Tests:     "^TestEpisodeLifecycle$",
	},
	{
		// killed: Ack with the first episode's seq acks the new one: require.Equal("none", end.Result) fails
		Name:      "episode-ack-any-episode",
		Invariant: "episodes: an acknowledgement of an earlier episode (old link) changes nothing",
		File:      "store/lua/episode_end.lua",
		From:      "if not state or (ARGV[3] ~= '' and seq ~= ARGV[3]) then",
		To:        "if not state then",
		Package:   "./store",
		Tests:     "^TestEpisodeLifecycle$",
	},
	{
		// killed: the firing right after the resolve starts a new episode: require.Equal("busy", f.Result) fails
		Name:      "episode-fire-ignores-outbox",
		Invariant: "episodes: a new episode does not start while the last one's outbox (cancel, resolution) is not carried out",
		File:      "store/lua/episode_fire.lua",
		From:      "if state and (ep[4] or ep[5] or ep[6] or ep[7]) then",
		To:        "if false then",
		Package:   "./store",
		Tests:     "^TestEpisodeLifecycle$",
	},
	{
		// killed: the repeat at t0+window gets the first id: require.Equal("repeat", id) fails
		Name:      "dedupe-window-inclusive",
		Invariant: "at-once dedupe: a copy exactly one window after the first copy (by the caller's clock) is a new event",
		File:      "store/lua/dedupe_once.lua",
		From:      "tonumber(ARGV[2]) < tonumber(string.sub(rec, sep + 1))",
		To:        "tonumber(ARGV[2]) <= tonumber(string.sub(rec, sep + 1))",
		Package:   "./store",
		Tests:     "^TestDedupeOnceByTheCallersClock$",
	},
	{
		// killed: the notification whose alert fired again gets the first id: require.NotEqual(id, out["id"]) fails
		Name:      "immediate-id-ignores-start",
		Invariant: "at-once dedupe: an alert that fired again (a new start) makes a new notification with a new RD_ID",
		File:      "ingress/alertmanager.go",
		From:      `return a.Fingerprint + "@" + strconv.FormatInt(a.StartsAt.UnixMilli(), 10)`,
		To:        "return a.Fingerprint",
		Package:   "./ingress",
		Tests:     "^TestAlertmanagerImmediate$",
	},
	{
		// killed: Cancel("inflight") tombstones it and answers 4: require.Equal(store.CancelTooLate, r) fails
		Name:      "cancel-in-flight",
		Invariant: "cancel: an alert in flight (being sent) is too late to cancel and gets no tombstone",
		File:      "store/lua/wheel_cancel.lua",
		From: `if redis.call('ZSCORE', KEYS[2], id) then
  return 2
end`,
		To: `if false then
  return 2
end`,
		Package: "./store",
		Tests:   "^TestWheelStageCancel$",
	},
	{
		// killed: no tombstone for 'waiting': require.InDelta(2h, tombstoneTTL("waiting")) fails (and the redelivered Put is stored)
		Name:      "cancel-without-tombstone",
		Invariant: "cancel: a removed waiting alert leaves a tombstone so a redelivered copy is refused",
		File:      "store/lua/wheel_cancel.lua",
		From: `  redis.call('HDEL', KEYS[8], id)
  redis.call('SET', KEYS[5], now, 'PX', ARGV[2])
  pending_drop(`,
		To: `  redis.call('HDEL', KEYS[8], id)
  pending_drop(`,
		Package: "./store",
		Tests:   "^TestWheelStageCancel$",
	},
	{
		// killed: moving 'later' to an hour ago answers an hour ago: require.False(got.DueAt.Before(before)) fails
		Name:      "reschedule-into-the-past",
		Invariant: "reschedule: a due time in the past means Redis now, never earlier",
		File:      "store/lua/wheel_reschedule.lua",
		From:      "local due = math.max(tonumber(ARGV[2]), now)",
		To:        "local due = tonumber(ARGV[2])",
		Package:   "./store",
		Tests:     "^TestWheelStageReschedule$",
	},
	{
		// killed: 'r-later', moved to 18s while hopping, takes the 10s level with 8s left and comes back 2s past its due time: cameBackInTime's require.False fails
		Name:      "hop-overshoots",
		Invariant: "reschedule: a hop never comes back after the due time (a level is never longer than the remainder)",
		File:      "scheduler/plan.go",
		From:      "if levels[i] <= remaining {",
		To:        "if levels[i] <= remaining+2*time.Second {",
		Package:   "./scheduler",
		Tests:     "^TestRescheduleWhileHopping$",
	},
	{
		// killed: the claim whose reply was lost, Redis then out of reach for three leases, is not repeated: waitAll reports 3 of 3 never handed off
		Name:      "unknown-claim-not-repeated",
		Invariant: "fences: a claim whose outcome is unknown is repeated with its token until known, or its entries stay in flight under a live replica's forgotten claim",
		File:      "scheduler/handoff.go",
		From:      "if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {",
		To:        "if true {",
		Package:   "./scheduler",
		Tests:     "^TestClaimWhoseOutcomeWasLostIsRepeated$",
	},
	{
		// killed: t2's ClaimDue takes a and b again: require.Empty(again, "claimed rows stay hidden during the lease") fails
		Name:      "failed-claim-ignores-lease",
		Invariant: "failed_sends: a row claimed under a running lease is not claimed by another retry job",
		File:      "store/sql/failed_claim_due.sql",
		From:      "AND (lease_until IS NULL OR lease_until <= now())",
		To:        "AND TRUE",
		Package:   "./store",
		Tests:     "^TestFailedSendsClaimDue$",
	},
	{
		// killed: the file with newt is never applied: require.Eventually(accepted("reload-1"), "the added target is in force") fails
		Name:      "reload-never-applies",
		Invariant: "change without a restart: a changed configuration file that loads is applied",
		File:      "app/reload.go",
		From:      "if d := contentDigest(raw, files); d == digest {",
		To:        "if d := contentDigest(raw, files); true || d == digest {",
		Package:   "./app",
		Tests:     "^TestServeReloadsItsConfiguration$",
	},
	{
		// killed: a hop marked sendOn goes round robin, to this replica's own queues too: require.False(owned[q.QueueId]) fails
		Name:      "sent-on-to-own-queue",
		Invariant: "a replica never decides for a configuration it does not have: an alert sent on for another replica goes to another replica's queue",
		File:      "scheduler/allocate.go",
		From:      "if msg.Queue == sendOn {",
		To:        "if false {",
		Package:   "./scheduler",
		Tests:     "^TestSentOnHopsGoToAnotherReplicasQueue$",
	},
	{
		// killed: B's claim for ops takes newt's and gone's rows too: require.Equal([]int64{ops}, rowIDs(got), "B has ops only") fails
		Name:      "failed-claim-ignores-targets",
		Invariant: "a replica never decides for a configuration it does not have: the retry job claims only rows of its own targets",
		File:      "store/sql/failed_claim_due.sql",
		From:      "AND ($4::text[] IS NULL OR target = ANY($4::text[]))",
		To:        "AND ($4::text[] IS NOT NULL OR TRUE)",
		Package:   "./store",
		Tests:     "^TestFailedSendsClaimOnlyTheirTargets$",
	},
	{
		// killed: B records newt's due alerts as rejected: require.Eventually(rows("pending") == n) fails
		Name:      "handoff-decides-for-a-target-elsewhere",
		Invariant: "a replica never decides for a configuration it does not have: a due alert for a target another replica has waits for it",
		File:      "delivery/deliverer.go",
		From:      "if !known || ago > d.opts.UnknownTargetWait {",
		To:        "if true {",
		Package:   "./app",
		Tests:     "^TestTargetOfAReplicaAwayWaitsForIt$",
	},
	{
		// killed: the zombie's Confirm after the sweeper took the row succeeds: require.ErrorIs(fs.Confirm(id, "zombie"), ErrNotHeld) fails
		Name:      "failed-confirm-ignores-claim",
		Invariant: "failed_sends fence: only the claim that holds a pending row may confirm (send) it",
		File:      "store/sql/failed_confirm.sql",
		From:      "RETURNING claimed_by IS NOT DISTINCT FROM $2 AND status = 'pending'",
		To:        "RETURNING status = 'pending'",
		Package:   "./store",
		Tests:     "^TestFailedSendsClaimsAreFenced$",
	},
	{
		// killed: MarkRetry by t2, which never held b, returns nil: require.ErrorIs(..., ErrNotHeld, "t2 never held b") fails
		Name:      "failed-settle-unfenced",
		Invariant: "failed_sends fence: a settle that changed no row (the claim lost it) is ErrNotHeld",
		File:      "store/failedsends.go",
		From:      "if tag.RowsAffected() == 0 {",
		To:        "if tag.RowsAffected() < 0 {",
		Package:   "./store",
		Tests:     "^TestFailedSendsClaimDue$",
	},
	{
		// killed: the 2-day-old 'young' rows go too: require.Equal(map{delivered:3,...}, pass.Deleted) fails (4 each)
		Name:      "failed-purge-retention-sign",
		Invariant: "failed_sends retention: only final rows older than the retention are purged",
		File:      "store/sql/failed_purge.sql",
		From:      "AND updated_at < now() - $1::interval)",
		To:        "AND updated_at < now() + $1::interval)",
		Package:   "./store",
		Tests:     "^TestPurgeDeletesOnlyWhatsRetentionIsOver$",
	},
	{
		// killed: 40s into a minute's window the first two sends are forgotten: require.Equal(130101, ...) fails (errcode 0)
		Name:      "chatsim-half-window",
		Invariant: "simulator rule: a robot's sends count over its whole window",
		File:      "sender/chatsim/server.go",
		From:      "cut := now.Add(-s.opts.Window)",
		To:        "cut := now.Add(-s.opts.Window / 2)",
		Package:   "./sender/chatsim",
		Tests:     "^TestWindowSlidesOverTheWholeWindow$",
	},
	{
		// killed: the sixth send in one second is accepted: require.Equal(reply{400, 9499}, ...) fails
		Name:      "chatsim-per-second-off-by-one",
		Invariant: "simulator rule: a robot's per-second limit (Feishu's 5 per second) refuses the sixth send in a second",
		File:      "sender/chatsim/server.go",
		From:      "case l.PerSecond > 0 && recent >= l.PerSecond:",
		To:        "case l.PerSecond > 0 && recent > l.PerSecond:",
		Package:   "./sender/chatsim",
		Tests:     "^TestFeishuRules$",
	},
	{
		// killed: case 'one abandoned request excuses one extra, not two' gets timeout:2, unexplained:0: require.Equal(c.want, judge(...)) fails
		Name:      "judge-timeout-excuses-many",
		Invariant: "fault-suite judge: one abandoned (timed-out) request excuses at most one extra copy",
		File:      "internal/chaos/ambiguity.go",
		From: `					timeouts--
					out.timeout++`,
		To:      `					out.timeout++`,
		Package: "./internal/chaos",
		Tests:   "^TestJudgeDuplicates$",
	},
	{
		Name:      "moves-not-announced",
		Invariant: "reschedule: a move of a waiting alert is announced to the replica whose wheel holds its timer",
		File:      "store/lua/wheel_reschedule.lua",
		From:      "redis.call('PUBLISH', ARGV[5], id .. ' ' .. dues)",
		To:        "-- not announced",
		Package:   "./store",
		Tests:     "^TestRescheduleIsRecordedAndAnnounced$",
	},
	{
		Name:      "release-batch-loses-lost",
		Invariant: "release: each hand-off released in a batch learns whether its own claim was lost",
		File:      "scheduler/release.go",
		From:      "req.done(err == nil && lost[i], err)",
		To:        "req.done(err == nil && !lost[i], err)",
		Package:   "./scheduler",
		Tests:     "^TestReleasesFinishingTogetherShareACall$",
	},
	{
		// killed: a delivered alert stays counted: require.Equal(int64(len(want)), c.Total) fails
		Name:      "release-keeps-listed",
		Invariant: "the list of pending alerts: a hand-off's release unlists the alert in the same step",
		File:      "store/lua/wheel_release.lua",
		From:      "  redis.call('ZREM', KEYS[10], unpack(unlist))",
		To:        "  -- not unlisted",
		Package:   "./store",
		Tests:     "^TestPendingIndexIsExact$",
	},
	{
		// killed: the traceless alert stays counted for its target: require.Equal(store.PendingCounts{…}, c) fails
		Name:      "release-reads-the-target-from-the-trace",
		Invariant: "the list of pending alerts: a hand-off's release unlists the alert from its target's count by the target it was given, trace or no trace",
		File:      "store/lua/wheel_release.lua",
		From:      "  if tf[2] == '' then",
		To:        "  if true then",
		Package:   "./store",
		Tests:     "^TestWheelStageReleaseTakesTheEntrysTargetAndDueTime$",
	},
	{
		// killed: the far move's settle commits after the move within reach: require.Equal(t, store.RescheduleTooLate, got.Result) fails
		Name:      "reschedule-keeps-an-earlier-generation",
		Invariant: "cancel and reschedule: the last move accepted wins; an earlier move's copy not settled yet never undoes it",
		File:      "store/lua/wheel_reschedule.lua",
		From:      "    redis.call('HSET', KEYS[8], 'decided', string.format('%d', nxt))",
		To:        "    -- not overruled",
		Package:   "./store",
		Tests:     "^TestTheLastMoveAcceptedWins$",
	},
	{
		// killed: a hopping alert cancelled stays listed: require.Equal(int64(len(want)), c.Total) fails
		Name:      "cancel-keeps-hopping-listed",
		Invariant: "the list of pending alerts: a cancel of a hopping alert unlists it with its tombstone",
		File:      "store/lua/wheel_cancel.lua",
		From:      "pending_drop(KEYS[10], KEYS[11], id, redis.call('HGET', KEYS[9], 'tgt'))\nreturn 4",
		To:        "return 4",
		Package:   "./store",
		Tests:     "^TestPendingIndexIsExact$",
	},
	{
		// killed: a late hop note lists the cancelled alert again: require.Equal([]string{"near", "far"}, ...) fails
		Name:      "hop-note-lists-cancelled",
		Invariant: "the list of pending alerts: a hop's note never lists an alert that has a cancel tombstone",
		File:      "store/lua/trace_hop.lua",
		From:      "if redis.call('EXISTS', KEYS[3]) == 0 then",
		To:        "if true then",
		Package:   "./store",
		Tests:     "^(TestPendingIndexIsExact|TestPendingListsAndCounts)$",
	},
	{
		// killed: the undecided copy's hop note points the trace at its message: require.Equal("OM-recall", om) fails
		Name:      "stale-hop-note-written",
		Invariant: "reschedule earlier while hopping: only the live generation's hop notes touch the trace",
		File:      "store/lua/trace_hop.lua",
		From:      "if tonumber(ARGV[10]) ~= tonumber(redis.call('HGET', KEYS[6], 'live') or '0') then",
		To:        "if false then",
		Package:   "./store",
		Tests:     "^TestWheelStageRecallsAHoppingAlert$",
	},
	{
		// killed: the alert is listed at the time it no longer has: the map of listed due times differs
		Name:      "recall-keeps-old-due-listed",
		Invariant: "the list of pending alerts: a copy's settle moves the alert in the list to its new due time",
		File:      "store/lua/wheel_requeue.lua",
		From:      "  pending_note(KEYS[12], KEYS[13], id, ARGV[3], redis.call('HGET', KEYS[6], 'tgt'))",
		To:        "  -- not moved in the list",
		Package:   "./store",
		Tests:     "^TestWheelStageRecallsAHoppingAlert$",
	},
	{
		// killed: the copy of the new generation is published due at the old time: the alert is handed off late, at the due time it no longer has
		Name:      "recall-publishes-the-old-time",
		Invariant: "reschedule earlier while hopping: the copy read back is published at the new due time",
		File:      "failed/reschedule.go",
		From:      "_, err := r.Publisher.PublishCopy(ctx, wire.Copy{ID: q.ID, Target: msg.GetProperty(wire.PropTarget), At: q.DueAt,",
		To:        "_, err := r.Publisher.PublishCopy(ctx, wire.Copy{ID: q.ID, Target: msg.GetProperty(wire.PropTarget), At: in.DueAt,",
		Package:   "./app",
		Tests:     "^TestRescheduleByTheCLIIsExact$",
	},
	{
		// killed: a generation no reschedule allocated is settled instead of dropped: require.Equal(store.PutStale, put) fails
		Name:      "unallocated-generation-settles",
		Invariant: "RD_GEN from a producer grants nothing: a generation no reschedule allocated is stale, it cannot displace the alert",
		File:      "store/lua/wheel_put.lua",
		From:      "if gen > tonumber(gens[2] or '0') and gen <= tonumber(gens[3] or '0') then",
		To:        "if gen > tonumber(gens[2] or '0') then",
		Package:   "./store",
		Tests:     "^TestWheelStageRecallsAHoppingAlert$",
	},
	{
		// killed: another principal's message with the id is noted as the alert's last hop: require.Equal("OM-recall", om) fails
		Name:      "foreign-hop-note-written",
		Invariant: "a message of another principal with the same id is never taken for the alert's hop (never read back as it)",
		File:      "store/lua/trace_hop.lua",
		From:      "if who and who ~= ARGV[7] then",
		To:        "if false then",
		Package:   "./store",
		Tests:     "^TestWheelStageRecallsAHoppingAlert$",
	},
	{
		// killed: a principal takes the id of an alert published to the topic directly: require.Equal(http.StatusForbidden, code) fails
		Name:      "publish-ignores-the-stage",
		Invariant: "an id the wheel stage holds as another's (a topic alert, another principal's) is never taken by a principal's publish",
		File:      "store/lua/principal_publish.lua",
		From:      "if tr[1] and (tr[2] or '') ~= ARGV[4] then",
		To:        "if false then",
		Package:   "./ingress",
		Tests:     "^TestPrincipalsCannotTakeAnIDTheStageHolds$",
	},
	{
		// killed: with several shards the trace is not looked at: require.Equal(http.StatusForbidden, code) fails in "3 shards"
		Name:      "sharded-publish-ignores-the-stage",
		Invariant: "an id the wheel stage holds as another's is never taken, whatever the number of shards",
		File:      "store/producers.go",
		From:      "args = append(args, who) // the script weighs it against the owner record, after the rate",
		To:        "_ = who",
		Package:   "./ingress",
		Tests:     "^TestPrincipalsCannotTakeAnIDTheStageHolds$",
	},
	{
		// killed: a principal with others moving another's alert leaves the owner's record to end before the alert: require.Greater(ttl, 200h) fails
		Name:      "move-leaves-the-owner-short",
		Invariant: "an alert is its owner's as long as it waits, whoever moved it",
		File:      "store/lua/principal_extend.lua",
		From:      "if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[1]) then",
		To:        "if false then",
		Package:   "./ingress",
		Tests:     "^TestMovingAnothersAlertKeepsItsOwner$",
	},
	{
		// killed: a message published to the topic directly under a step's id takes it: require.Eventually(rejected_bad_id) fails
		Name:      "service-ids-unproven",
		Invariant: "only the service's proven messages carry its own ids (esc-, am-): a squatter never takes a step's id",
		File:      "scheduler/consumer.go",
		From:      `case principal == "" && a.Principal != "", principal != "" && a.Principal == principal:`,
		To:        `case principal == "" || principal != "":`,
		Package:   "./app",
		Tests:     "^TestAStepsIDCannotBeTakenFromTheTopic$",
	},
	{
		// killed: a replica judges an open episode by its own policy: B refuses A's step 0 (require.NoError fails)
		Name:      "episode-terms-ignored",
		Invariant: "an episode runs the policy it started with, whichever replica judges its steps (a policy rolled out replica by replica)",
		File:      "escalation/escalation.go",
		From:      "	if len(ep.Terms) > 0 {",
		To:        "	if false {",
		Package:   "./escalation",
		Tests:     "^TestAnEpisodeRunsThePolicyItStartedWith$",
	},
	{
		// killed: a move that names no one lets a step due early through: require.ErrorContains(err, "forged_mark") fails
		Name:      "anonymous-move-trusted",
		Invariant: "a step due before its time is sent only when a reschedule by someone named moved it there",
		File:      "store/trace.go",
		From:      `if len(fields) < 4 || fields[3] == "" || fields[2] != trace["due"] {`,
		To:        `if len(fields) < 4 || fields[2] != trace["due"] {`,
		Package:   "./escalation",
		Tests:     "^TestAStepMovedEarlierIsSent$",
	},
	{
		// killed: a replica with another redis.shards starts on a deployment that is not drained: require.ErrorIs(err, store.ErrShardsChanged) fails
		Name:      "shard-count-taken-undrained",
		Invariant: "a replica with another shard count than the deployment's never starts while the wheel stage holds anything",
		File:      "store/deployment.go",
		From:      "	if left != \"\" {",
		To:        "	if false {",
		Package:   "./store",
		Tests:     "^TestClaimShardsRefusesAnotherCountUntilDrained$",
	},
	{
		// killed: a sent alert, or a recorded corrupt entry, whose release has not landed is no longer counted as being handed off: require.Equal([]string{"sent"}, p.handingOff()) fails
		Name:      "sent-unlisted-before-its-release",
		Invariant: "an alert sent (or a corrupt entry recorded) stays this replica's, kept at a stop's hand-back, until its release lands",
		File:      "scheduler/handoff.go",
		From:      "	p.running.add(e.ID) // this replica's until its release lands\n",
		To:        "",
		Package:   "./scheduler",
		Tests:     "^(TestAStopWaitsForTheReleasesOfWhatWasSent|TestAQuarantinedEntryIsHeldUntilItsReleaseLands)$",
	},
	{
		// killed: the stop returns before the queued release lands: require.False(waited) fails
		Name:      "stop-skips-the-releases",
		Invariant: "a graceful stop waits for the releases of what it sent before it hands back what is left",
		File:      "scheduler/handoff.go",
		From:      "p.adopting.running.Wait(); p.releases.wait(); close(done)",
		To:        "p.adopting.running.Wait(); close(done)",
		Package:   "./scheduler",
		Tests:     "^TestAStopWaitsForTheReleasesOfWhatWasSent$",
	},
	{
		// killed: a hand-off past the bound does not wait for a slot: require.False(returned) fails; every alert of the burst is sent: require.Equal(releaseOutstanding, rec.countAll(ids)) fails
		Name:      "releases-unbounded",
		Invariant: "at most releaseOutstanding hand-offs are sent and not yet released: what a kill can leave sent without its release is bounded",
		File:      "scheduler/release.go",
		From:      "slots: make(chan struct{}, releaseOutstanding)",
		To:        "slots: make(chan struct{}, 1<<20)",
		Package:   "./scheduler",
		Tests:     "^(TestReleasesOutstandingAreBounded|TestWhatIsSentWithoutItsReleaseIsBounded)$",
	},
	{
		// killed: an alert put in phase 2 stays in its old shard whatever it holds: require.NotZero(moved) fails
		Name:      "move-never-places-new",
		Invariant: "a shard move: in phase 2 an alert with no record in its old shard is placed in its new one",
		File:      "store/lua/lib_route.lua",
		From:      "if phase ~= '2' then",
		To:        "if phase ~= '3' then",
		Package:   "./store",
		Tests:     "^TestAMovingStageKeepsEachAlertInOneShard$",
	},
	{
		// killed: an alert put by the old count is stored again in its new shard: require.Equal(PutDuplicate, put(w, b)) fails
		Name:      "move-skips-the-old-shard",
		Invariant: "a shard move: every script of an id runs first on its old shard, where its records may be",
		File:      "store/moving.go",
		From:      "if old := w.oldOf(id); old != nil {\n\t\tguarded",
		To:        "if old := w.oldOf(id); old != nil && false {\n\t\tguarded",
		Package:   "./store",
		Tests:     "^TestAMovingStageKeepsEachAlertInOneShard$",
	},
	{
		// killed: the released claims of alerts of the old count are released in their new shard and stay in flight: require.Zero(waiting+inflight) fails
		Name:      "move-releases-by-id",
		Invariant: "a shard move: a claim is confirmed, given back and released in the shard it was taken in",
		File:      "store/wheelstage.go",
		From:      "if c.home != nil {",
		To:        "if c.home != nil && false {",
		Package:   "./store",
		Tests:     "^TestAMovingStageKeepsEachAlertInOneShard$",
	},
	{
		// killed: phase 2 begins while replica-a, live, acts in the old count alone: require.Equal(moving, rec) fails
		Name:      "move-advances-past-a-live-replica",
		Invariant: "a shard move: phase 2 begins only once every live replica scans both counts",
		File:      "store/lua/layout_advance.lua",
		From:      "    return cur\n  end\nend",
		To:        "  end\nend",
		Package:   "./store",
		Tests:     "^TestAShardMoveWaitsForEveryLiveReplica$",
	},
	{
		// killed: the replica settled in the old count stores "late-old" after phase 2 began: require.ErrorIs(err, store.ErrMovedOn) fails
		Name:      "move-never-fences",
		Invariant: "a shard move: a replica settled in the old count writes no id once phase 2 began",
		File:      "store/lua/lib_route.lua",
		From:      "if redis.call('GET', tag .. 'fence') == string.sub(phase, 3) then",
		To:        "if redis.call('GET', tag .. 'fence') == 'never' then",
		Package:   "./store",
		Tests:     "^TestAShardMoveWaitsForEveryLiveReplica$",
	},
	{
		// killed: the move settles while alerts placed the old way wait in {p}: require.Equal(rec.String(), same.String()) fails
		Name:      "move-settles-over-old-alerts",
		Invariant: "a shard move settles only once no alert placed the old way is left to hand off",
		File:      "store/moving.go",
		From:      "\t\t\tif w.oldOf(id) == s {",
		To:        "\t\t\tif w.oldOf(id) == s && false {",
		Package:   "./store",
		Tests:     "^TestAShardMoveWaitsForEveryLiveReplica$",
	},
}

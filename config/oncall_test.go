package config_test

import (
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the rotations name IANA zones; the tests must not depend on the host's zoneinfo

	"github.com/stretchr/testify/require"
)

// onCallTargets are targets of every kind for the escalation examples.
const onCallTargets = `
targets:
  ding:
    robots: [{name: r1, token: tok1}]
  wecom:
    kind: wecom
    robots: [{name: r1, token: tok2}]
  fei:
    kind: feishu
    robots: [{name: r1, token: tok3}]
  orders:
    topic: {name: order-events}
`

func TestOnCallFromFile(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+onCallTargets+`
escalations:
  db:
    steps:
      - {target: ding, mention: {rotation: primary}}
      - {after: 10m, target: fei, mention: {rotation: primary, users: [ou_lead]}}
      - {after: 30m, target: wecom, mention: {all: true, mobiles: ["13800000000"]}}
    repeat: {every: 15m, growth: 2, limit: 4}
  audit:
    steps: [{after: 1h, target: orders}]
    repeat: {every: 1h}
    reackAfter: 2h
rotations:
  primary:
    timezone: Asia/Shanghai
    start: "2025-01-06"
    handoff: "10:30"
    periodDays: 1
    members:
      - {name: alice, mobile: "13800000001", feishuOpenId: ou_a}
      - {name: bob, dingtalkUserId: bob01, wecomUserId: bob, feishuOpenId: ou_b}
    overrides:
      - {from: "2025-05-01T00:00:00+08:00", to: "2025-05-06T00:00:00+08:00", member: bob}
  secondary:
    start: "2025-01-06"
    members: [{name: carol, mobile: "13800000002"}]
`), noEnv)
	require.NoError(t, err)

	db := c.Escalations["db"]
	require.Len(t, db.Steps, 3)
	require.Equal(t, EscalationStep{After: 10 * time.Minute, Target: "fei",
		Mention: StepMention{Rotation: "primary", Users: []string{"ou_lead"}}}, db.Steps[1])
	require.Equal(t, &Repeat{Every: 15 * time.Minute, Growth: 2, Limit: 4}, db.Repeat)
	require.Equal(t, DefaultReackAfter, db.ReackAfter, "reackAfter's default")
	require.Equal(t, &Repeat{Every: time.Hour, Growth: 1, Limit: 3}, c.Escalations["audit"].Repeat, "growth's and limit's defaults")
	require.Equal(t, 2*time.Hour, c.Escalations["audit"].ReackAfter)

	require.Equal(t, Rotation{Timezone: "UTC", Start: "2025-01-06", Handoff: "09:00", PeriodDays: 7,
		Members: []Member{{Name: "carol", Mobile: "13800000002"}}}, c.Rotations["secondary"], "a rotation's defaults")
	require.Equal(t, "10:30", c.Rotations["primary"].Handoff)
	require.Equal(t, Override{From: "2025-05-01T00:00:00+08:00", To: "2025-05-06T00:00:00+08:00", Member: "bob"},
		c.Rotations["primary"].Overrides[0])

	back, err := Decode(strings.NewReader(c.Redacted()))
	require.NoError(t, err, "the on-call sections render back as valid YAML")
	require.Equal(t, c.Escalations, back.Escalations)
	require.Equal(t, c.Rotations, back.Rotations)
}

func TestOnCallWithDefaultsLeavesTheOriginalAlone(t *testing.T) {
	rotations := map[string]Rotation{"r": {Start: "2025-01-06"}}
	escalations := map[string]Policy{"p": {Repeat: &Repeat{Every: time.Minute}}}
	c := Config{Rotations: rotations, Escalations: escalations}.WithDefaults()
	require.Equal(t, "09:00", c.Rotations["r"].Handoff)
	require.Equal(t, 3, c.Escalations["p"].Repeat.Limit)
	require.Empty(t, rotations["r"].Handoff, "WithDefaults returns a copy")
	require.Zero(t, escalations["p"].Repeat.Limit, "WithDefaults returns a copy")
	require.Nil(t, Config{}.WithDefaults().Rotations)
}

func TestOnCallValidation(t *testing.T) {
	// rotation is a valid rotations section the cases below add to.
	const rotation = `
rotations:
  primary:
    start: "2025-01-06"
    members: [{name: alice, mobile: "13800000001"}, {name: bob, dingtalkUserId: bob01}]
`
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"no steps", rotation + `
escalations:
  db: {steps: []}
`, []string{"escalations.db.steps: at least one step is required"}},
		{"steps out of order", rotation + `
escalations:
  db:
    steps:
      - {after: 10m, target: ding}
      - {after: 5m, target: ding}
      - {after: 5m, target: ding}
      - {after: -1m, target: ding}
`, []string{
			"escalations.db.steps[1].after: must be after the step before it (10m0s), got 5m0s",
			"escalations.db.steps[2].after: must be after the step before it (5m0s), got 5m0s",
			"escalations.db.steps[3].after: must not be negative, got -1m0s",
		}},
		{"unknown target and rotation", rotation + `
escalations:
  db:
    steps:
      - {target: nowhere}
      - {after: 1m, target: ding, mention: {rotation: tertiary}}
      - {after: 2m}
`, []string{
			`escalations.db.steps[0].target: no target named "nowhere"`,
			`escalations.db.steps[1].mention.rotation: no rotation named "tertiary"`,
			"escalations.db.steps[2].target: required",
		}},
		{"mentions on a topic", rotation + `
escalations:
  db:
    steps:
      - {target: orders, mention: {rotation: primary}}
      - {after: 1m, target: orders, mention: {all: true}}
      - {after: 2m, target: orders}
`, []string{
			`escalations.db.steps[0].mention: target "orders" is a topic, where nobody can be mentioned`,
			`escalations.db.steps[1].mention: target "orders" is a topic`,
		}},
		{"bad ids and mobiles on feishu", rotation + `
escalations:
  db:
    steps:
      - {target: fei, mention: {mobiles: ["13800000000"], users: ["a b", ""]}}
`, []string{
			"escalations.db.steps[0].mention.mobiles: Feishu mentions by user id (users: its feishuOpenId)",
			`escalations.db.steps[0].mention.users[0]: "a b" is not a mobile number or user id`,
			`escalations.db.steps[0].mention.users[1]: "" is not a mobile number or user id`,
		}},
		{"rotation members without an id for the target's kind", rotation + `
escalations:
  db:
    steps:
      - {target: fei, mention: {rotation: primary}}
      - {after: 1m, target: wecom, mention: {rotation: primary}}
`, []string{
			`escalations.db.steps[0].mention.rotation: rotations.primary.members[0] ("alice") has no id target "fei" (feishu) ` +
				"can mention it by (feishuOpenId)",
			`escalations.db.steps[0].mention.rotation: rotations.primary.members[1] ("bob")`,
			`escalations.db.steps[1].mention.rotation: rotations.primary.members[1] ("bob") has no id target "wecom" (wecom) ` +
				"can mention it by (wecomUserId or mobile)",
		}},
		{"bad repeat", rotation + `
escalations:
  db:
    steps: [{target: ding}]
    repeat: {growth: 0.5, limit: 101}
    reackAfter: -1h
`, []string{
			"escalations.db.repeat.every: must be positive, got 0s",
			"escalations.db.repeat.growth: must be a number of at least 1 (1 keeps the repeats evenly spaced), got 0.5",
			"escalations.db.repeat.limit: must be between 1 and 100, got 101",
			"escalations.db.reackAfter: must be positive, got -1h0m0s",
		}},
		{"repeats beyond the horizon", rotation + `
escalations:
  db:
    steps: [{target: ding}, {after: 800h, target: ding}]
  long:
    steps: [{target: ding}]
    repeat: {every: 1h, growth: 3, limit: 100}
`, []string{
			"escalations.db.steps[1].after: 800h0m0s is beyond scheduler.horizon (720h0m0s)",
			"escalations.long.repeat: the last repeat would come more than scheduler.horizon (720h0m0s) after the episode's start",
		}},
		{"bad names", `
rotations:
  "on call": {start: "2025-01-06", members: [{name: a, mobile: "1"}]}
escalations:
  "db team": {steps: [{target: ding}]}
`, []string{
			`rotations.on call: a rotation name may hold letters, digits`,
			`escalations.db team: a policy name may hold letters, digits`,
		}},
		{"bad rotation", `
rotations:
  empty: {start: "2025-01-06"}
  primary:
    timezone: Mars/Olympus
    start: "2025-13-01"
    handoff: "9am"
    periodDays: -7
    members:
      - {name: alice}
      - {name: alice, mobile: "138 0000"}
      - {mobile: "13800000003"}
  local: {timezone: Local, members: [{name: a, mobile: "1"}]}
`, []string{
			"rotations.empty.members: at least one member is required",
			`rotations.primary.timezone: "Mars/Olympus" is not an IANA time zone`,
			`rotations.primary.start: "2025-13-01" is not a date YYYY-MM-DD`,
			`rotations.primary.handoff: "9am" is not a time of day HH:MM`,
			"rotations.primary.periodDays: must be at least 1, got -7",
			"rotations.primary.members[0]: a member needs at least one of mobile, dingtalkUserId, wecomUserId, feishuOpenId, slackUserId",
			`rotations.primary.members[1].name: "alice" is used twice in this rotation`,
			`rotations.primary.members[1].mobile: "138 0000" is not a mobile number or user id`,
			"rotations.primary.members[2].name: required",
			"rotations.local.timezone: name the zone (e.g. Asia/Shanghai): Local depends on the host",
			"rotations.local.start: required: the date of the first hand-off, YYYY-MM-DD",
		}},
		{"bad overrides", `
rotations:
  primary:
    start: "2025-01-06"
    members: [{name: alice, mobile: "1"}, {name: bob, mobile: "2"}]
    overrides:
      - {from: "2025-05-01T00:00:00+08:00", to: "2025-05-06T00:00:00+08:00", member: bob}
      - {from: "2025-05-05T00:00:00+08:00", to: "2025-05-07T00:00:00+08:00", member: alice}
      - {from: "2025-06-02T00:00:00Z", to: "2025-06-01T00:00:00Z", member: carol}
      - {from: "2025-06-02", to: "soon", member: bob}
`, []string{
			"rotations.primary.overrides[1]: overlaps rotations.primary.overrides[0]",
			"rotations.primary.overrides[2].to: must be after from (2025-06-02T00:00:00Z), got 2025-06-01T00:00:00Z",
			`rotations.primary.overrides[2].member: no member named "carol" in this rotation`,
			`rotations.primary.overrides[3].from: "2025-06-02" is not an RFC 3339 time`,
			`rotations.primary.overrides[3].to: "soon" is not an RFC 3339 time`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeFile(t, validYAML+onCallTargets+tc.yaml), noEnv)
			require.Error(t, err)
			for _, want := range tc.want {
				require.ErrorContains(t, err, "config: "+want)
			}
			require.Equal(t, len(tc.want), strings.Count(err.Error(), "config: "), "exactly the errors expected:\n%v", err)
		})
	}
}

func TestOnCallUnknownKeyIsAnError(t *testing.T) {
	_, err := Load(writeFile(t, validYAML+onCallTargets+`
escalations:
  db:
    steps: [{target: ding, mentions: {all: true}}]
`), noEnv)
	require.ErrorContains(t, err, "field mentions not found")
}

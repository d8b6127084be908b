package oncall

import (
	"testing"
	"time"
	_ "time/tzdata" // the tests name IANA zones and must not depend on the host's zoneinfo

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// members returns members named names, each with a mobile number.
func members(names ...string) []config.Member {
	out := make([]config.Member, len(names))
	for i, n := range names {
		out[i] = config.Member{Name: n, Mobile: "1380000000" + string(rune('0'+i))}
	}
	return out
}

// at parses an RFC 3339 time.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v
}

func TestRotationOnDuty(t *testing.T) {
	weekly := config.Rotation{Timezone: "Asia/Shanghai", Start: "2025-01-06", Members: members("a", "b", "c")} // 09:00, 7 days
	// 07:00 in Shanghai is 23:00 UTC the day before.
	early := config.Rotation{Timezone: "Asia/Shanghai", Start: "2025-01-06", Handoff: "07:00", PeriodDays: 1, Members: members("a", "b")}
	nightly := config.Rotation{Timezone: "Asia/Shanghai", Start: "2025-01-06", Handoff: "23:30", PeriodDays: 1, Members: members("a", "b")}
	// Europe/Berlin moves from CET (+01:00) to CEST (+02:00) at 02:00 on 30 March 2025,
	// and back at 03:00 on 26 October 2025.
	berlinWeekly := config.Rotation{Timezone: "Europe/Berlin", Start: "2025-03-24", Members: members("a", "b")}
	berlinDaily := config.Rotation{Timezone: "Europe/Berlin", Start: "2025-03-28", PeriodDays: 1, Members: members("a", "b", "c")}
	berlinAutumn := config.Rotation{Timezone: "Europe/Berlin", Start: "2025-10-20", Members: members("a", "b")}
	// 02:30 does not exist on 30 March in Berlin: that one hand-off lands near it, the
	// next ones at 02:30 again.
	berlinGap := config.Rotation{Timezone: "Europe/Berlin", Start: "2025-03-29", Handoff: "02:30", PeriodDays: 1, Members: members("a", "b")}
	utc := config.Rotation{Start: "2025-01-06", Handoff: "00:00", PeriodDays: 2, Members: members("solo")}

	for _, tc := range []struct {
		name     string
		rotation config.Rotation
		at       string
		want     string
	}{
		{"before the start", weekly, "2025-01-01T12:00:00+08:00", "a"},
		{"the minute before the first hand-off", weekly, "2025-01-06T08:59:59+08:00", "a"},
		{"the first hand-off", weekly, "2025-01-06T09:00:00+08:00", "a"},
		{"a second before the second hand-off", weekly, "2025-01-13T08:59:59+08:00", "a"},
		{"the second hand-off", weekly, "2025-01-13T09:00:00+08:00", "b"},
		{"the second hand-off, in UTC", weekly, "2025-01-13T01:00:00Z", "b"},
		{"the minute before, in UTC", weekly, "2025-01-13T00:59:00Z", "a"},
		{"the third period", weekly, "2025-01-26T23:00:00+08:00", "c"},
		{"round again, before", weekly, "2025-01-27T08:59:00+08:00", "c"},
		{"round again", weekly, "2025-01-27T09:00:00+08:00", "a"},
		{"a year on", weekly, "2026-01-05T09:00:00+08:00", "b"}, // hand-off 52
		{"the early hand-off before", early, "2025-01-07T06:59:00+08:00", "a"},
		{"the early hand-off", early, "2025-01-07T07:00:00+08:00", "b"},
		{"after the early hand-off, on the UTC date before", early, "2025-01-06T23:30:00Z", "b"},
		{"the day after a late hand-off", nightly, "2025-01-07T00:10:00+08:00", "a"},
		{"the late hand-off before", nightly, "2025-01-07T23:29:00+08:00", "a"},
		{"the late hand-off", nightly, "2025-01-07T23:30:00+08:00", "b"},
		{"Berlin: the minute before the hand-off after the March change", berlinWeekly, "2025-03-31T06:59:00Z", "a"}, // 08:59 CEST
		{"Berlin: the hand-off after the March change", berlinWeekly, "2025-03-31T07:00:00Z", "b"},                   // 09:00 CEST
		{"Berlin: 7×24h after the first hand-off is an hour late", berlinWeekly, "2025-03-31T07:30:00Z", "b"},
		{"Berlin: the first hand-off, in winter time", berlinWeekly, "2025-03-24T08:00:00Z", "a"},
		{"Berlin daily: the day before the change", berlinDaily, "2025-03-29T08:00:00Z", "b"}, // 09:00 CET
		{"Berlin daily: the change day, before", berlinDaily, "2025-03-30T06:59:59Z", "b"},
		{"Berlin daily: the change day", berlinDaily, "2025-03-30T07:00:00Z", "c"},                                     // 09:00 CEST
		{"Berlin: the minute before the hand-off after the October change", berlinAutumn, "2025-10-27T07:59:00Z", "a"}, // 08:59 CET
		{"Berlin: the hand-off after the October change", berlinAutumn, "2025-10-27T08:00:00Z", "b"},
		{"Berlin: a hand-off in the gap does not move the next", berlinGap, "2025-03-31T00:29:00Z", "b"}, // 02:29 CEST
		{"Berlin: the hand-off after the gap", berlinGap, "2025-03-31T00:30:00Z", "a"},
		{"one member is always on duty", utc, "2030-06-01T12:00:00Z", "solo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRotation("primary", tc.rotation)
			require.NoError(t, err)
			require.Equal(t, tc.want, r.OnDuty(at(t, tc.at)).Name)
		})
	}
}

func TestRotationOverrides(t *testing.T) {
	r, err := NewRotation("primary", config.Rotation{Timezone: "Asia/Shanghai", Start: "2025-01-06", Members: members("a", "b", "c"),
		Overrides: []config.Override{
			{From: "2025-01-08T00:00:00+08:00", To: "2025-01-09T00:00:00+08:00", Member: "b"},
			// across the hand-off from a to b
			{From: "2025-01-13T08:00:00+08:00", To: "2025-01-13T02:00:00Z", Member: "c"},
		}})
	require.NoError(t, err)
	for _, tc := range []struct{ at, want string }{
		{"2025-01-07T23:59:59+08:00", "a"},
		{"2025-01-08T00:00:00+08:00", "b"},
		{"2025-01-08T23:59:59+08:00", "b"},
		{"2025-01-09T00:00:00+08:00", "a"},
		{"2025-01-13T07:59:59+08:00", "a"},
		{"2025-01-13T08:00:00+08:00", "c"},
		{"2025-01-13T09:30:00+08:00", "c"},
		{"2025-01-13T10:00:00+08:00", "b"},
	} {
		require.Equal(t, tc.want, r.OnDuty(at(t, tc.at)).Name, tc.at)
	}
}

func TestNewRotationNamesTheKey(t *testing.T) {
	good := config.Rotation{Start: "2025-01-06", Members: members("a")}
	for _, tc := range []struct {
		name string
		edit func(*config.Rotation)
		want string
	}{
		{"no members", func(r *config.Rotation) { r.Members = nil }, "oncall: rotations.primary.members: at least one member"},
		{"period", func(r *config.Rotation) { r.PeriodDays = -1 }, "oncall: rotations.primary.periodDays: must be at least 1"},
		{"zone", func(r *config.Rotation) { r.Timezone = "Mars/Olympus" }, "oncall: rotations.primary.timezone: unknown time zone"},
		{"local zone", func(r *config.Rotation) { r.Timezone = "Local" }, "oncall: rotations.primary.timezone: name the zone"},
		{"start", func(r *config.Rotation) { r.Start = "06.01.2025" }, `oncall: rotations.primary.start: "06.01.2025" is not a date`},
		{"handoff", func(r *config.Rotation) { r.Handoff = "25:00" }, `oncall: rotations.primary.handoff: "25:00" is not a time`},
		{"override member", func(r *config.Rotation) {
			r.Overrides = []config.Override{{From: "2025-01-06T00:00:00Z", To: "2025-01-07T00:00:00Z", Member: "z"}}
		}, `oncall: rotations.primary.overrides[0].member: no member named "z"`},
		{"override from", func(r *config.Rotation) {
			r.Overrides = []config.Override{{From: "2025-01-06", To: "2025-01-07T00:00:00Z", Member: "a"}}
		}, `oncall: rotations.primary.overrides[0].from: "2025-01-06" is not an RFC 3339 time`},
		{"override to", func(r *config.Rotation) {
			r.Overrides = []config.Override{{From: "2025-01-06T00:00:00Z", To: "2025-01-06T00:00:00Z", Member: "a"}}
		}, "oncall: rotations.primary.overrides[0].to: \"2025-01-06T00:00:00Z\" is not an RFC 3339 time after from"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			_, err := NewRotation("primary", c)
			require.ErrorContains(t, err, tc.want)
		})
	}

	rs, err := NewRotations(map[string]config.Rotation{"primary": good, "secondary": good})
	require.NoError(t, err)
	require.Len(t, rs, 2)
	_, err = NewRotations(map[string]config.Rotation{"primary": good, "broken": {Members: members("a")}})
	require.ErrorContains(t, err, "oncall: rotations.broken.start")
}

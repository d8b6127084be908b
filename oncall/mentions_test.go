package oncall

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms" // every platform, DingTalk too, known to config
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

func TestMentions(t *testing.T) {
	alice := config.Member{Name: "alice", Mobile: "13800000001", IDs: map[string]string{"feishuOpenId": "ou_alice"}}
	bob := config.Member{Name: "bob", Mobile: "13800000002", IDs: map[string]string{"dingtalkUserId": "bob01", "wecomUserId": "bob"}}
	carol := config.Member{Name: "carol", IDs: map[string]string{"wecomUserId": "carol"}}
	primary, err := NewRotation("primary", config.Rotation{Start: "2025-01-06", PeriodDays: 1, Members: []config.Member{alice, bob, carol}})
	require.NoError(t, err)
	rotations := map[string]Rotation{"primary": primary}
	// The member on duty at each: hand-offs at 09:00 UTC daily.
	day := map[string]time.Time{
		"alice": time.Date(2025, 1, 6, 12, 0, 0, 0, time.UTC),
		"bob":   time.Date(2025, 1, 7, 12, 0, 0, 0, time.UTC),
		"carol": time.Date(2025, 1, 8, 12, 0, 0, 0, time.UTC),
	}
	rot := config.StepMention{Rotation: "primary"}

	for _, tc := range []struct {
		name    string
		mention config.StepMention
		kind    string
		onDuty  string
		want    sender.Mentions
		duty    OnDuty
	}{
		{"DingTalk by mobile without a DingTalk id", rot, config.KindDingTalk, "alice",
			sender.Mentions{Mobiles: []string{"13800000001"}}, OnDuty{alice, true}},
		{"DingTalk by user id first", rot, config.KindDingTalk, "bob",
			sender.Mentions{Users: []string{"bob01"}}, OnDuty{bob, true}},
		{"DingTalk: neither", rot, config.KindDingTalk, "carol", sender.Mentions{}, OnDuty{carol, false}},
		{"WeCom by user id first", rot, wecom.Kind, "bob", sender.Mentions{Users: []string{"bob"}}, OnDuty{bob, true}},
		{"WeCom by mobile without a WeCom id", rot, wecom.Kind, "alice",
			sender.Mentions{Mobiles: []string{"13800000001"}}, OnDuty{alice, true}},
		{"Feishu by open_id", rot, feishu.Kind, "alice", sender.Mentions{Users: []string{"ou_alice"}}, OnDuty{alice, true}},
		{"Feishu never by mobile", rot, feishu.Kind, "bob", sender.Mentions{}, OnDuty{bob, false}},
		{"a topic mentions nobody", rot, config.KindTopic, "bob", sender.Mentions{}, OnDuty{bob, false}},
		{"everyone, people and the rotation, each id once",
			config.StepMention{All: true, Users: []string{"lead", "bob01"}, Mobiles: []string{"13900000000"}, Rotation: "primary"},
			config.KindDingTalk, "bob",
			sender.Mentions{All: true, Users: []string{"lead", "bob01"}, Mobiles: []string{"13900000000"}}, OnDuty{bob, true}},
		{"the others stay when the member has no id", config.StepMention{All: true, Rotation: "primary"}, feishu.Kind, "carol",
			sender.Mentions{All: true}, OnDuty{carol, false}},
		{"no rotation", config.StepMention{Users: []string{"lead"}}, wecom.Kind, "alice",
			sender.Mentions{Users: []string{"lead"}}, OnDuty{}},
		{"a rotation not given", config.StepMention{Rotation: "secondary"}, wecom.Kind, "alice", sender.Mentions{}, OnDuty{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, duty := Mentions(tc.mention, tc.kind, rotations, day[tc.onDuty])
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.duty, duty)
		})
	}
}

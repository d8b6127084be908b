package oncall

import (
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

// OnDuty is the member of a rotation a step mentioned.
type OnDuty struct {
	// Member is the rotation's member on duty when the step is sent; the zero Member when
	// the step mentions no rotation, or one not among the rotations given.
	Member config.Member
	// Mentioned is false when Member has no id a target of the step's kind can mention
	// (or there is no Member): the mentions then leave the member out, and the caller
	// should say so, in the message or a log.
	Mentioned bool
}

// Mentions resolves m, the mention of a step sent at t to a target of kind
// (config.KindDingTalk, …): everyone when m.All, m.Users and m.Mobiles as given, and the
// member of rotations[m.Rotation] on duty at t by their id for kind
// (config.Member.MentionID: DingTalk's or WeCom's user id, else the mobile number;
// Feishu's open_id only). Each id appears once.
func Mentions(m config.StepMention, kind string, rotations map[string]Rotation, t time.Time) (sender.Mentions, OnDuty) {
	out := sender.Mentions{}.Add(sender.Mentions{All: m.All, Users: m.Users, Mobiles: m.Mobiles})
	rot, ok := rotations[m.Rotation]
	if m.Rotation == "" || !ok {
		return out, OnDuty{}
	}
	member := rot.OnDuty(t)
	user, mobile := member.MentionID(kind)
	if user == "" && mobile == "" {
		return out, OnDuty{Member: member}
	}
	out = out.Add(sender.Mentions{Users: []string{user}, Mobiles: []string{mobile}}) // Add skips the empty one
	return out, OnDuty{Member: member, Mentioned: true}
}

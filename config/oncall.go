package config

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Policy is an on-call escalation policy (escalations.NAME): the steps an episode pages
// through, from its start, until it is acknowledged or resolved.
type Policy struct {
	// Steps are sent in order, each After its offset from the episode's start. At least
	// one.
	Steps []EscalationStep `yaml:"steps" json:"steps"`
	// Repeat sends the last step again and again after it, until the episode ends or the
	// repeats run out. Default none: the last step is sent once.
	Repeat *Repeat `yaml:"repeat,omitempty" json:"repeat,omitempty"`
	// ReackAfter: an acknowledged episode that still fires this long after its
	// acknowledgement starts a new episode, from the first step. Default 24h.
	ReackAfter time.Duration `yaml:"reackAfter" json:"reackAfter"`
}

// EscalationStep is one step of a policy: a message to a target that mentions someone.
type EscalationStep struct {
	// After is the step's offset from the episode's start: 0 or more, each step's after
	// the step before it. Default 0 (at once).
	After time.Duration `yaml:"after" json:"after"`
	// Target is the name of the target (targets.NAME, of any kind) the step's message
	// goes to. Required.
	Target string `yaml:"target" json:"target"`
	// Mention says whom the message mentions; a topic target mentions nobody, so a step
	// to one must mention nobody. Default nobody.
	Mention StepMention `yaml:"mention" json:"mention"`
}

// StepMention is whom an escalation step mentions; its parts add up.
type StepMention struct {
	// All mentions everyone in the group chat. Default false.
	All bool `yaml:"all,omitempty" json:"all,omitempty"`
	// Users are user ids on the target's platform (DingTalk userId, WeCom userid, Feishu
	// open_id). Default none.
	Users []string `yaml:"users,omitempty" json:"users,omitempty"`
	// Mobiles are mobile numbers (DingTalk, WeCom; Feishu's bots cannot mention by
	// mobile). Default none.
	Mobiles []string `yaml:"mobiles,omitempty" json:"mobiles,omitempty"`
	// Rotation names a rotation (rotations.NAME): the step mentions whoever of it is on
	// duty when the step is sent, by that member's id for the target's platform, which
	// every member of the rotation must have. Default none.
	Rotation string `yaml:"rotation,omitempty" json:"rotation,omitempty"`
}

// Empty reports whether m mentions nobody.
func (m StepMention) Empty() bool {
	return !m.All && len(m.Users) == 0 && len(m.Mobiles) == 0 && m.Rotation == ""
}

// Repeat repeats a policy's last step.
type Repeat struct {
	// Every is the wait between the last step and its first repeat. Required, positive.
	Every time.Duration `yaml:"every" json:"every"`
	// Growth multiplies the wait from one repeat to the next: repeat n waits
	// Every × Growth^(n−1) after the one before it. At least 1. Default 1 (evenly spaced).
	Growth float64 `yaml:"growth" json:"growth"`
	// Limit is how many repeats are sent, 1 to MaxRepeatLimit. Default 3.
	Limit int `yaml:"limit" json:"limit"`
}

// MaxRepeatLimit is the largest escalations.NAME.repeat.limit Validate accepts.
const MaxRepeatLimit = 100

// After returns how long after the policy's last step its n-th repeat (n ≥ 1) is sent:
// Every × (1 + Growth + … + Growth^(n−1)). It saturates at the largest Duration rather
// than overflow.
func (r Repeat) After(n int) time.Duration {
	if r.Growth == 1 || n <= 1 {
		if n > 0 && r.Every > math.MaxInt64/time.Duration(n) {
			return math.MaxInt64
		}
		return r.Every * time.Duration(n)
	}
	sum, term := 0.0, 1.0
	for range n {
		sum += term
		term *= r.Growth
	}
	d := math.Round(float64(r.Every) * sum)
	if !(d < math.MaxInt64) { // NaN too

		return math.MaxInt64
	}
	return time.Duration(d)
}

// WithDefaults returns a copy of p with every unset field set to its default.
func (p Policy) WithDefaults() Policy {
	Default(&p.ReackAfter, DefaultReackAfter)
	if p.Repeat != nil {
		r := *p.Repeat
		Default(&r.Growth, DefaultRepeatGrowth)
		Default(&r.Limit, DefaultRepeatLimit)
		p.Repeat = &r
	}
	return p
}

// Rotation is an on-call rotation (rotations.NAME): its members take turns, handing off
// at Handoff local time every PeriodDays days from Start.
type Rotation struct {
	// Members take duty in this order, the first from Start's hand-off on (and before
	// it), then the next at each hand-off, round and round. At least one.
	Members []Member `yaml:"members" json:"members"`
	// Timezone is the IANA time zone (e.g. "Asia/Shanghai", "Europe/Berlin") of Start and
	// Handoff; hand-offs keep their local hour across daylight-saving changes.
	// Default "UTC".
	Timezone string `yaml:"timezone" json:"timezone"`
	// Start is the date of the first hand-off, "YYYY-MM-DD" in Timezone. Required.
	Start string `yaml:"start" json:"start"`
	// Handoff is the local time of every hand-off, "HH:MM" in Timezone. Default "09:00".
	Handoff string `yaml:"handoff" json:"handoff"`
	// PeriodDays is the number of days between two hand-offs, at least 1. Default 7.
	PeriodDays int `yaml:"periodDays" json:"periodDays"`
	// Overrides put another member on duty for a while (a swap, a holiday). Overrides
	// must not overlap. Default none.
	Overrides []Override `yaml:"overrides,omitempty" json:"overrides,omitempty"`
}

// The layouts of a rotation's Start and Handoff, for time.Parse.
const (
	RotationStartLayout   = "2006-01-02"
	RotationHandoffLayout = "15:04"
)

// WithDefaults returns a copy of r with every unset field set to its default.
func (r Rotation) WithDefaults() Rotation {
	Default(&r.Timezone, DefaultRotationTimezone)
	Default(&r.Handoff, DefaultRotationHandoff)
	Default(&r.PeriodDays, DefaultRotationPeriodDays)
	return r
}

// Member is a person of a rotation, with the ids the platforms mention them by.
type Member struct {
	// Name identifies the member in the rotation's overrides and in messages. Required,
	// unique within the rotation.
	Name string `yaml:"name" json:"name"`
	// Mobile is the member's mobile number, which the platforms that mention by mobile
	// number (DingTalk, WeCom) use when the member has no user id of theirs. Default none.
	Mobile string `yaml:"mobile,omitempty" json:"mobile,omitempty"`
	// IDs are the member's user ids on the chat platforms, each under its channel's
	// member key (ChatChannel.MemberID): dingtalkUserId (DingTalk's userId), wecomUserId
	// (WeCom's userid), feishuOpenId (Feishu's open_id, the only id its bots mention by),
	// slackUserId (Slack's member id, U…). Default none.
	IDs map[string]string `yaml:",inline" json:"ids,omitempty"`
}

// MentionID returns how a target of kind mentions m: by a user id or by a mobile number,
// at most one of the two set, both empty when m has no id that kind can mention. A chat
// channel takes the member's id under its member key, else, if it mentions by mobile
// number, the mobile number; a topic mentions nobody.
func (m Member) MentionID(kind string) (userID, mobile string) {
	c, ok := ChatChannelOf(kind)
	if !ok {
		return "", ""
	}
	if id := m.IDs[c.MemberID]; c.MemberID != "" && id != "" {
		return id, ""
	}
	if c.Mobiles {
		return "", m.Mobile
	}
	return "", ""
}

// Override puts Member on duty from From until To.
type Override struct {
	// From is when the override starts, an RFC 3339 time (e.g.
	// "2025-05-01T09:00:00+08:00"). Required.
	From string `yaml:"from" json:"from"`
	// To is when it ends (exclusive), an RFC 3339 time after From. Required.
	To string `yaml:"to" json:"to"`
	// Member is the name of the member on duty meanwhile, one of the rotation's.
	// Required.
	Member string `yaml:"member" json:"member"`
}

// validateOnCall checks the escalations and rotations sections.
func (c Config) validateOnCall(bad badFunc) {
	for _, name := range slices.Sorted(maps.Keys(c.Rotations)) {
		key := "rotations." + name
		if !validResourceName(name) {
			bad(key, "a rotation name may hold letters, digits, %%, -, _ and | only")
		}
		c.Rotations[name].validate(bad, key)
	}
	for _, name := range slices.Sorted(maps.Keys(c.Escalations)) {
		key := "escalations." + name
		if !validResourceName(name) {
			bad(key, "a policy name may hold letters, digits, %%, -, _ and | only")
		}
		c.Escalations[name].validate(bad, key, c)
	}
}

// validate checks policy key; c holds the targets, rotations and horizon it depends on.
func (p Policy) validate(bad badFunc, key string, c Config) {
	if len(p.Steps) == 0 {
		bad(key+".steps", "at least one step is required")
	}
	for i, s := range p.Steps {
		skey := fmt.Sprintf("%s.steps[%d]", key, i)
		switch {
		case s.After < 0:
			bad(skey+".after", "must not be negative, got %s", s.After)
		case i > 0 && s.After <= p.Steps[i-1].After:
			bad(skey+".after", "must be after the step before it (%s), got %s", p.Steps[i-1].After, s.After)
		case c.Scheduler.Horizon > 0 && s.After > c.Scheduler.Horizon:
			bad(skey+".after", "%s is beyond scheduler.horizon (%s), the longest delay accepted", s.After, c.Scheduler.Horizon)
		}
		s.validateTarget(bad, skey, c)
	}
	if p.ReackAfter <= 0 {
		bad(key+".reackAfter", "must be positive, got %s", p.ReackAfter)
	}
	r := p.Repeat
	if r == nil {
		return
	}
	ok := true
	if r.Every <= 0 {
		bad(key+".repeat.every", "must be positive, got %s", r.Every)
		ok = false
	}
	if r.Growth < 1 || math.IsInf(r.Growth, 0) || math.IsNaN(r.Growth) {
		bad(key+".repeat.growth", "must be a number of at least 1 (1 keeps the repeats evenly spaced), got %v", r.Growth)
		ok = false
	}
	if r.Limit < 1 || r.Limit > MaxRepeatLimit {
		bad(key+".repeat.limit", "must be between 1 and %d, got %d", MaxRepeatLimit, r.Limit)
		ok = false
	}
	if ok && len(p.Steps) > 0 && c.Scheduler.Horizon > 0 {
		last := p.Steps[len(p.Steps)-1].After
		if after := r.After(r.Limit); last >= 0 && last <= c.Scheduler.Horizon && after > c.Scheduler.Horizon-last {
			bad(key+".repeat", "the last repeat would come more than scheduler.horizon (%s) after the episode's start; "+
				"lower every, growth or limit", c.Scheduler.Horizon)
		}
	}
}

// validateTarget checks the target and the mentions of step key.
func (s EscalationStep) validateTarget(bad badFunc, key string, c Config) {
	m := s.Mention
	for _, ids := range []struct {
		key  string
		list []string
	}{{key + ".mention.users", m.Users}, {key + ".mention.mobiles", m.Mobiles}} {
		for i, id := range ids.list {
			if !mentionable(id) {
				bad(fmt.Sprintf("%s[%d]", ids.key, i), "%q is not a mobile number or user id", id)
			}
		}
	}
	var members []Member
	if m.Rotation != "" {
		rot, ok := c.Rotations[m.Rotation]
		if !ok {
			bad(key+".mention.rotation", "no rotation named %q", m.Rotation)
		}
		members = rot.Members
	}
	if s.Target == "" {
		bad(key+".target", "required (a target's name)")
		return
	}
	t, ok := c.Targets[s.Target]
	if !ok {
		bad(key+".target", "no target named %q", s.Target)
		return
	}
	kind := t.Channel()
	ch, _ := ChatChannelOf(kind)
	switch {
	case kind == KindTopic && !m.Empty():
		bad(key+".mention", "target %q is a topic, where nobody can be mentioned", s.Target)
		return
	case kind != KindTopic && !ch.Mobiles && len(m.Mobiles) > 0:
		bad(key+".mention.mobiles", "%s mentions by user id (users: its %s), not by mobile number", ch.Name, ch.MemberID)
	}
	for i, mem := range members {
		if id, mobile := mem.MentionID(kind); id == "" && mobile == "" {
			bad(key+".mention.rotation", "rotations.%s.members[%d] (%q) has no id target %q (%s) can mention it by (%s)",
				m.Rotation, i, mem.Name, s.Target, kind, ch.mentionIDs())
		}
	}
}

// mentionIDs names the member keys c mentions by, for errors.
func (c ChatChannel) mentionIDs() string {
	if c.Mobiles {
		return c.MemberID + " or mobile"
	}
	return c.MemberID
}

// mentionable reports whether id may be a mobile number or a user id in a mention.
func mentionable(id string) bool { return id != "" && !strings.ContainsAny(id, " \t\r\n@<>\"") }

// validate checks rotation key.
func (r Rotation) validate(bad badFunc, key string) {
	if len(r.Members) == 0 {
		bad(key+".members", "at least one member is required")
	}
	names := map[string]bool{}
	for i, m := range r.Members {
		mkey := fmt.Sprintf("%s.members[%d]", key, i)
		switch {
		case m.Name == "":
			bad(mkey+".name", "required")
		case names[m.Name]:
			bad(mkey+".name", "%q is used twice in this rotation", m.Name)
		}
		names[m.Name] = true
		keys := []string{"mobile"}
		for _, c := range ChatChannels() {
			if c.MemberID != "" {
				keys = append(keys, c.MemberID)
			}
		}
		ids := 0
		for _, k := range slices.Sorted(maps.Keys(m.IDs)) {
			if !slices.Contains(keys, k) {
				bad(mkey+"."+k, "unknown key (a member's ids are %s)", strings.Join(keys, ", "))
			}
		}
		for _, k := range keys {
			v := m.Mobile
			if k != "mobile" {
				v = m.IDs[k]
			}
			if v == "" {
				continue
			}
			ids++
			if !mentionable(v) {
				bad(mkey+"."+k, "%q is not a mobile number or user id", v)
			}
		}
		if ids == 0 {
			bad(mkey, "a member needs at least one of %s", strings.Join(keys, ", "))
		}
	}
	if r.Timezone == "Local" {
		bad(key+".timezone", "name the zone (e.g. Asia/Shanghai): Local depends on the host")
	} else if _, err := time.LoadLocation(r.Timezone); err != nil {
		bad(key+".timezone", "%q is not an IANA time zone (e.g. Asia/Shanghai, Europe/Berlin, UTC)", r.Timezone)
	}
	if r.Start == "" {
		bad(key+".start", "required: the date of the first hand-off, YYYY-MM-DD")
	} else if _, err := time.Parse(RotationStartLayout, r.Start); err != nil {
		bad(key+".start", "%q is not a date YYYY-MM-DD", r.Start)
	}
	if _, err := time.Parse(RotationHandoffLayout, r.Handoff); err != nil {
		bad(key+".handoff", "%q is not a time of day HH:MM", r.Handoff)
	}
	if r.PeriodDays < 1 {
		bad(key+".periodDays", "must be at least 1, got %d", r.PeriodDays)
	}
	type span struct{ from, to time.Time }
	var spans []span
	for i, o := range r.Overrides {
		okey := fmt.Sprintf("%s.overrides[%d]", key, i)
		if !names[o.Member] {
			bad(okey+".member", "no member named %q in this rotation", o.Member)
		}
		from, err := time.Parse(time.RFC3339, o.From)
		if err != nil {
			bad(okey+".from", "%q is not an RFC 3339 time (e.g. 2025-05-01T09:00:00+08:00)", o.From)
		}
		to, err2 := time.Parse(time.RFC3339, o.To)
		if err2 != nil {
			bad(okey+".to", "%q is not an RFC 3339 time (e.g. 2025-05-08T09:00:00+08:00)", o.To)
		}
		if err != nil || err2 != nil {
			spans = append(spans, span{})
			continue
		}
		if !to.After(from) {
			bad(okey+".to", "must be after from (%s), got %s", o.From, o.To)
			spans = append(spans, span{})
			continue
		}
		for j, s := range spans {
			if s.from.Before(to) && from.Before(s.to) {
				bad(okey, "overlaps %s.overrides[%d]: give each moment one member", key, j)
			}
		}
		spans = append(spans, span{from, to})
	}
}

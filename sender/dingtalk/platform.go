package dingtalk

import (
	_ "embed"
	"net/url"
	"strings"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

// Kind names DingTalk robot groups (targets.NAME.kind); a robot group that names no kind
// is one.
const Kind = config.KindDingTalk

// DefaultBaseURL is DingTalk's robot webhook endpoint.
const DefaultBaseURL = config.DefaultSenderBaseURL

// alertmanagerTemplate is the built-in template of Alertmanager notifications to
// DingTalk: a markdown message.
//
//go:embed alertmanager.tmpl
var alertmanagerTemplate string

// Platform is DingTalk's custom robots as everything outside this package knows them.
// DingTalk's settings are sender's own keys (sender.baseURL, sender.limit,
// sender.cooldown): its documented ten-minute lock-out is the cool-down.
var Platform = sender.Platform{
	Config: config.ChatChannel{
		Kind: Kind, Name: "DingTalk",
		Defaults: config.Platform{BaseURL: DefaultBaseURL, Limit: config.DefaultSenderLimit, Cooldown: config.DefaultSenderCooldown},
		MaxLimit: 20, Host: "oapi.dingtalk.com",
		Credential:     func(u *url.URL) string { return u.Query().Get("access_token") },
		CredentialName: "access_token parameter",
		Signs:          true, Keywords: true, MemberID: "dingtalkUserId", Mobiles: true,
	},
	New:      func(baseURL string) sender.Protocol { return New(baseURL) },
	Failures: failures,
	Template: alertmanagerTemplate,
	Escape:   Escape,
	Link:     sender.MarkdownLink,
	Sim:      SimRules{},
}

func init() { config.RegisterChatChannels(Platform.Config) }

// markup are the characters that open markup in DingTalk's markdown (tags, links,
// images), as HTML entities, which it shows as the characters.
var markup = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "[", "&#91;", "]", "&#93;")

// Escape makes label text safe in DingTalk markdown: it opens no tag, link or image.
func Escape(s string) string { return markup.Replace(s) }

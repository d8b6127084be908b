package wecom

import (
	_ "embed"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

// Kind names WeCom robot groups (targets.NAME.kind).
const Kind = "wecom"

// DefaultBaseURL is WeCom's robot webhook endpoint; the key goes in its query.
const DefaultBaseURL = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send"

// alertmanagerTemplate is the built-in template of Alertmanager notifications to
// WeCom: a markdown message.
//
//go:embed alertmanager.tmpl
var alertmanagerTemplate string

// Platform is WeCom's group robots as everything outside this package knows them: 20
// messages a minute, no signing and no keyword; a throttle whose length WeCom does not
// document, so the core learns it from a first rest of sender.wecom.cooldown.
var Platform = sender.Platform{
	Config: config.ChatChannel{
		Kind: Kind, Name: "WeCom", Section: "wecom",
		Defaults: config.Platform{BaseURL: DefaultBaseURL, Limit: 19, Cooldown: 5 * time.Second},
		MaxLimit: 20, Host: "qyapi.weixin.qq.com",
		Credential:     func(u *url.URL) string { return u.Query().Get("key") },
		CredentialName: "key parameter",
		MemberID:       "wecomUserId", Mobiles: true,
	},
	New:      func(baseURL string) sender.Protocol { return New(baseURL) },
	Failures: failures,
	Template: alertmanagerTemplate,
	Escape:   Escape,
	Link:     sender.MarkdownLink,
	Sim:      SimRules{},
}

func init() { config.RegisterChatChannels(Platform.Config) }

// markup are the characters that open markup in WeCom's markdown (<@userid> mentions,
// <font> tags, links), as HTML entities.
var markup = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "[", "&#91;", "]", "&#93;")

// Escape makes label text safe in WeCom markdown: it opens no mention, tag or link.
func Escape(s string) string { return markup.Replace(s) }

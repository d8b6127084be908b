package feishu

import (
	_ "embed"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

// Kind names Feishu bot groups (targets.NAME.kind).
const Kind = "feishu"

// DefaultBaseURL is Feishu's custom bot hook endpoint; the token follows it in the path.
const DefaultBaseURL = "https://open.feishu.cn/open-apis/bot/v2/hook"

// alertmanagerTemplate is the built-in template of Alertmanager notifications to Feishu:
// a card.
//
//go:embed alertmanager.tmpl
var alertmanagerTemplate string

// Platform is Feishu's custom bots as everything outside this package knows them: 100
// messages a minute and 5 a second, signing and keywords; mentions by open_id only.
var Platform = sender.Platform{
	Config: config.ChatChannel{
		Kind: Kind, Name: "Feishu", Section: "feishu",
		Defaults: config.Platform{BaseURL: DefaultBaseURL, Limit: 95, LimitPerSecond: 4, Cooldown: 5 * time.Second},
		MaxLimit: 100, MaxPerSecond: 5, Host: "open.feishu.cn",
		Credential: func(u *url.URL) string {
			_, tok, _ := strings.Cut(u.Path, "/hook/")
			return tok
		},
		CredentialName: "/hook/TOKEN path",
		Signs:          true, Keywords: true, MemberID: "feishuOpenId",
	},
	New:      func(baseURL string) sender.Protocol { return New(baseURL) },
	Failures: failures,
	Template: alertmanagerTemplate,
	Escape:   Escape,
	Link:     sender.MarkdownLink,
	Sim:      SimRules{},
}

func init() { config.RegisterChatChannels(Platform.Config) }

// markup are the characters that open markup in Feishu's texts and cards (<at> mentions,
// tags, links), as HTML entities.
var markup = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", "[", "&#91;", "]", "&#93;")

// Escape makes label text safe in Feishu's texts and cards: it opens no mention, tag or
// link.
func Escape(s string) string { return markup.Replace(s) }

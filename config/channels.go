package config

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ChatChannel is what the configuration knows of one chat channel (a chat platform's
// robots): enough to fill in its defaults and to validate its targets, robots, settings
// and mentions. Package config names no chat platform itself; each channel's package
// describes its own (sender.Platform), and the registry of channels (package
// sender/platforms) registers them here with RegisterChatChannels when it is linked, so
// that config stays at the bottom of the import graph.
type ChatChannel struct {
	// Kind names the channel in targets.NAME.kind ("wecom").
	Kind string
	// Name is how people call the platform, in errors ("WeCom").
	Name string
	// Section is the key of its settings under sender ("wecom"); "" for the channel whose
	// settings are sender's own keys (DingTalk: sender.baseURL, sender.limit,
	// sender.cooldown).
	Section string
	// Defaults are its settings' defaults: the webhook base URL, the limit per robot and
	// window, the limit per second (0: the platform has none), the first cool-down.
	Defaults Platform
	// MaxLimit is the platform's own limit per robot and minute; MaxPerSecond its limit per
	// robot and second (0: none). A configured limit above either is refused.
	MaxLimit, MaxPerSecond int
	// Host is the host of the platform's real webhook endpoint: against it, sender.window
	// must be at least a minute, as the platform counts.
	Host string
	// Credential takes a robot's credential from its webhook URL; "" when the URL holds
	// none. CredentialName says where it is, for errors ("key parameter").
	Credential     func(webhook *url.URL) string
	CredentialName string
	// CredentialPath says the credential is a path of several elements (Slack's
	// T…/B…/…), so it may hold slashes, but no empty or dot element.
	CredentialPath bool
	// Signs says its robots may have a signing secret; Keywords that they may have a
	// keyword.
	Signs, Keywords bool
	// MemberID is the key of a rotation member's id on the platform (Member.IDs, such as
	// "wecomUserId"); Mobiles says the platform mentions by mobile number too.
	MemberID string
	Mobiles  bool
}

var (
	chatMu       sync.RWMutex
	chatChannels []ChatChannel
)

// RegisterChatChannels makes the configuration know the chat channels cs, replacing any
// of the same kind. Package sender/platforms calls it for every channel it lists.
func RegisterChatChannels(cs ...ChatChannel) {
	chatMu.Lock()
	defer chatMu.Unlock()
	for _, c := range cs {
		chatChannels = slices.DeleteFunc(chatChannels, func(o ChatChannel) bool { return o.Kind == c.Kind })
		chatChannels = append(chatChannels, c)
	}
}

// ChatChannels returns the chat channels the configuration knows, in the order they were
// registered.
func ChatChannels() []ChatChannel {
	chatMu.RLock()
	defer chatMu.RUnlock()
	return slices.Clone(chatChannels)
}

// ChatChannelOf returns the chat channel of kind.
func ChatChannelOf(kind string) (ChatChannel, bool) {
	for _, c := range ChatChannels() {
		if c.Kind == kind {
			return c, true
		}
	}
	return ChatChannel{}, false
}

// Kinds returns every kind of target: the chat channels' and KindTopic.
func Kinds() []string {
	var out []string
	for _, c := range ChatChannels() {
		out = append(out, c.Kind)
	}
	return append(out, KindTopic)
}

// Settings returns the settings of chat channel c in s: its section's, or sender's own
// keys for the channel without one.
func (s Sender) Settings(c ChatChannel) Platform {
	if c.Section == "" {
		return Platform{BaseURL: s.BaseURL, Limit: s.Limit, Cooldown: s.Cooldown}
	}
	return s.Platforms[c.Section]
}

// withDefaults fills every registered channel's section of s with its defaults.
func (s Sender) withDefaults() Sender {
	platforms := make(map[string]Platform, len(s.Platforms))
	for k, v := range s.Platforms {
		platforms[k] = v
	}
	for _, c := range ChatChannels() {
		if c.Section == "" {
			continue
		}
		p := platforms[c.Section]
		Default(&p.BaseURL, c.Defaults.BaseURL)
		Default(&p.Limit, c.Defaults.Limit)
		Default(&p.LimitPerSecond, c.Defaults.LimitPerSecond)
		Default(&p.Cooldown, c.Defaults.Cooldown)
		platforms[c.Section] = p
	}
	s.Platforms = platforms
	return s
}

// validatePlatforms checks the section of every chat channel, and that every section
// under sender is one.
func (s Sender) validatePlatforms(bad badFunc) {
	sections := map[string]ChatChannel{}
	for _, c := range ChatChannels() {
		if c.Section != "" {
			sections[c.Section] = c
		}
	}
	for name, p := range s.Platforms {
		c, ok := sections[name]
		if !ok {
			known := make([]string, 0, len(sections))
			for k := range sections {
				known = append(known, k)
			}
			slices.Sort(known)
			bad("sender."+name, "unknown key (a chat channel's section is one of %s)", strings.Join(known, ", "))
			continue
		}
		p.validate(bad, "sender."+name, c)
	}
}

// validate checks the section key of chat channel c.
func (p Platform) validate(bad badFunc, key string, c ChatChannel) {
	baseKey, limitKey := key+".baseURL", key+".limit"
	if c.Section == "" {
		baseKey, limitKey = "sender.baseURL", "sender.limit"
	}
	u, err := url.Parse(p.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.User != nil {
		bad(baseKey, "%s must be an http:// or https:// URL without a query or a user (the robots' tokens are their own keys)",
			shownURL(u, err))
	}
	if p.Limit < 1 || p.Limit > c.MaxLimit {
		bad(limitKey, "must be between 1 and %d (%s's limit per robot and minute), got %d", c.MaxLimit, c.Name, p.Limit)
	}
	switch {
	case c.MaxPerSecond == 0 && p.LimitPerSecond != 0:
		bad(key+".limitPerSecond", "%s has no per-second limit; leave it 0", c.Name)
	case p.LimitPerSecond < 0 || p.LimitPerSecond > c.MaxPerSecond:
		bad(key+".limitPerSecond", "must be between 1 and %d (%s's limit per robot and second), got %d", c.MaxPerSecond, c.Name, p.LimitPerSecond)
	}
	if c.Section != "" && p.Cooldown <= 0 { // sender.cooldown is checked with sender's durations
		bad(key+".cooldown", "must be positive, got %s", p.Cooldown)
	}
}

// goodCredential reports whether tok can stand in c's webhook URLs: no whitespace or URL
// punctuation; slashes only between the elements of a path credential.
func (c ChatChannel) goodCredential(tok string) bool {
	if strings.ContainsAny(tok, " \t\r\n&?#") {
		return false
	}
	if !c.CredentialPath {
		return !strings.Contains(tok, "/")
	}
	for _, e := range strings.Split(tok, "/") {
		if e == "" || e == "." || e == ".." {
			return false
		}
	}
	return true
}

// windowFor checks sender.window against chat channel c's real endpoint, which counts
// per minute (a window under a second is refused anyway).
func (s Sender) windowFor(bad badFunc, c ChatChannel) {
	if c.Host == "" || s.Window >= time.Minute || s.Window < time.Second {
		return
	}
	if u, err := url.Parse(s.Settings(c).BaseURL); err == nil && strings.EqualFold(strings.TrimSuffix(u.Hostname(), "."), c.Host) {
		bad("sender.window", "%s counts per minute: the window must be at least 60s against %s, got %s", c.Name, u.Host, s.Window)
	}
}

// credential returns the credential of a robot of chat channel c: its token, or what c
// takes from it when it is a webhook URL. The error never contains the token.
func (c ChatChannel) credential(token Secret) (Secret, error) {
	v := strings.TrimSpace(token.Reveal())
	if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
		return Secret(v), nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", fmt.Errorf("the webhook URL does not parse")
	}
	tok := ""
	if c.Credential != nil {
		tok = c.Credential(u)
	}
	if tok == "" {
		return "", fmt.Errorf("the webhook URL has no %s", c.CredentialName)
	}
	return Secret(tok), nil
}

// shownURL is a base URL as an error may show it: its scheme, host and path, never its
// user or query (a webhook's access_token or key pasted into it), nothing when it is not
// a URL at all.
func shownURL(u *url.URL, err error) string {
	if err != nil {
		return "the value (not shown: not a URL)"
	}
	v := url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}
	shown := strconv.Quote(v.String())
	if u.User != nil || u.RawQuery != "" {
		shown += " (its user and query not shown)"
	}
	return shown
}

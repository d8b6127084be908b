package config

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"time"
)

// FieldError names the configuration key that is wrong and why.
type FieldError struct {
	Key    string // the YAML path, e.g. "scheduler.threshold"
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("config: %s: %s", e.Key, e.Reason) }

// badFunc reports one invalid key; each section's validate calls it for every problem.
type badFunc func(key, format string, args ...any)

// A Section is a top-level key of the configuration. A command validates only the
// sections it uses (ValidateSections, Load), so `rocketdelay migrate` needs a Postgres URL
// and nothing about RocketMQ or Redis.
type Section string

// The sections the commands name.
const (
	SectionLog         Section = "log"
	SectionRocketMQ    Section = "rocketmq"
	SectionScheduler   Section = "scheduler"
	SectionRedis       Section = "redis"
	SectionPostgres    Section = "postgres"
	SectionTargets     Section = "targets"
	SectionEscalations Section = "escalations"
	SectionRotations   Section = "rotations"
	SectionSender      Section = "sender"
)

// sectionOf is the section of key, a YAML path such as "targets.ops.robots[0].token".
func sectionOf(key string) Section {
	if i := strings.IndexAny(key, ".["); i >= 0 {
		key = key[:i]
	}
	return Section(key)
}

// only keeps the errors of errs (each a *FieldError, or joined ones) whose key lies in
// sections; all of them when sections is empty.
func only(errs error, sections []Section) error {
	if errs == nil || len(sections) == 0 {
		return errs
	}
	var list []error
	if j, ok := errs.(interface{ Unwrap() []error }); ok {
		list = j.Unwrap()
	} else {
		list = []error{errs}
	}
	var kept []error
	for _, e := range list {
		var fe *FieldError
		if !errors.As(e, &fe) || slices.Contains(sections, sectionOf(fe.Key)) {
			kept = append(kept, e)
		}
	}
	return errors.Join(kept...)
}

// ValidateSections is Validate limited to sections: the same errors, naming the same
// keys, for those sections only (every section when none is given). A check across two
// sections (scheduler.doneTTL against rocketmq.retention) belongs to the section of the
// key it names.
func (c Config) ValidateSections(sections ...Section) error {
	return only(c.Validate(), sections)
}

// Validate reports every invalid field of c (which should have its defaults filled in),
// each as a *FieldError naming the key, joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	c.Log.validate(bad)
	c.HTTP.validate(bad)
	c.RocketMQ.validate(bad)
	c.Scheduler.validate(bad, c.RocketMQ.Retention)
	c.Redis.validate(bad)
	if c.Postgres.URL == "" {
		bad("postgres.url", "required; set it in the file or in ROCKETDELAY_POSTGRES_URL")
	} else if u, err := url.Parse(c.Postgres.URL.Reveal()); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("postgres.url", "must be a postgres:// URL")
	}
	for name, t := range c.Targets {
		t.validate(bad, name)
	}
	c.validateSharedRobots(bad)
	c.validateOnCall(bad)
	c.Sender.validate(bad)
	used := map[string]bool{}
	for _, t := range c.Targets {
		used[t.Channel()] = true
	}
	for _, ch := range ChatChannels() {
		if used[ch.Kind] || ch.Section == "" {
			c.Sender.windowFor(bad, ch)
		}
	}
	c.validateOperators(bad)
	if tok := c.Admin.Token.Reveal(); tok != "" && (len(tok) < MinAdminTokenLen || strings.ContainsAny(tok, " \t\r\n")) {
		bad("admin.token", "must be at least %d characters without whitespace", MinAdminTokenLen)
	}
	for i, k := range c.Signing.Keys {
		if v := k.Reveal(); len(v) < MinSigningKeyLen || strings.ContainsAny(v, " \t\r\n") {
			bad(fmt.Sprintf("signing.keys[%d]", i), "must be at least %d characters without whitespace", MinSigningKeyLen)
		}
	}
	if tok := c.Ingress.Token.Reveal(); tok != "" && (len(tok) < MinAdminTokenLen || strings.ContainsAny(tok, " \t\r\n")) {
		bad("ingress.token", "must be at least %d characters without whitespace", MinAdminTokenLen)
	} else if tok != "" && tok == c.Admin.Token.Reveal() {
		bad("ingress.token", "must differ from admin.token: producers get the one, operators the other")
	}
	var file []Principal
	if f := c.Ingress.PrincipalsFile; f != "" {
		var err error
		if file, err = LoadPrincipals(f); err != nil {
			bad("ingress.principalsFile", "%v", err)
		}
	}
	c.validatePrincipals(bad, file)
	if c.Ingress.DedupeWindow <= 0 {
		bad("ingress.dedupeWindow", "must be positive, got %s", c.Ingress.DedupeWindow)
	}
	if c.Ingress.AckLinkTTL <= 0 {
		bad("ingress.ackLinkTTL", "must be positive, got %s", c.Ingress.AckLinkTTL)
	}
	if u := c.Ingress.PublicURL; u != "" {
		if pu, err := url.Parse(u); err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" || pu.User != nil || pu.RawQuery != "" {
			bad("ingress.publicURL", "must be an http(s) URL without credentials or query, such as https://rocketdelay.example.com")
		} else if pu.Scheme == "http" && !loopback(pu.Hostname()) && !c.Ingress.InsecurePublicURL {
			bad("ingress.publicURL", "%s is plain HTTP: an acknowledgement link is a credential, so anyone on the way could take it; "+
				"use https (set ingress.insecurePublicURL: true to allow it anyway)", u)
		}
	}
	if c.Ingress.MaxBody <= 0 {
		bad("ingress.maxBody", "must be positive, got %d", c.Ingress.MaxBody)
	} else if c.Ingress.MaxBody > int64(c.RocketMQ.MaxMessageSize) {
		bad("ingress.maxBody", "%d is more than the broker takes in one message (rocketmq.maxMessageSize %d)", c.Ingress.MaxBody, c.RocketMQ.MaxMessageSize)
	}
	for severity, p := range c.Ingress.Priorities {
		if !slices.Contains(PriorityNames, p) {
			bad("ingress.priorities."+severity, "%q is not one of %s", p, strings.Join(PriorityNames, ", "))
		}
	}
	c.FailedSends.validate(bad)
	if c.FailedSends.ClaimLease >= time.Second && c.FailedSends.ClaimLease < c.Sender.HTTPTimeout {
		// A row's confirm, right before its request, renews its lease; a lease shorter
		// than the request can take lets a cancel or another replica take the row while
		// the request is on the wire.
		bad("failedSends.claimLease", "must be at least sender.httpTimeout (%s), got %s", c.Sender.HTTPTimeout, c.FailedSends.ClaimLease)
	}
	if c.ShutdownTimeout <= 0 {
		bad("shutdownTimeout", "must be positive, got %s", c.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

func (l Log) validate(bad badFunc) {
	switch l.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", l.Level)
	}
	switch l.Format {
	case "json", "text":
	default:
		bad("log.format", "%q is not one of json, text", l.Format)
	}
}

func (r RocketMQ) validate(bad badFunc) {
	if len(r.NameServers) == 0 {
		bad("rocketmq.nameServers", "at least one name server (host:port) is required; set it in the file or in ROCKETDELAY_NAMESRV")
	}
	hostPorts(bad, "rocketmq.nameServers", r.NameServers)
	hostPorts(bad, "rocketmq.brokers", r.Brokers)
	if (r.AccessKey == "") != (r.SecretKey == "") {
		bad("rocketmq.accessKey", "give both rocketmq.accessKey and rocketmq.secretKey (ROCKETDELAY_ROCKETMQ_ACCESS_KEY, ROCKETDELAY_ROCKETMQ_SECRET_KEY), or neither")
	}
	if !validResourceName(r.Topic) {
		bad("rocketmq.topic", "%q is not a valid topic name (letters, digits, %%, -, _, |; at most 127 characters)", r.Topic)
	}
	if !validResourceName(r.Group) {
		bad("rocketmq.group", "%q is not a valid group name (letters, digits, %%, -, _, |; at most 127 characters)", r.Group)
	}
	if r.SendTimeout <= 0 {
		bad("rocketmq.sendTimeout", "must be positive, got %s", r.SendTimeout)
	}
	if r.MaxMessageSize <= 0 {
		bad("rocketmq.maxMessageSize", "must be positive (the brokers' maxMessageSize, bytes), got %d", r.MaxMessageSize)
	}
	if r.Retention <= 0 {
		bad("rocketmq.retention", "must be positive (the brokers' fileReservedTime), got %s", r.Retention)
	}
}

// validate checks the scheduler's section; retention is rocketmq.retention, which the
// dedupe window must cover.
func (s Scheduler) validate(bad badFunc, retention time.Duration) {
	if len(s.Levels) == 0 {
		bad("scheduler.levels", "at least one delay level is required")
	} else if s.Threshold < s.Levels[0] {
		bad("scheduler.threshold", "%s is below the smallest delay level %s", s.Threshold, s.Levels[0])
	}
	switch s.Mode {
	case ModeLevels, ModeTimer, ModeAuto:
	default:
		bad("scheduler.mode", "must be %q, %q or %q, got %q", ModeLevels, ModeTimer, ModeAuto, s.Mode)
	}
	if s.TimerMargin <= 0 {
		bad("scheduler.timerMargin", "must be positive, got %s", s.TimerMargin)
	} else if s.Mode != ModeLevels && s.TimerMargin >= s.Threshold {
		bad("scheduler.timerMargin", "%s must be below scheduler.threshold %s: a timer hop lands that long before the due time",
			s.TimerMargin, s.Threshold)
	}
	if s.Grace <= 0 {
		bad("scheduler.grace", "must be positive, got %s", s.Grace)
	}
	if s.UnknownTargetWait < MinUnknownTargetWait {
		bad("scheduler.unknownTargetWait", "must be at least %s (replicas say which targets they have four times within it), got %s",
			MinUnknownTargetWait, s.UnknownTargetWait)
	}
	switch {
	case s.DoneTTL < time.Minute:
		bad("scheduler.doneTTL", "must be at least 1m, got %s", s.DoneTTL)
	case retention > 0 && s.DoneTTL < retention:
		bad("scheduler.doneTTL", "%s is shorter than rocketmq.retention %s: a copy of an alert the broker can still "+
			"redeliver after its done marker expired would be sent again; make it at least the brokers' retention",
			s.DoneTTL, retention)
	}
	if s.RetryMaxDelay < time.Second {
		bad("scheduler.retryMaxDelay", "must be at least 1s, got %s", s.RetryMaxDelay)
	}
	if s.Lease < time.Second {
		bad("scheduler.lease", "must be at least 1s, got %s", s.Lease)
	}
	if s.Liveness < MinLiveness {
		bad("scheduler.liveness", "must be at least %s, got %s", MinLiveness, s.Liveness)
	}
	if s.Horizon <= 0 {
		bad("scheduler.horizon", "must be positive, got %s", s.Horizon)
	}
}

func (r Redis) validate(bad badFunc) {
	topologies := 0
	for _, set := range []bool{r.URL != "", r.Sentinel != nil, r.Cluster != nil} {
		if set {
			topologies++
		}
	}
	switch {
	case topologies == 0:
		bad("redis.url", "required (or redis.sentinel, or redis.cluster); set it in the file or in ROCKETDELAY_REDIS_URL")
	case topologies > 1:
		bad("redis", "give one of redis.url, redis.sentinel and redis.cluster, not several")
	case r.Sentinel != nil:
		if r.Sentinel.MasterName == "" {
			bad("redis.sentinel.masterName", "required: the name the sentinels monitor the primary under")
		}
		if len(r.Sentinel.Addresses) == 0 {
			bad("redis.sentinel.addresses", "at least one sentinel host:port is required")
		}
		hostPorts(bad, "redis.sentinel.addresses", r.Sentinel.Addresses)
	case r.Cluster != nil:
		if len(r.Cluster.Addresses) == 0 {
			bad("redis.cluster.addresses", "at least one node host:port is required")
		}
		hostPorts(bad, "redis.cluster.addresses", r.Cluster.Addresses)
	default:
		if u, err := url.Parse(r.URL.Reveal()); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("redis.url", "must be a redis://, rediss:// or unix:// URL")
		} else if r.TLS != nil && u.Scheme != "rediss" {
			bad("redis.url", "redis.tls is set: the URL must be rediss:// (TLS), not %s://", u.Scheme)
		}
	}
	if r.TLS != nil && (r.TLS.CertFile == "") != (r.TLS.KeyFile == "") {
		bad("redis.tls.certFile", "give both redis.tls.certFile and redis.tls.keyFile, or neither")
	}
	if _, _, err := ParseDurability(r.Durability); err != nil {
		bad("redis.durability", "%v", err)
	}
	if r.WaitTimeout <= 0 {
		bad("redis.waitTimeout", "must be positive, got %s", r.WaitTimeout)
	}
	if r.Shards < 1 || r.Shards > MaxShards {
		bad("redis.shards", "must be 1 to %d, got %d", MaxShards, r.Shards)
	}
	if strings.ContainsAny(r.KeyPrefix, "{}/ \t\n") {
		// a slash would let one deployment's prefix name another's shard ({p/i}, redis.shards)
		bad("redis.keyPrefix", "%q must not contain braces, slashes or whitespace", r.KeyPrefix)
	}
}

// validate checks target name's section.
// validateOperators checks admin.operators and admin.proxyUserHeader.
func (c Config) validateOperators(bad badFunc) {
	if len(c.Admin.Operators) > 0 && c.Admin.Token == "" {
		bad("admin.operators", "needs admin.token: the console is on only with it")
	}
	if h := c.Admin.ProxyUserHeader; h != "" {
		if len(c.HTTP.TrustedProxies) == 0 {
			bad("admin.proxyUserHeader", "needs http.trustedProxies: the header is believed only from them")
		}
		if strings.ContainsAny(h, " \t\r\n:") {
			bad("admin.proxyUserHeader", "%q is not a header name", h)
		}
	}
	names, tokens := map[string]bool{}, map[string]bool{c.Admin.Token.Reveal(): true, c.Ingress.Token.Reveal(): true}
	for _, p := range c.Ingress.Principals {
		tokens[p.Token.Reveal()] = true
	}
	for i, o := range c.Admin.Operators {
		key := fmt.Sprintf("admin.operators[%d]", i)
		switch {
		case !ValidOperatorName(o.Name) || o.Name == "admin":
			bad(key+".name", "%q is not an operator's name: letters, digits, - _ . @ +, at most 64, not admin", o.Name)
		case names[o.Name]:
			bad(key+".name", "%q is used twice", o.Name)
		}
		names[o.Name] = true
		tok := o.Token.Reveal()
		switch {
		case len(tok) < MinAdminTokenLen || strings.ContainsAny(tok, " \t\r\n"):
			bad(key+".token", "must be at least %d characters without whitespace", MinAdminTokenLen)
		case tokens[tok]:
			bad(key+".token", "is another login's or a producer's token: each has its own")
		}
		tokens[tok] = true
	}
}

// validateSharedRobots refuses a robot listed in two targets: each target counts its
// robots' sends in windows of its own, so a robot of two targets would take both targets'
// budgets and go over its platform's limit. A target's budget is its own robots'. The
// error names the robots, never their credentials.
func (c Config) validateSharedRobots(bad badFunc) {
	type place struct{ target, robot string }
	seen := map[string]place{}
	for _, name := range slices.Sorted(maps.Keys(c.Targets)) {
		t := c.Targets[name]
		ch, ok := ChatChannelOf(t.Channel())
		if !ok {
			continue
		}
		for i, r := range t.Robots {
			tok, err := ch.credential(r.Token)
			if err != nil || tok == "" {
				continue // said by Target.validate
			}
			id := t.Channel() + "\x00" + tok.Reveal()
			key := fmt.Sprintf("targets.%s.robots[%d].token", name, i)
			first, dup := seen[id]
			if dup && first.target == name {
				bad(key, "robot %q is robot %q again: list it once (twice, it would take its budget twice)", r.Name, first.robot)
				continue
			}
			if dup {
				bad(key,
					"robot %q is also robot %q of target %s: a robot belongs to one target, whose budget it is "+
						"(two targets would each count its sends and together go over %s's limit); "+
						"send both targets' alerts to one of them", r.Name, first.robot, first.target, ch.Name)
				continue
			}
			seen[id] = place{name, r.Name}
		}
	}
}

func (t Target) validate(bad badFunc, name string) {
	key := "targets." + name
	if !validResourceName(name) {
		bad(key, "a target name may hold letters, digits, %%, -, _ and | only")
	}
	kind := t.Channel()
	if !slices.Contains(Kinds(), kind) {
		bad(key+".kind", "must be one of %s, got %q", strings.Join(Kinds(), ", "), t.Kind)
		return
	}
	ch, _ := ChatChannelOf(kind)
	if t.Alertmanager != nil {
		if !t.Chat() {
			bad(key+".alertmanager", "only a robot group renders Alertmanager notifications")
		}
		for i, m := range t.Alertmanager.Mentions {
			for _, id := range slices.Concat(m.Mobiles, m.UserIDs) {
				if id == "" || strings.ContainsAny(id, " \t\r\n@<>\"") {
					bad(fmt.Sprintf("%s.alertmanager.mentions[%d]", key, i), "%q is not a mobile number or user id", id)
				}
			}
			if kind != KindTopic && !ch.Mobiles && len(m.Mobiles) > 0 {
				bad(fmt.Sprintf("%s.alertmanager.mentions[%d].mobiles", key, i),
					"%s mentions by user id (userIds: its %s), not by mobile number", ch.Name, ch.MemberID)
			}
		}
	}
	if kind == KindTopic {
		if len(t.Robots) > 0 {
			bad(key, "a target has robots or a topic, not both")
		}
		if t.Topic == nil {
			bad(key+".topic", "a target of kind topic needs a topic section")
			return
		}
		t.Topic.validate(bad, key+".topic")
		return
	}
	if t.Topic != nil {
		bad(key+".topic", "a target of kind %s has robots, not a topic", kind)
	}
	if len(t.Robots) == 0 {
		bad(key+".robots", "a target needs at least one robot, or a topic")
	}
	seen := map[string]bool{}
	for i, r := range t.Robots {
		rkey := fmt.Sprintf("%s.robots[%d]", key, i)
		switch {
		case r.Name == "":
			bad(rkey+".name", "required")
		case seen[r.Name]:
			bad(rkey+".name", "%q is used twice in this target", r.Name)
		}
		seen[r.Name] = true
		if r.Token == "" {
			bad(rkey+".token", "required (the robot webhook's %s)", ch.CredentialName)
		} else if tok, err := ch.credential(r.Token); err != nil {
			bad(rkey+".token", "%v", err)
		} else if !ch.goodCredential(tok.Reveal()) {
			bad(rkey+".token", "the %s holds whitespace or URL punctuation", ch.CredentialName)
		}
		if !ch.Signs && r.SigningSecret != "" {
			bad(rkey+".signingSecret", "%s robots do not sign: the %s is their only credential", ch.Name, ch.CredentialName)
		}
		if !ch.Keywords && r.Keyword != "" {
			bad(rkey+".keyword", "%s robots have no keyword setting", ch.Name)
		}
		if r.Limit < 0 || r.Limit > ch.MaxLimit {
			bad(rkey+".limit", "must be between 1 and %d (%s's limit per minute), or 0 for the default; got %d", ch.MaxLimit, ch.Name, r.Limit)
		}
	}
}

func (s Sender) validate(bad badFunc) {
	for _, c := range ChatChannels() {
		if c.Section == "" {
			s.Settings(c).validate(bad, "sender", c)
		}
	}
	s.validatePlatforms(bad)
	if s.Window < time.Second {
		bad("sender.window", "must be at least 1s, got %s", s.Window)
	}
	if g := s.Guard(); g < 0 || g > s.Window/2 {
		bad("sender.windowGuard", "must be between 0 and half of sender.window (%s), got %s", s.Window/2, g)
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"sender.cooldown", s.Cooldown}, {"sender.disableFor", s.DisableFor}, {"sender.httpTimeout", s.HTTPTimeout},
		{"sender.backoffBase", s.BackoffBase}, {"sender.breakerOpen", s.BreakerOpen}} {
		if d.v <= 0 {
			bad(d.key, "must be positive, got %s", d.v)
		}
	}
	if s.BackoffMax < s.BackoffBase {
		bad("sender.backoffMax", "%s is below sender.backoffBase %s", s.BackoffMax, s.BackoffBase)
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"sender.attempts", s.Attempts}, {"sender.maxInFlight", s.MaxInFlight}, {"sender.breakerFailures", s.BreakerFailures}} {
		if n.v < 1 {
			bad(n.key, "must be at least 1, got %d", n.v)
		}
	}
	if s.MaxWait < 0 {
		bad("sender.maxWait", "must not be negative, got %s", s.MaxWait)
	}
	for _, e := range []struct{ key, v, a, b string }{{"sender.coalesce", s.Coalesce, CoalesceAuto, CoalesceOff},
		{"sender.pacing", s.Pacing, PacingAuto, PacingBurst}, {"sender.robotLimits", s.RobotLimits, RobotLimitsLearn, RobotLimitsFixed}} {
		if e.v != e.a && e.v != e.b {
			bad(e.key, "must be %q or %q, got %q", e.a, e.b, e.v)
		}
	}
	if s.CoalesceMax < 2 || s.CoalesceMax > MaxCoalesceMax {
		bad("sender.coalesceMax", "must be between 2 and %d (sender.coalesce: off sends every alert alone), got %d", MaxCoalesceMax, s.CoalesceMax)
	}
	if s.PriorityMaxWait <= 0 {
		bad("sender.priorityMaxWait", "must be positive, got %s", s.PriorityMaxWait)
	}
}

func (f FailedSends) validate(bad badFunc) {
	if f.Interval < 100*time.Millisecond {
		bad("failedSends.interval", "must be at least 100ms, got %s", f.Interval)
	}
	if f.MaxAttempts < 1 {
		bad("failedSends.maxAttempts", "must be at least 1, got %d", f.MaxAttempts)
	}
	if f.MaxAge <= 0 {
		bad("failedSends.maxAge", "must be positive, got %s", f.MaxAge)
	}
	if f.BackoffBase <= 0 {
		bad("failedSends.backoffBase", "must be positive, got %s", f.BackoffBase)
	}
	if f.BackoffCap < f.BackoffBase {
		bad("failedSends.backoffCap", "must be at least failedSends.backoffBase (%s), got %s", f.BackoffBase, f.BackoffCap)
	}
	if f.BatchSize < 1 || f.BatchSize > MaxFailedSendsBatchSize {
		bad("failedSends.batchSize", "must be between 1 and %d, got %d", MaxFailedSendsBatchSize, f.BatchSize)
	}
	if f.ClaimLease < time.Second {
		bad("failedSends.claimLease", "must be at least 1s, got %s", f.ClaimLease)
	}
	if f.Retention < time.Hour {
		bad("failedSends.retention", "must be at least 1h (rows an operator may still want to see), got %s", f.Retention)
	}
	if f.DeadRetention != 0 && f.DeadRetention < f.MaxAge {
		bad("failedSends.deadRetention", "must be 0 (keep dead rows until discarded) or at least failedSends.maxAge (%s), got %s",
			f.MaxAge, f.DeadRetention)
	}
}

// hostPorts reports every address of list (the key key) that is not host:port.
func hostPorts(bad badFunc, key string, list []string) {
	for i, a := range list {
		_, port, err := net.SplitHostPort(a)
		switch {
		case strings.ContainsAny(a, "@/"): // a URL, perhaps with its password: never shown
			bad(fmt.Sprintf("%s[%d]", key, i), "is not host:port (not shown: it looks like a URL, which may hold a password; give the password in its own key)")
		case err != nil || port == "":
			bad(fmt.Sprintf("%s[%d]", key, i), "%q is not host:port", a)
		}
	}
}

// validResourceName mirrors the broker's check for topic and group names.
func validResourceName(s string) bool {
	if s == "" || len(s) > 127 {
		return false
	}
	for _, r := range s {
		ok := r == '%' || r == '-' || r == '_' || r == '|' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// MaxTopicRate is the largest targets.NAME.topic.ratePerSecond Validate accepts.
const MaxTopicRate = 1_000_000

// validate checks a topic target's section, key.
func (t TopicTarget) validate(bad badFunc, key string) {
	if t.Name == "" {
		bad(key+".name", "required (the business topic due messages are sent to)")
	} else if !validResourceName(t.Name) {
		bad(key+".name", "%q is not a valid topic name (letters, digits, %%, -, _, |; at most 127 characters)", t.Name)
	}
	if strings.ContainsAny(t.Tag, "| \t\r\n") || len(t.Tag) > 127 {
		bad(key+".tag", "%q is not a valid tag (no |, no whitespace, at most 127 characters)", t.Tag)
	}
	if len(t.AllowTopics) > 0 && !t.AllowOverride {
		bad(key+".allowTopics", "only with allowOverride: true (without it a message cannot name a topic)")
	}
	for i, name := range t.AllowTopics {
		if !validResourceName(name) {
			bad(fmt.Sprintf("%s.allowTopics[%d]", key, i), "%q is not a valid topic name", name)
		}
	}
	if t.RatePerSecond < 0 || t.RatePerSecond > MaxTopicRate {
		bad(key+".ratePerSecond", "must be between 0 (no cap) and %d, got %d", MaxTopicRate, t.RatePerSecond)
	}
}

// loopback reports whether host names this machine only.
func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// validate checks the listeners and their limits.
func (h HTTP) validate(bad func(key, format string, args ...any)) {
	if _, _, err := net.SplitHostPort(h.Addr); err != nil {
		bad("http.addr", "%q is not host:port", h.Addr)
	}
	if _, _, err := net.SplitHostPort(h.PublicAddr); h.PublicAddr != "" && err != nil {
		bad("http.publicAddr", "%q is not host:port", h.PublicAddr)
	} else if h.PublicAddr != "" && h.PublicAddr == h.Addr {
		bad("http.publicAddr", "%q is http.addr too: the public listener must be another", h.PublicAddr)
	}
	if (h.TLSCertFile == "") != (h.TLSKeyFile == "") {
		bad("http.tlsCertFile", "give both http.tlsCertFile and http.tlsKeyFile, or neither")
	}
	for i, p := range h.TrustedProxies {
		if _, err := netip.ParsePrefix(p); err != nil {
			if _, err := netip.ParseAddr(p); err != nil {
				bad(fmt.Sprintf("http.trustedProxies[%d]", i), "%q is neither a CIDR (10.0.0.0/8) nor an address", p)
			}
		}
	}
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"http.readHeaderTimeout", h.ReadHeaderTimeout}, {"http.readTimeout", h.ReadTimeout},
		{"http.writeTimeout", h.WriteTimeout}, {"http.idleTimeout", h.IdleTimeout}} {
		if d.v <= 0 {
			bad(d.key, "must be positive, got %s", d.v)
		}
	}
	if h.ReadHeaderTimeout > h.ReadTimeout && h.ReadTimeout > 0 {
		bad("http.readHeaderTimeout", "%s is longer than http.readTimeout %s, which bounds the headers too", h.ReadHeaderTimeout, h.ReadTimeout)
	}
	if h.MaxHeaderBytes < 4096 {
		bad("http.maxHeaderBytes", "must be at least 4096, got %d", h.MaxHeaderBytes)
	}
	if h.MaxConnections <= 0 {
		bad("http.maxConnections", "must be positive, got %d", h.MaxConnections)
	}
}

package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Producers keeps what the ways in know of their principals for every replica: who owns
// an alert id or an episode key, and each principal's rate; *store.Producers implements
// it.
type Producers interface {
	Own(ctx context.Context, kind, id, principal string, ttl time.Duration) (string, error)
	Owner(ctx context.Context, kind, id string) (string, error)
	// Extend keeps kind's id's owner record, whoever's, at least ttl from now; it records
	// none.
	Extend(ctx context.Context, kind, id string, ttl time.Duration) (string, error)
	// Take takes up to want requests of principal's rate: granted, or when none, how
	// long until one may go (rates spends them a lease at a time).
	Take(ctx context.Context, principal string, perSecond float64, burst, want int) (granted int, wait time.Duration, err error)
	// Publish is Take (perSecond 0: none) and then, unless over the rate, Own of the
	// unscoped alert id the publish route publishes, in one round trip; an id the wheel
	// stage holds as another's (published to the topic directly) is not taken.
	Publish(ctx context.Context, principal string, perSecond float64, burst, want int, id string, ttl time.Duration) (granted int, wait time.Duration, owner string, err error)
	// OpenEpisode records that principal opens episode key within max open at once.
	OpenEpisode(ctx context.Context, principal, key string, max int) (ok bool, open int, err error)
}

// principals are the producers the ways in know now, by the hash of their token:
// ingress.principals, ingress.token's, and the principals file's as it was last read
// (Reload). A request is its principal's, found by its bearer token.
type principals struct {
	cfg    config.Config
	logger *slog.Logger
	now    atomic.Pointer[map[[32]byte]config.Principal]
	mu     sync.Mutex // one Reload at a time
	sum    [32]byte   // the digest of the principals in force
	// fromFile is how many principals in force the file gave; emptied is set by a
	// read that found none where the file gave some, and not yet put in force.
	fromFile int
	emptied  bool
}

func newPrincipals(cfg config.Config, logger *slog.Logger) (*principals, error) {
	ps := &principals{cfg: cfg, logger: logger}
	if _, err := ps.Reload(); err != nil {
		return nil, err
	}
	return ps, nil
}

// Reload reads the principals file again, with the secrets its tokens reference (a
// token's file rotated is a change too; one emptied makes the file invalid: revoke a
// principal by removing it from the file), and, when the
// principals changed and are valid, puts them in force; a file that is not valid leaves
// the principals as they were and is the error. A file emptied of its principals (an
// empty file revokes them all) is put in force by the next read that agrees: a file
// written in place is empty for an instant, between its truncate and its write, and
// that instant must not revoke everyone. It reports whether the principals changed.
func (ps *principals) Reload() (bool, error) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	all, err := ps.cfg.Principals()
	var file []config.Principal
	if err == nil {
		file = all[len(ps.cfg.Ingress.Principals) : len(all)-legacy(ps.cfg)]
		err = ps.cfg.ValidatePrincipals(file)
	}
	if err != nil {
		return false, fmt.Errorf("the principals file is not taken: %w", err)
	}
	if len(file) == 0 && ps.fromFile > 0 && !ps.emptied {
		ps.emptied = true
		return false, nil
	}
	ps.emptied = false
	m := make(map[[32]byte]config.Principal, len(all))
	sum := sha256.New()
	for _, p := range all {
		tok := sha256.Sum256([]byte(p.Token.Reveal()))
		m[tok] = p
		p.Token = ""
		b, _ := json.Marshal(p) // cannot fail: strings, numbers and lists
		sum.Write(b)
		sum.Write(tok[:])
	}
	var digest [32]byte
	sum.Sum(digest[:0])
	if ps.now.Load() != nil && digest == ps.sum {
		return false, nil
	}
	ps.now.Store(&m)
	ps.sum, ps.fromFile = digest, len(file)
	return true, nil
}

// legacy is 1 when ingress.token stands for a principal, else 0.
func legacy(cfg config.Config) int {
	if cfg.Ingress.Token != "" {
		return 1
	}
	return 0
}

// find is the principal whose token is token.
func (ps *principals) find(token string) (config.Principal, bool) {
	p, ok := (*ps.now.Load())[sha256.Sum256([]byte(token))]
	return p, ok
}

// any reports whether any principal is known.
func (ps *principals) any() bool { return len(*ps.now.Load()) > 0 }

// WatchPrincipals reads the principals file again every period until ctx ends, putting
// a changed, valid file in force at once (a Kubernetes Secret mounted as a volume is
// updated in place); a file that is not valid is logged and leaves them as they were.
func (in *Ingress) WatchPrincipals(ctx context.Context, period time.Duration) {
	if in.cfg.Ingress.PrincipalsFile == "" {
		return
	}
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		changed, err := in.principals.Reload()
		switch {
		case err != nil:
			in.deps.Logger.Error("principals file not reloaded; the principals stay as they were", "err", err)
		case changed:
			in.deps.Logger.Info("principals file reloaded", "principals", len(*in.principals.now.Load()))
		}
	}
}

type principalKey struct{}

// principalOf is the principal a request authenticated as.
func principalOf(r *http.Request) config.Principal {
	p, _ := r.Context().Value(principalKey{}).(config.Principal)
	return p
}

// authenticate finds the principal of a request's bearer token (401 for none), and takes
// one request of its rate (429 with Retry-After past it) — but for a publish, which takes
// it once its body is read (ownAlert).
func (in *Ingress) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !in.principals.any() {
			writeError(w, http.StatusServiceUnavailable, "disabled",
				"the HTTP ways in are disabled: set ingress.token or ingress.principals in the config (or ROCKETDELAY_INGEST_TOKEN) to enable them")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		p, found := in.principals.find(strings.TrimSpace(got))
		if !ok || !found {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rocketdelay ingress"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token (Authorization: Bearer <a principal's token>)")
			return
		}
		if p.RatePerSecond > 0 && !(r.Method == http.MethodPost && r.URL.Path == AlertsPath) {
			wait, err := in.rates.take(r.Context(), in.deps.Producers, p)
			if err != nil {
				in.rateUnknown(w, p, err)
				return
			}
			if wait > 0 {
				in.overRate(w, r, p, wait)
				return
			}
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	})
}

// rateUnknown answers 503: p's rate could not be read (err).
func (in *Ingress) rateUnknown(w http.ResponseWriter, p config.Principal, err error) {
	in.deps.Logger.Warn("a principal's rate could not be read", "principal", p.Name, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "redis", "not done; send it again: the rate could not be checked")
}

// overRate answers 429 with Retry-After: p is over its rate for wait.
func (in *Ingress) overRate(w http.ResponseWriter, r *http.Request, p config.Principal, wait time.Duration) {
	in.metrics.refused.WithLabelValues(p.Name, "rate").Inc()
	w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
	writeError(w, tooMany(r), "rate_limited", fmt.Sprintf(
		"principal %q is over its rate (%g per second, bursts of %d): send it again after Retry-After", p.Name, p.RatePerSecond, p.Burst))
}

// tooMany is the status of a request refused for now (a rate, a cap): 429, or for an
// Alertmanager receiver 503, as Alertmanager sends a notification again only after a
// 5xx; a 4xx, 429 included, drops it.
func tooMany(r *http.Request) int {
	if strings.HasPrefix(r.URL.Path, AlertmanagerPath+"/") {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// forbid answers 403 with reason: a principal asked for more than it may do. Nothing
// was changed.
func (in *Ingress) forbid(w http.ResponseWriter, op string, p config.Principal, reason, format string, args ...any) {
	in.metrics.requests.WithLabelValues(op, reason).Inc()
	in.metrics.refused.WithLabelValues(p.Name, reason).Inc()
	writeError(w, http.StatusForbidden, reason, fmt.Sprintf("principal %q: ", p.Name)+fmt.Sprintf(format, args...))
}

// mentionSyntax opens a mention in a chat platform's text or markdown: Feishu's <at …>,
// WeCom's <@userid>, Slack's <@U…> and <!here>, <!channel>, <!everyone>. DingTalk
// mentions only through its at field, which a text or markdown alert has none of.
var mentionSyntax = regexp.MustCompile(`(?i)<\s*(at[\s>]|@|!)`)

// mayPublish says why p may not publish pub to target (its kind), "" when it may: the
// target must be one of p's, the priority at most p's highest, and without the raw right
// the body must be text or markdown that mentions nobody.
func mayPublish(p config.Principal, req PublishRequest, chat bool) (reason, why string) {
	switch {
	case !p.MayTarget(req.Target):
		return "forbidden_target", fmt.Sprintf("may not publish to target %q (its targets: %s)", req.Target, strings.Join(p.Targets, ", "))
	case priorityRank(req.Priority) > priorityRank(p.MaxPriority):
		return "forbidden_priority", fmt.Sprintf("priority %q is above its highest, %q", req.Priority, p.MaxPriority)
	case !chat || p.Can(config.RightRaw):
		return "", ""
	case len(req.Body) > 0:
		return "forbidden_raw", "may not publish a platform's message object as written (body): that takes the right \"raw\"; send text or markdown"
	case req.Markdown != nil:
		return mayMention(p, req.Markdown.Title, req.Markdown.Text)
	}
	return mayMention(p, req.Text)
}

// mayMention says why p may not send texts, "" when it may: without the right raw, a
// text that opens a mention (<at …>, <@…>, <!…>) — in an alert, or in what an
// escalation's pages and its resolution say.
func mayMention(p config.Principal, texts ...string) (reason, why string) {
	if p.Can(config.RightRaw) {
		return "", ""
	}
	for _, t := range texts {
		if mentionSyntax.MatchString(t) {
			return "forbidden_mention", "may not mention anyone (<at …>, <@…>, <!…> in the text): that takes the right \"raw\""
		}
	}
	return "", ""
}

// priorityRank orders priorities: the higher, the more urgent ("" is normal).
func priorityRank(name string) int {
	p, _ := wire.ParsePriority(name)
	return p
}

// lowerTo is priority, lowered to highest when above it.
func lowerTo(priority, highest string) string {
	if priorityRank(priority) > priorityRank(highest) {
		return highest
	}
	return priority
}

// owns reports whether p may act on what owner owns: its own, or anyone's with the
// right "others" (which an alert published to the topic directly, owned by nobody,
// takes too).
func owns(p config.Principal, owner string) bool {
	return owner == p.Name && owner != "" || p.Can(config.RightOthers)
}

// ownAlert takes one request of p's rate and records p as the owner of the alert id due
// at due before it is published, in one round trip at most; it reports false, having
// answered 429 when p is over its rate (nothing recorded) or 403 when another principal
// owns the id. A scoped id of p's own (wire.ScopePrefix; the caller refused another's)
// is p's by its name: nothing is recorded, and but for a lease of its rate now and then
// Redis is not asked.
func (in *Ingress) ownAlert(w http.ResponseWriter, r *http.Request, op string, p config.Principal, id string, due time.Time) bool {
	if _, scoped := wire.Scope(id); scoped {
		wait, err := in.rates.take(r.Context(), in.deps.Producers, p)
		switch {
		case err != nil:
			in.unavailableRedis(w, op, id, err)
		case wait > 0:
			in.overRate(w, r, p, wait)
		}
		return err == nil && wait == 0
	}
	// An unscoped id: its lease's refill, when one is due, rides with the owner's round trip.
	held, wait, want, err := in.rates.spend(r.Context(), p)
	switch {
	case err != nil:
		in.unavailableRedis(w, op, id, err)
		return false
	case wait > 0:
		in.overRate(w, r, p, wait)
		return false
	}
	perSecond := p.RatePerSecond
	if held {
		perSecond = 0 // spent of this replica's lease already
	}
	ttl := store.AlertOwnerTTL(due, in.deps.Now(), in.cfg.Scheduler.DoneTTL)
	granted, wait, owner, err := in.deps.Producers.Publish(r.Context(), p.Name, perSecond, p.Burst, want, id, ttl)
	if !held {
		in.rates.fill(p, want, granted, wait) // every refill spend asked for is answered, an error too
	}
	switch {
	case err != nil:
		in.unavailableRedis(w, op, id, err)
		return false
	case !held && granted == 0:
		in.overRate(w, r, p, wait)
		return false
	}
	switch {
	case owner == "":
		in.forbid(w, op, p, "foreign_id", "id %q is an alert published to the topic directly (nobody's): choose another id", id)
		return false
	case owner != p.Name:
		in.forbid(w, op, p, "foreign_id", "id %q is principal %q's: choose another id", id, owner)
		return false
	}
	return true
}

// alertOwnedBy reports whether p may act on the alert id (its own, or with "others");
// when not, or when Redis cannot say, it has answered.
func (in *Ingress) alertOwnedBy(w http.ResponseWriter, r *http.Request, op string, p config.Principal, id string) bool {
	if !p.Can(config.RightCancel) && !p.Can(config.RightOthers) {
		in.forbid(w, op, p, "forbidden", "may not cancel or reschedule alerts: that takes the right \"cancel\"")
		return false
	}
	owner, err := in.alertOwner(r.Context(), id)
	if err != nil {
		in.unavailableRedis(w, op, id, err)
		return false
	}
	if !owns(p, owner) {
		in.forbid(w, op, p, "foreign_id", "id %q is not its own (another principal's, or published to the topic directly)", id)
		return false
	}
	return true
}

// alertOwner is the principal that owns the alert id: a scoped id's principal, by its
// name, or the one recorded when it was published ("" for none: published to the topic
// directly, or the record expired).
func (in *Ingress) alertOwner(ctx context.Context, id string) (string, error) {
	if principal, scoped := wire.Scope(id); scoped {
		return principal, nil
	}
	return in.deps.Producers.Owner(ctx, store.OwnAlert, id)
}

// newID is the id the publish route makes up for an alert p publishes without one: in
// p's scope (wire.ScopePrefix), p's by its name with nothing recorded; ingress.token's
// (config.LegacyPrincipal) is unscoped, as it always was.
func (in *Ingress) newID(p config.Principal) string {
	id := wire.NewID()
	if scoped := wire.ScopePrefix + p.Name + ":" + id; p.Name != config.LegacyPrincipal && wire.CheckID(scoped) == nil {
		return scoped
	}
	return id
}

// unavailableRedis answers 503: the owner of id could not be read or recorded.
func (in *Ingress) unavailableRedis(w http.ResponseWriter, op, id string, err error) {
	in.metrics.requests.WithLabelValues(op, "redis").Inc()
	in.deps.Logger.Warn("an owner could not be read or recorded", "op", op, "rd_id", id, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, "redis", "not done; send it again: Redis did not answer")
}

// mayEscalate says why p may not start or update an episode of policy, "" when it may:
// it needs the right "escalate", and every target the policy pages must be one of its.
func (in *Ingress) mayEscalate(p config.Principal, policy string) (reason, why string) {
	if !p.Can(config.RightEscalate) {
		return "forbidden", "may not escalate (the API, an Alertmanager receiver's policy= or delay=): that takes the right \"escalate\""
	}
	var outside []string
	pol := in.cfg.Escalations[policy]
	for _, s := range pol.Steps {
		if !p.MayTarget(s.Target) && !slices.Contains(outside, s.Target) {
			outside = append(outside, s.Target)
		}
	}
	if len(outside) > 0 {
		return "forbidden_target", fmt.Sprintf("policy %q pages %s, not its targets", policy, strings.Join(outside, ", "))
	}
	return "", ""
}

// episodeOwnerTTL is how long an episode's owner is kept after its last start: longer
// than an ended episode is kept (7 days).
const episodeOwnerTTL = 8 * 24 * time.Hour

// recordOwner records p as the owner of kind's id unless another principal owns it, and
// reports whether p may act on it (owns): its own, or anyone's with the right others.
// The copies of an Alertmanager notification (an HA pair, a retry) come through one
// receiver path, with its credential, so they are all their first sender's.
func (in *Ingress) recordOwner(ctx context.Context, kind, id string, p config.Principal, ttl time.Duration) (bool, error) {
	owner, err := in.deps.Producers.Own(ctx, kind, id, p.Name, ttl)
	return err == nil && owns(p, owner), err
}

// episodeOwnedBy reports whether p may act on the episode key: with the right
// "escalate", its own or, with "others", anyone's. When not, or when Redis cannot say,
// it has answered.
func (in *Ingress) episodeOwnedBy(w http.ResponseWriter, r *http.Request, op string, p config.Principal, key string) bool {
	if !p.Can(config.RightEscalate) && !p.Can(config.RightOthers) {
		in.forbid(w, op, p, "forbidden", "may not act on escalations: that takes the right \"escalate\"")
		return false
	}
	owner, err := in.deps.Producers.Owner(r.Context(), store.OwnEpisode, key)
	if err != nil {
		in.unavailableRedis(w, op, key, err)
		return false
	}
	if !owns(p, owner) {
		in.forbid(w, op, p, "foreign_key", "episode %q is not its own", key)
		return false
	}
	return true
}

// mayOpenEpisode records that p opens the episode key, within its maxOpenEpisodes; past
// it, or when Redis cannot say, it has answered (429 with Retry-After: one of its
// episodes must be resolved first).
func (in *Ingress) mayOpenEpisode(w http.ResponseWriter, r *http.Request, op string, p config.Principal, key string) bool {
	if p.MaxOpenEpisodes <= 0 {
		return true
	}
	ok, open, err := in.deps.Producers.OpenEpisode(r.Context(), p.Name, key, p.MaxOpenEpisodes)
	if err != nil {
		in.unavailableRedis(w, op, key, err)
		return false
	}
	if ok {
		return true
	}
	in.metrics.refused.WithLabelValues(p.Name, "open_episodes").Inc()
	in.metrics.requests.WithLabelValues(op, "open_episodes").Inc()
	in.deps.Logger.Warn("an escalation refused: the principal has as many episodes open as it may", "principal", p.Name,
		"episode", key, "open", open, "max", p.MaxOpenEpisodes)
	w.Header().Set("Retry-After", "60")
	writeError(w, tooMany(r), "open_episodes",
		fmt.Sprintf("%s has %d escalation episodes open, its maxOpenEpisodes: one must be resolved first", p.Name, open))
	return false
}

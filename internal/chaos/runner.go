package chaos

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/localstack"
	"github.com/rocketdelay/rocketdelay/internal/netproxy"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/topicsink"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// The scenarios, by name.
const (
	ScenarioKillOne   = "kill-one"   // (1) SIGKILL one replica at random moments, restart it
	ScenarioKillBoth  = "kill-both"  // (2) SIGKILL both replicas at once, restart them
	ScenarioRedisKill = "redis-kill" // (3) SIGKILL Redis (AOF, everysec) mid-run, start it again
	ScenarioPostgres  = "postgres"   // (4) stop Postgres while DingTalk fails, restore both
	ScenarioStorm     = "storm"      // (5) DingTalk storms: 5xx, 130101, throttling, slow, drops
	ScenarioBroker    = "broker"     // (6) restart the RocketMQ broker mid-run
	ScenarioMalformed = "malformed"  // (7) malformed inputs mixed into a normal run
	// (8) Redis down (SIGKILLed) for longer than the broker's whole reconsume schedule
	ScenarioRedisOutage = "redis-outage"
	// (9) Postgres down for as long while sends fail and rejects arrive
	ScenarioPostgresOutage = "postgres-outage"
	ScenarioZombie         = "zombie"     // (10) a replica SIGSTOPped past its lease while holding claims, then SIGCONTed
	ScenarioFastClock      = "fast-clock" // (11) one replica's clock 5s fast, the other's 5s slow
	// (12) Redis Sentinel: the primary SIGKILLed, the replica promoted; redis.durability replicas=1
	ScenarioRedisFailover = "redis-failover"
	// (13) kill-one on a Redis Cluster of three primaries
	ScenarioKillOneCluster = "kill-one-cluster"
	// (14) the replicas' connections to Redis cut for 2-3s every few seconds
	ScenarioRedisBlips = "redis-blips"
	// (15) a replica SIGSTOPped past the retry job's claim lease while it sends failed rows
	ScenarioRetryJobZombie = "retry-job-zombie"
	// (16) a seeded random schedule of SIGKILL, SIGSTOP, Redis blips, Postgres restarts and
	// DingTalk storms
	ScenarioCombined = "combined"
	// (17) kill-one with every alert for a topic target: received by a consumer of the
	// business topic, never early by the broker's store time; a cluster due at once
	// drains at the target's ratePerSecond, in batches of at most its burst
	ScenarioKillOneTopic = "kill-one-topic"
	// (18) the broker restarted while due messages of a topic target are being sent to
	// it, with the same cluster
	ScenarioBrokerTopic = "broker-topic"
	// (19) a cluster far past a one-robot target's budget: both replicas park and adopt
	// each other's alerts into slow merged sends, and one is SIGKILLed twice meanwhile
	ScenarioKillBusy = "kill-busy"
	// (20) a rolling update under a steady load: each replica in turn stopped with SIGTERM
	// and started again, ready before the next one stops
	ScenarioRolling = "rolling"
	// (21) the previous release and this one side by side under a steady load, replica by
	// replica: old+old, old+new, new+new
	ScenarioRollingUpgrade = "rolling-upgrade"
	// (22) a configuration change rolled out replica by replica under a steady load: a
	// target added, a target removed, a robot added
	ScenarioRollingConfig = "rolling-config"
	// (23) a second deployment started on the first's Redis key prefix
	ScenarioTwoDeployments = "two-deployments"
	// (24) a replica started while Redis is out of reach
	ScenarioStartWithoutRedis = "start-without-redis"
	// (25) the only Redis replica lost for a while with redis.durability replicas=1
	ScenarioFailoverDegraded = "failover-degraded"
	// (26) rolling-config's change applied by reloading each replica's file, no restart
	ScenarioReloadConfig = "reload-config"
	// (27) redis.shards changed from 1 to 3, rolled out replica by replica under a
	// steady load: the wheel stage moves online
	ScenarioReshard   = "reshard"
	ScenarioBaseline  = "baseline" // no fault: the reference row
	scenarioIDPattern = `[0-9a-f]{6}-[a-z-]+-\d{5}`
)

// AllScenarios lists every scenario in the order Run runs them: (28) and on, a kill-one
// and a storm with every alert for the target of each chat platform but DingTalk
// (ChannelScenarios), their robots' limits held at the simulator (per second too, where
// the platform has such a limit), the storms in each platform's own answers.
var AllScenarios = append([]string{ScenarioKillOne, ScenarioKillBoth, ScenarioRedisKill, ScenarioPostgres,
	ScenarioStorm, ScenarioBroker, ScenarioMalformed, ScenarioZombie, ScenarioFastClock,
	ScenarioRedisFailover, ScenarioKillOneCluster, ScenarioRedisBlips, ScenarioRetryJobZombie,
	ScenarioRedisOutage, ScenarioPostgresOutage, ScenarioCombined, ScenarioKillOneTopic, ScenarioBrokerTopic,
	ScenarioKillBusy, ScenarioRolling, ScenarioRollingUpgrade, ScenarioRollingConfig, ScenarioTwoDeployments,
	ScenarioStartWithoutRedis, ScenarioFailoverDegraded, ScenarioReloadConfig, ScenarioReshard}, ChannelScenarios()...)

// ChannelScenarios are the kill-one and the storm of every chat platform's target but
// DingTalk's (whose are kill-one and storm), in the registry's order: kill-one-wecom,
// storm-wecom, kill-one-feishu, ….
func ChannelScenarios() []string {
	var out []string
	for _, kind := range chatKinds {
		if kind != dingtalk.Kind {
			out = append(out, killOneOf(kind), stormOf(kind))
		}
	}
	return out
}

// topicScenarios deliver every alert to the topic target "orders" instead of a robot
// group: what counts as an acceptance is a distinct message a consumer of the business
// topic received, at the broker's store time (the broker's clock), and a restart of the
// broker is an ambiguous moment for sends in flight.
var topicScenarios = map[string]bool{ScenarioKillOneTopic: true, ScenarioBrokerTopic: true}

// tuning is a scenario's own settings of the replicas' configuration; zero fields take
// the suite's defaults (defaultTuning).
type tuning struct {
	// lease is scheduler.lease.
	lease time.Duration
	// retryMaxDelay is scheduler.retryMaxDelay: it also caps the broker's redelivery of
	// a message handed back.
	retryMaxDelay time.Duration
	// claimLease is failedSends.claimLease.
	claimLease time.Duration
	// redisProxy: the replicas reach Redis through a proxy the scenario can cut.
	redisProxy bool
}

// defaultTuning: leases short enough that a replica frozen for a few seconds outlives
// them (zombie), retries that come back within seconds.
var defaultTuning = tuning{lease: 3 * time.Second, retryMaxDelay: 5 * time.Second, claimLease: 3 * time.Second}

var tunings = map[string]tuning{
	// The production lease: what a killed replica held moves by its liveness (3s), which
	// the scenario's bound (5s at p99) holds to; the lease is only the backstop.
	ScenarioKillOne: {lease: 30 * time.Second},
	// A blip (2-3s) must cost about its own length, no take-over (a silence of Redis
	// opens a quiet window) and no duplicate; the 8s lease, a backstop, stays out of it.
	ScenarioRedisBlips: {lease: 8 * time.Second, redisProxy: true},
	ScenarioCombined:   {lease: 8 * time.Second, redisProxy: true},
	// RocketMQ's 16 reconsumes at 1s apart are spent in under a minute: a bounded
	// consumer would dead-letter within a short outage.
	ScenarioRedisOutage: {retryMaxDelay: time.Second},
	// The proxy is how a replica is started while Redis is out of reach.
	ScenarioStartWithoutRedis: {redisProxy: true},
}

func tuningOf(scenario string) tuning {
	t := tunings[scenario]
	config.Default(&t.lease, defaultTuning.lease)
	config.Default(&t.retryMaxDelay, defaultTuning.retryMaxDelay)
	config.Default(&t.claimLease, defaultTuning.claimLease)
	return t
}

// topologies says which scenarios run on another Redis than the stack's single node,
// with which redis.durability.
var topologies = map[string]struct{ topology, durability string }{
	ScenarioRedisFailover:    {"sentinel", "replicas=1"},
	ScenarioFailoverDegraded: {"sentinel", "replicas=1"},
	ScenarioKillOneCluster:   {"redis-cluster", "write"},
}

// Options choose the scenarios and their sizes.
type Options struct {
	// RepoRoot is the repository root. Default: found from the working directory.
	RepoRoot string
	// Scenarios to run, by name. Default AllScenarios.
	Scenarios []string
	// Alerts is how many alerts the kill-one scenarios publish (kill-one, -cluster,
	// -topic, -wecom, -feishu). Default 2000.
	Alerts int
	// OtherAlerts is how many alerts every other scenario publishes. Default 400.
	OtherAlerts int
	// MaxDelay: alert delays are spread uniformly over [0, MaxDelay]. Default 60s.
	MaxDelay time.Duration
	// PublishOver spreads the publishing of a scenario's alerts over this long.
	// Default 30s.
	PublishOver time.Duration
	// Kills is how many times kill-one SIGKILLs a replica. Default 5.
	Kills int
	// Outage is how long a stopped component (Redis, Postgres, broker, replicas) stays
	// down. Default 5s.
	Outage time.Duration
	// Storm is how long the storms of scenarios storm, storm-wecom and storm-feishu last.
	// Default 40s.
	Storm time.Duration
	// LongOutage is how long Redis or Postgres stays down in redis-outage and
	// postgres-outage: longer than RocketMQ's whole default reconsume schedule on the test
	// levels (16 tries, 4.5 minutes), after which a bounded consumer would dead-letter.
	// Default 5m.
	LongOutage time.Duration
	// Drain bounds the wait for every alert after the last one was due. Default 120s.
	Drain time.Duration
	// Settle is how long to keep counting after every alert arrived, to catch late
	// duplicates. Default 5s.
	Settle time.Duration
	// StackDir, when set, is the private stack's state directory, kept after the run (and
	// reused by a later run). Default a temporary directory, removed at the end.
	StackDir string
	// KeepStack leaves the private stack running at the end.
	KeepStack bool
	// Log receives progress lines. Default discarded.
	Log io.Writer
	// Seed makes delays, kill moments and the combined schedule reproducible: each
	// scenario draws from a generator seeded by Seed and its name, so one scenario run
	// alone with the seed of a full run repeats its schedule. Default random.
	Seed uint64
	// CombinedFor is how long scenario combined publishes and injects faults. Default 5m.
	CombinedFor time.Duration
}

func (o Options) withDefaults() (Options, error) {
	if o.RepoRoot == "" {
		root, err := findRepoRoot()
		if err != nil {
			return o, err
		}
		o.RepoRoot = root
	}
	if len(o.Scenarios) == 0 {
		o.Scenarios = AllScenarios
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defd := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&o.Alerts, 2000)
	def(&o.OtherAlerts, 400)
	def(&o.Kills, 5)
	defd(&o.MaxDelay, 60*time.Second)
	defd(&o.PublishOver, 30*time.Second)
	defd(&o.Outage, 5*time.Second)
	defd(&o.Storm, 40*time.Second)
	defd(&o.LongOutage, 5*time.Minute)
	defd(&o.Drain, 120*time.Second)
	defd(&o.Settle, 5*time.Second)
	defd(&o.CombinedFor, 5*time.Minute)
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Seed == 0 {
		o.Seed = rand.Uint64()
	}
	return o, nil
}

func findRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "local", "up")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chaos: cannot find the repository root (deploy/local/up) above the working directory")
		}
		dir = parent
	}
}

// Row is the result of one scenario.
type Row struct {
	Scenario string
	// Published counts the valid alerts published (each with a distinct RD_ID).
	Published int
	// Delivered counts the valid alerts the chat simulator accepted at least once,
	// or in a topic scenario, the consumer of the business topic received.
	Delivered int
	// Lost lists the valid alerts never accepted; Lost = len(LostIDs).
	Lost    int
	LostIDs []string
	// Duplicates counts extra acceptances of an alert that no ambiguity explains.
	Duplicates int
	// AmbiguousTimeout counts extra acceptances of alerts whose earlier copy DingTalk
	// accepted in a request the sender gave up on (HTTP timeout, dropped connection): a
	// resend is by design. Each such copy excuses one extra; TimeoutBound counts them.
	AmbiguousTimeout, TimeoutBound int
	// AmbiguousCrash counts extra acceptances of alerts whose earlier copy was in a
	// request a fault can have left without its release: on the wire, or answered within
	// releaseWindow, when its replica was SIGKILLed or frozen, or when the store that
	// holds the release lost acknowledged writes (Redis SIGKILLed, a failover), or the
	// broker stopped (see fault). Each such copy excuses one extra; CrashBound counts
	// them, so the faults explain at most CrashBound duplicates, alert by alert.
	AmbiguousCrash, CrashBound int
	// Rejected counts failed_sends rows with status rejected.
	Rejected int
	// Malformed counts the malformed inputs published; MalformedOK those recorded as
	// rejected with the expected reason and a readable detail.
	Malformed, MalformedOK int
	// MalformedProblems describes every malformed input not recorded as expected.
	MalformedProblems []string
	// Early counts acceptances before the due time by the simulator's clock (must be 0).
	Early int
	// MaxLateness and P99Lateness are measured from the due time to the first
	// acceptance, by the simulator's clock.
	MaxLateness, P99Lateness time.Duration
	// LatenessBound, when not 0, is the p99 lateness the scenario promises (redis-blips:
	// its longest blip plus 2s).
	LatenessBound time.Duration
	// OverLimit is the simulator's count of requests over a robot's rate limits (must be
	// 0: the simulator holds every robot to the sender's own limit per window, and a
	// Feishu bot to Feishu's 5 per second as well).
	OverLimit int
	// DLQ counts the messages in the consumer group's dead-letter queue at the end (must
	// be 0); -1 when it could not be measured.
	DLQ int64
	// PastBudget counts redeliveries of messages the replicas had handed back more than
	// 16 times (RocketMQ's default maximum reconsume times, after which a default consumer
	// dead-letters), from their rocketdelay_message_reconsume_times histograms.
	PastBudget int
	// Faults describes what was injected.
	Faults string
	// Observed says what the scenario's own mechanism did, from the replicas' metrics
	// (kill-busy: alerts parked and adopted; topic scenarios: batch sizes, the rate), and
	// in a scenario of chat targets how close the robots came to their limits, from what
	// the simulator accepted (storms: how many answers were injected faults).
	Observed string
	// Problems lists each check of the scenario's own mechanism that failed (kill-busy:
	// nothing was parked or adopted; topic scenarios: a batch past the rate's burst, a
	// rate above targets.orders.topic.ratePerSecond; chat targets: a robot that accepted
	// more than its limit within a window, or a Feishu bot more than 5 within a sixtieth
	// of it, a message accepted by a robot of another kind; storms: a phase no request
	// met).
	Problems []string
	// Duration is the scenario's wall time.
	Duration time.Duration
	// Seed is the seed of the scenario's generator (Options.Seed).
	Seed uint64
	// Err is set when the scenario could not run to its end.
	Err error
}

// Pass reports whether the row meets the pass criteria: it is Correct, and its p99
// lateness is within its bound.
func (r Row) Pass() bool {
	return r.Correct() && (r.LatenessBound == 0 || r.P99Lateness <= r.LatenessBound)
}

// Correct reports whether the row's behaviour was right, whatever the machine's speed:
// nothing lost, no duplicate past what its timeouts and faults explain, nothing early,
// nothing over a robot's limit, nothing dead-lettered, every malformed input rejected as
// expected, every check of the scenario's mechanism met, no error. make test asserts
// this; the lateness bound is the report's (make chaos).
func (r Row) Correct() bool {
	return r.Err == nil && r.Lost == 0 && r.Duplicates == 0 && r.Early == 0 && r.DLQ == 0 && r.OverLimit == 0 &&
		r.MalformedOK == r.Malformed && len(r.MalformedProblems) == 0 && len(r.Problems) == 0
}

// Run starts a private stack, runs the scenarios of opts one after the other (each with
// its own topic, group, Redis key prefix, Postgres schema, simulator and two fresh
// replicas), stops the stack and returns one row per scenario. A scenario that fails
// to run has its Err set; Run's error is for what prevents every scenario.
func Run(ctx context.Context, opts Options) ([]Row, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	r := &runner{opts: opts, nonce: fmt.Sprintf("%04x", rand.Uint32()&0xffff), logf: func(format string, args ...any) {
		fmt.Fprintf(opts.Log, "[chaos %s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
	}}
	// rocketmq-client-go and go-redis log process-wide; keep them out of the table's way.
	scheduler.RouteClientLog(slog.New(slog.DiscardHandler))
	store.RouteRedisLog(slog.New(slog.DiscardHandler))
	r.work, err = os.MkdirTemp("", "rocketdelay-chaos-run-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.work)
	r.logf("building cmd/rocketdelay")
	if r.bin, err = BuildBinary(ctx, opts.RepoRoot, r.work); err != nil {
		return nil, err
	}
	r.logf("starting a private stack (deploy/local/up --profile test, own state dir and ports)")
	r.stack, err = StartStack(ctx, StackOptions{RepoRoot: opts.RepoRoot, Dir: opts.StackDir, Log: opts.Log})
	if err != nil {
		return nil, err
	}
	defer func() {
		if opts.KeepStack {
			r.logf("leaving the private stack running in %s", r.stack.Dir)
			return
		}
		r.logf("stopping the private stack")
		if err := r.stack.Stop(context.WithoutCancel(ctx)); err != nil {
			r.logf("stopping the private stack: %v", err)
		}
	}()
	r.logf("private stack: %s, %s, %s", r.stack.Env["ROCKETDELAY_NAMESRV"], r.stack.Env["ROCKETDELAY_REDIS_URL"], r.stack.Dir)
	r.logf("seed %d (rerun one scenario with it: -scenarios NAME -seed %d)", opts.Seed, opts.Seed)
	var rows []Row
	for _, name := range opts.Scenarios {
		if ctx.Err() != nil {
			break
		}
		fn, ok := scenarios[name]
		if !ok {
			rows = append(rows, Row{Scenario: name, Err: fmt.Errorf("unknown scenario %q", name)})
			continue
		}
		r.logf("scenario %s: start", name)
		start := time.Now()
		row := r.runScenario(ctx, name, fn, opts.Seed)
		row.Seed = opts.Seed
		row.Duration = time.Since(start).Round(time.Second)
		r.logf("scenario %s: done in %s: published %d delivered %d lost %d dup %d (ambiguous %d+%d) rejected %d max late %s err %v",
			name, row.Duration, row.Published, row.Delivered, row.Lost, row.Duplicates, row.AmbiguousTimeout, row.AmbiguousCrash,
			row.Rejected, row.MaxLateness, row.Err)
		rows = append(rows, row)
	}
	return rows, ctx.Err()
}

// scenarioStream is the stream of name's generator: one per scenario, whatever else runs.
func scenarioStream(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

type runner struct {
	opts  Options
	logf  func(format string, args ...any)
	work  string
	bin   string
	stack *Stack
	// nonce is this run's own (not the seed's): it tells its topics, key prefixes and
	// schemas from an earlier run's on a kept stack.
	nonce string
	// prevBin is the previous release's build (previousBinary), made once a run when a
	// scenario needs it, of commit prevCommit.
	prevBin, prevCommit string
}

// scenarioFunc drives one scenario on a prepared env: it publishes and injects faults,
// and returns when the publishing and fault script are done.
type scenarioFunc func(ctx context.Context, e *env) error

var scenarios = map[string]scenarioFunc{
	ScenarioBaseline:  runBaseline,
	ScenarioKillOne:   runKillOne,
	ScenarioKillBoth:  runKillBoth,
	ScenarioRedisKill: runRedisKill,
	ScenarioPostgres:  runPostgres,
	ScenarioStorm:     runStorm,
	ScenarioBroker:    runBroker,
	ScenarioMalformed: runMalformed,

	ScenarioRedisOutage:    runRedisOutage,
	ScenarioPostgresOutage: runPostgresOutage,
	ScenarioZombie:         runZombie,
	ScenarioFastClock:      runFastClock,
	ScenarioRedisFailover:  runRedisFailover,
	ScenarioKillOneCluster: runKillOne,
	ScenarioRedisBlips:     runRedisBlips,
	ScenarioRetryJobZombie: runRetryJobZombie,
	ScenarioCombined:       runCombined,
	ScenarioKillOneTopic:   withTopicCluster(runKillOne),
	ScenarioBrokerTopic:    withTopicCluster(runBroker),
	ScenarioKillBusy:       runKillBusy,
	ScenarioRolling:        runRolling,

	ScenarioRollingUpgrade:    runRollingUpgrade,
	ScenarioRollingConfig:     runRollingConfig,
	ScenarioReshard:           runReshard,
	ScenarioTwoDeployments:    runTwoDeployments,
	ScenarioStartWithoutRedis: runStartWithoutRedis,
	ScenarioFailoverDegraded:  runFailoverDegraded,
	ScenarioReloadConfig:      runRollingConfig,
}

func init() {
	for _, kind := range chatKinds {
		scenarios[killOneOf(kind)], scenarios[stormOf(kind)] = runKillOne, runStorm
	}
}

// env is one scenario's world.
type env struct {
	r    *runner
	name string
	// rng draws the published alerts' delays (the publishing goroutine's), faultRNG the
	// fault script's moments and kinds: one generator each, so that the two goroutines
	// never share one and a seed repeats the same schedule.
	rng, faultRNG *rand.Rand
	idPrefix      string
	topic         string
	group         string
	prefix        string
	dsn           string
	sim           *simulator
	producer      *wire.Producer
	raw           *rawProducer
	// kind is the kind of the chat target the scenario's alerts go to (kindOf), target
	// its name, robots its robots.
	kind, target string
	robots       []chatsim.Robot
	// sink consumes the business topic of the topic target, in a topic scenario.
	sink *topicsink.Sink

	tuning tuning
	// redisProxy, with tuning.redisProxy, stands between the replicas and Redis.
	redisProxy *netproxy.Proxy

	mu       sync.Mutex
	replicas []*replica
	due      map[string]time.Time // valid alerts published
	faults   []fault              // moments that can leave an accepted copy without its release
	notes    []string
	cases    []malformedCase // malformed inputs published
	serial   int
	// scrapes holds each replica instance's last /metrics, by instance name: taken just
	// before a SIGKILL and at the end, so the counters of a killed instance still count.
	scrapes map[string]metricFamilies
	// ports maps the local port of a replica instance's connection, as scraped, to the
	// instance ("" when two instances used it): the broker records it as a message's
	// BornHost.
	ports map[int]string
	// clockOffsets, when set, are how far each replica's clock is off the true time
	// (serve --clock-offset). Early and lateness are measured by the simulator's clock
	// all the same.
	clockOffsets []time.Duration
	// latenessBound is the p99 lateness the scenario promises; 0: none.
	latenessBound time.Duration
	// rdb reads the scenario's wheel stage on the stack's single Redis node (nil on
	// another topology): what a replica holds when it is SIGKILLed.
	rdb *redis.Client
	// killed are the alerts the SIGKILLed replicas held (claims, parks) at their kills;
	// kills are the moments of the kills.
	killed map[string]bool
	kills  []time.Time
	// killedBound is the p99 lateness the scenario promises the killed replicas' alerts;
	// 0: none. rateBacklog is added to it: how long a cluster of alerts due at once takes
	// to leave at its target's rate (withTopicCluster).
	killedBound time.Duration
	rateBacklog time.Duration
	// unmet lists the storm phases no request met (runStorm).
	unmet []string

	// The change scenarios (change.go) give replicas their own build and configuration:
	// bins[i], when set, is replica i's binary instead of the current build; revision[i]
	// is its configuration's revision, which reconfigure (when set) applies to the
	// configuration it writes; extraRobots are robots of that configuration's targets
	// beyond the usual ones (for the simulator, and its limits).
	bins        [2]string
	revision    [2]int
	reconfigure func(revision int, d *configData)
	extraRobots []chatsim.Robot
}

func (e *env) note(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	e.mu.Lock()
	e.notes = append(e.notes, msg)
	e.mu.Unlock()
	e.r.logf("  %s: %s", e.name, msg)
}

func (e *env) addFault(f fault) {
	e.mu.Lock()
	e.faults = append(e.faults, f)
	e.mu.Unlock()
}

func (r *runner) runScenario(ctx context.Context, name string, fn scenarioFunc, seed uint64) (row Row) {
	row.Scenario = name
	stream := scenarioStream(name)
	e := &env{r: r, name: name, due: map[string]time.Time{}, scrapes: map[string]metricFamilies{}, ports: map[int]string{}, tuning: tuningOf(name),
		rng: rand.New(rand.NewPCG(seed, stream)), faultRNG: rand.New(rand.NewPCG(seed, stream+1))}
	short := randHex(e.rng, 3)
	e.idPrefix = short + "-" + name
	// The topic, the key prefix and the schema carry the run's nonce too: a run with the
	// seed of an earlier one on the same kept stack (-stack-dir) publishes the same ids,
	// and must not find the earlier run's done markers and rows.
	e.topic = "rd_chaos_" + strings.ReplaceAll(name, "-", "_") + "_" + short + r.nonce
	e.group = e.topic
	e.prefix = "rdchaos" + short + r.nonce
	e.kind = kindOf(name)
	e.target = chatTargets[e.kind]
	defer e.cleanup()
	if setup := setups[name]; setup != nil {
		if err := setup(ctx, e); err != nil {
			row.Err = err
			return row
		}
	}
	if err := e.prepare(ctx); err != nil {
		row.Err = err
		return row
	}
	runErr := fn(ctx, e)
	if runErr != nil {
		row.Err = runErr
	}
	// The replicas that were stopped are running again; wait for every alert.
	e.waitAll(ctx)
	e.measure(ctx, &row)
	row.LatenessBound = e.latenessBound
	return row
}

func (e *env) prepare(ctx context.Context) error {
	if t := topologies[e.name]; t.topology != "" {
		if err := e.r.stack.StartTopology(ctx, t.topology); err != nil {
			return err
		}
		e.note("Redis: %s, redis.durability %s", t.topology, t.durability)
	}
	if topologies[e.name].topology == "" {
		opt, err := redis.ParseURL(e.r.stack.Env["ROCKETDELAY_REDIS_URL"])
		if err != nil {
			return fmt.Errorf("chaos: the stack's Redis URL: %w", err)
		}
		e.rdb = redis.NewClient(opt)
	}
	e.robots = chatRobots(e.tokenPrefix(), e.kind)
	for _, rb := range e.extraRobots {
		if rb.Kind == e.kind {
			e.robots = append(e.robots, rb)
		}
	}
	e.sim = startSimulator(e.simRobots(), 3*time.Second, regexp.MustCompile(scenarioIDPattern))
	if e.kind != config.KindDingTalk {
		e.note("every alert for the %s target %s (%d robots)", e.kind, e.target, len(e.robots))
	}
	var err error
	if e.tuning.redisProxy {
		u, err := url.Parse(e.r.stack.Env["ROCKETDELAY_REDIS_URL"])
		if err != nil {
			return fmt.Errorf("chaos: the stack's Redis URL: %w", err)
		}
		if e.redisProxy, err = netproxy.Start(u.Host); err != nil {
			return err
		}
	}
	if e.dsn, err = migratedSchema(ctx, e.r.stack.Env["ROCKETDELAY_POSTGRES_URL"], "chaos_"+strings.ReplaceAll(e.idPrefix, "-", "_")+"_"+e.r.nonce); err != nil {
		return err
	}
	ns := e.r.stack.Env["ROCKETDELAY_NAMESRV"]
	if topicScenarios[e.name] {
		if e.sink, err = topicsink.Start(ctx, ns, e.bizTopic()); err != nil {
			return err
		}
		e.note("every alert for the topic target orders (topic %s), received by a consumer of it", e.bizTopic())
	}
	if e.producer, err = wire.NewProducer(wire.ProducerOptions{NameServers: []string{ns}, Topic: e.topic}); err != nil {
		return err
	}
	if e.raw, err = newRawProducer(ns, e.topic); err != nil {
		return err
	}
	for i := range 2 {
		if _, err := e.startReplica(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// migratedSchema creates schema on the private Postgres and applies every migration in
// it; it returns a DSN selecting it.
func migratedSchema(ctx context.Context, dsn, schema string) (string, error) {
	sch, err := localstack.NewSchema(ctx, dsn, schema)
	if err != nil {
		return "", err
	}
	defer sch.Close(ctx, false) // the private stack goes with its schemas
	if err := sch.Migrate(ctx); err != nil {
		return "", err
	}
	return sch.DSN, nil
}

func (e *env) replicaEnv() []string {
	s := e.r.stack.Env
	redisURL := s["ROCKETDELAY_REDIS_URL"]
	if e.redisProxy != nil {
		if u, err := url.Parse(redisURL); err == nil {
			u.Host = e.redisProxy.Addr()
			redisURL = u.String()
		}
	}
	vars := []string{
		"ROCKETDELAY_NAMESRV=" + s["ROCKETDELAY_NAMESRV"],
		"ROCKETDELAY_BROKERS=" + s["ROCKETDELAY_BROKERS"],
		"ROCKETDELAY_REDIS_URL=" + redisURL,
		"ROCKETDELAY_POSTGRES_URL=" + e.dsn,
		"ROCKETDELAY_LEVELS=" + s["ROCKETDELAY_LEVELS"],
		"ROCKETDELAY_TOPIC=" + e.topic,
		"ROCKETDELAY_GROUP=" + e.group,
		"ROCKETDELAY_REDIS_KEY_PREFIX=" + e.prefix,
	}
	switch t := topologies[e.name]; t.topology {
	case "sentinel": // these replace the URL above
		vars = append(vars, "ROCKETDELAY_REDIS_SENTINEL="+s["ROCKETDELAY_LOCAL_SENTINEL"],
			"ROCKETDELAY_REDIS_SENTINEL_MASTER="+s["ROCKETDELAY_LOCAL_SENTINEL_MASTER"], "ROCKETDELAY_REDIS_DURABILITY="+t.durability)
	case "redis-cluster":
		vars = append(vars, "ROCKETDELAY_REDIS_CLUSTER="+s["ROCKETDELAY_LOCAL_REDIS_CLUSTER"], "ROCKETDELAY_REDIS_DURABILITY="+t.durability)
	}
	return vars
}

// startReplica starts replica i (0 or 1), replacing a dead one, and waits until it is
// ready.
func (e *env) startReplica(ctx context.Context, i int) (*replica, error) {
	rp, err := e.launch(ctx, i)
	if err != nil {
		return nil, err
	}
	if err := rp.waitReady(ctx, 90*time.Second, e.logPath(i)); err != nil {
		rp.kill()
		return nil, err
	}
	return rp, nil
}

// launch starts replica i (0 or 1), replacing a dead one, and returns at once.
func (e *env) launch(ctx context.Context, i int) (*replica, error) {
	e.mu.Lock()
	e.serial++
	name := fmt.Sprintf("%s-r%d-%d", e.name, i, e.serial)
	e.mu.Unlock()
	var args []string
	if i < len(e.clockOffsets) && e.clockOffsets[i] != 0 {
		args = append(args, "--clock-offset", e.clockOffsets[i].String())
	}
	root, err := e.sim.listen(name)
	if err != nil {
		return nil, err
	}
	cfg, err := e.writeConfig(name, root, e.revision[i])
	if err != nil {
		return nil, err
	}
	bin := e.r.bin
	if e.bins[i] != "" {
		bin = e.bins[i]
	}
	rp, err := launchReplica(bin, cfg, e.logPath(i), name, e.replicaEnv(), args...)
	if err != nil {
		return nil, err
	}
	rp.root = root
	e.mu.Lock()
	for len(e.replicas) <= i {
		e.replicas = append(e.replicas, nil)
	}
	e.replicas[i] = rp
	e.mu.Unlock()
	return rp, nil
}

// logPath is the log file of replica i's instances.
func (e *env) logPath(i int) string {
	return filepath.Join(e.r.stack.Dir, "logs", fmt.Sprintf("chaos-%s-r%d.log", e.name, i))
}

func (e *env) replica(i int) *replica {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.replicas[i]
}

// restartReplica SIGKILLs replica i, waits down, and starts it again.
func (e *env) restartReplica(ctx context.Context, i int, down time.Duration) error {
	e.killReplicas(i)
	sleep(ctx, down)
	_, err := e.startReplica(ctx, i)
	return err
}

// killReplicas scrapes the metrics of the replicas is, then SIGKILLs them all at once
// and records the fault of each.
func (e *env) killReplicas(is ...int) {
	reps := make([]*replica, len(is))
	for k, i := range is {
		reps[k] = e.replica(i)
		e.scrape(reps[k])
		held := e.heldBy(reps[k])
		e.mu.Lock()
		if e.killed == nil {
			e.killed = map[string]bool{}
		}
		for _, id := range held {
			e.killed[id] = true
		}
		e.mu.Unlock()
	}
	at := time.Now()
	e.mu.Lock()
	e.kills = append(e.kills, at)
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, rp := range reps {
		wg.Go(rp.kill)
	}
	wg.Wait()
	for _, rp := range reps {
		e.addFault(fault{what: "sigkill", instance: rp.name, start: at, end: time.Now()})
	}
}

// killedAlert reports whether alert id, due at due, is one of the kills': held (claimed
// or parked) by a replica when it was SIGKILLed, or due within a liveness period after a
// kill (a killed replica's wheel may have held it; the other replicas fire it once they
// know the killed one departed). The caller holds e.mu.
func (e *env) killedAlert(id string, due time.Time) bool {
	if e.killed[id] {
		return true
	}
	for _, k := range e.kills {
		if !due.Before(k) && due.Sub(k) <= config.DefaultLiveness {
			return true
		}
	}
	return false
}

// heldBy lists the alerts replica rp holds in the wheel stage, none when it cannot
// tell: the ids whose owner is a claim token of rp (its replica id, which names its
// process id, "/", a number), and its holdings in the liveness index (parks too).
func (e *env) heldBy(rp *replica) []string {
	if e.rdb == nil || rp == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	stage := "{" + e.prefix + "}:"
	owners, err := e.rdb.HGetAll(ctx, stage+"owner").Result()
	if err != nil {
		e.r.logf("  %s: cannot read what %s holds: %v", e.name, rp.name, err)
		return nil
	}
	pid := fmt.Sprintf("-%d-", rp.cmd.Process.Pid)
	held := map[string]bool{}
	rids := map[string]bool{}
	for id, token := range owners {
		if rid, _, ok := strings.Cut(token, "/"); ok && strings.Contains(rid, pid) {
			held[id], rids[rid] = true, true
		}
	}
	live, _ := e.rdb.ZRange(ctx, stage+"live", 0, -1).Result()
	for _, rid := range live {
		if strings.Contains(rid, pid) {
			rids[rid] = true
		}
	}
	for rid := range rids {
		members, _ := e.rdb.ZRangeByLex(ctx, stage+"held", &redis.ZRangeBy{Min: "[" + rid + "/", Max: "(" + rid + "0"}).Result()
		for _, m := range members {
			held[strings.TrimPrefix(m, rid+"/")] = true
		}
	}
	return slices.Collect(maps.Keys(held))
}

func (e *env) cleanup() {
	e.mu.Lock()
	reps := slices.Clone(e.replicas)
	e.mu.Unlock()
	var wg sync.WaitGroup
	for _, rp := range reps {
		wg.Add(1)
		go func() { defer wg.Done(); rp.stop() }()
	}
	wg.Wait()
	if e.producer != nil {
		_ = e.producer.Close()
	}
	if e.raw != nil {
		e.raw.close()
	}
	if e.sim != nil {
		e.sim.close()
	}
	if e.rdb != nil {
		_ = e.rdb.Close()
	}
	if e.sink != nil {
		e.sink.Close()
	}
	if e.redisProxy != nil {
		e.redisProxy.Close()
	}
}

// publish publishes n valid alerts, evenly over `over`, with delays uniform in
// [0, maxDelay]; a publish that fails is retried with the same id and due time for up
// to 2 minutes (a broker restart), so a retry of a send that did land is a duplicate
// input the scheduler must absorb.
func (e *env) publish(ctx context.Context, n int, over, maxDelay time.Duration) error {
	start := time.Now()
	for i := range n {
		if !sleep(ctx, time.Until(start.Add(time.Duration(int64(over)*int64(i)/int64(max(n, 1)))))) {
			return ctx.Err()
		}
		id := fmt.Sprintf("%s-%05d", e.idPrefix, i)
		delay := time.Duration(e.rng.Int64N(int64(maxDelay) + 1))
		at := time.Now().Add(delay).Truncate(time.Millisecond)
		pub := wire.Publication{Target: e.target, At: at, ID: id, Body: alertBody(e.kind, e.name, id, i)}
		if e.sink != nil {
			// Any bytes, passed through: the id, then a byte that is not UTF-8.
			pub.Target, pub.Raw, pub.Tag, pub.Body = "orders", true, "chaos", append([]byte("chaos "+id), 0xff)
		}
		if err := e.publishOne(ctx, pub); err != nil {
			return err
		}
	}
	return nil
}

// bizTopic is the business topic of the topic target "orders".
func (e *env) bizTopic() string { return e.topic + "_biz" }

// acceptances returns, by id, each distinct delivery of a valid alert: accepted by the
// simulator (at by its clock, with the request that carried it), or in a topic
// scenario, each distinct message the business consumer received (at its broker's
// store time, by the replica whose connection's port its BornHost names, when the
// suite saw that port).
func (e *env) acceptances() map[string][]acceptance {
	if e.sink == nil {
		return e.sim.acceptances()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string][]acceptance{}
	for id := range e.due {
		for _, r := range e.sink.Copies(id) {
			at := time.UnixMilli(r.Msg.StoreTimestamp)
			a := acceptance{at: at, sent: at, answered: at, stored: true}
			if _, port, ok := strings.Cut(r.Msg.BornHost, ":"); ok {
				if p, err := strconv.Atoi(port); err == nil {
					a.instance = e.ports[p]
				}
			}
			out[id] = append(out[id], a)
		}
	}
	return out
}

func (e *env) publishOne(ctx context.Context, pub wire.Publication) error {
	e.mu.Lock()
	e.due[pub.ID] = pub.At
	e.mu.Unlock()
	deadline := time.Now().Add(2 * time.Minute)
	for attempt := 0; ; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := e.producer.Publish(pctx, pub)
		cancel()
		if err == nil {
			if attempt > 0 {
				e.r.logf("  %s: published %s after %d failed attempts", e.name, pub.ID, attempt)
			}
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("chaos: publish %s: %w", pub.ID, err)
		}
		if attempt == 0 {
			e.r.logf("  %s: publish %s failed, retrying: %v", e.name, pub.ID, err)
		}
		sleep(ctx, 500*time.Millisecond)
	}
}

// waitAll waits until every valid alert was accepted, at most Drain past the last due
// time, then Settle more.
func (e *env) waitAll(ctx context.Context) {
	e.mu.Lock()
	var last time.Time
	for _, at := range e.due {
		if at.After(last) {
			last = at
		}
	}
	e.mu.Unlock()
	deadline := last.Add(e.r.opts.Drain)
	if now := time.Now(); deadline.Before(now.Add(e.r.opts.Drain / 2)) {
		deadline = now.Add(e.r.opts.Drain / 2)
	}
	for time.Now().Before(deadline) {
		got := e.acceptances()
		missing := 0
		e.mu.Lock()
		for id := range e.due {
			if len(got[id]) == 0 {
				missing++
			}
		}
		e.mu.Unlock()
		if missing == 0 {
			break
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return
		}
	}
	sleep(ctx, e.r.opts.Settle)
}

func (e *env) measure(ctx context.Context, row *Row) {
	var err error
	e.mu.Lock()
	reps := slices.Clone(e.replicas)
	e.mu.Unlock()
	for _, rp := range reps {
		e.scrape(rp) // first: the ports of their connections name the senders of acceptances
	}
	got := e.acceptances()
	e.mu.Lock()
	defer e.mu.Unlock()
	row.Published = len(e.due)
	var late, killedLate []time.Duration
	var latest struct {
		id   string
		late time.Duration
	}
	valid := map[string][]acceptance{}
	for id, due := range e.due {
		cs := got[id]
		if len(cs) == 0 {
			row.LostIDs = append(row.LostIDs, id)
			continue
		}
		valid[id] = cs
		row.Delivered++
		first := cs[0].at
		for _, c := range cs {
			if c.at.Before(due) {
				row.Early++
			}
			if c.at.Before(first) {
				first = c.at
			}
		}
		late = append(late, first.Sub(due))
		if e.killedAlert(id, due) {
			killedLate = append(killedLate, first.Sub(due))
		}
		if l := first.Sub(due); l > latest.late {
			latest.id, latest.late = id, l
		}
	}
	amb := judge(valid, e.faults)
	unknown, total := 0, 0
	for _, cs := range valid {
		for _, c := range cs {
			total++
			if c.instance == "" {
				unknown++
			}
		}
	}
	if unknown > 0 {
		e.r.logf("  %s: %d of %d copies by no known replica instance (a fault of any replica can explain them)", e.name, unknown, total)
	}
	row.Duplicates, row.AmbiguousTimeout, row.AmbiguousCrash = amb.unexplained, amb.timeout, amb.crash
	row.TimeoutBound, row.CrashBound = amb.timeoutBound, amb.crashBound
	for _, id := range amb.unexplainedIDs {
		e.r.logf("  %s: duplicate %s no timeout or fault explains: accepted at %v (due %s)", e.name, id, times(valid[id]),
			e.due[id].Format("15:04:05.000"))
	}
	slices.Sort(row.LostIDs)
	row.Lost = len(row.LostIDs)
	if latest.id != "" {
		e.r.logf("  %s: the latest alert: %s, %s late (its replicas' logs are in %s)", e.name, latest.id,
			latest.late.Round(time.Millisecond), filepath.Join(e.r.stack.Dir, "logs"))
	}
	if len(late) > 0 {
		slices.Sort(late)
		q := quantile.Summarize(late)
		row.MaxLateness, row.P99Lateness = q.Max.Round(time.Millisecond), q.P99.Round(time.Millisecond)
	}
	if len(killedLate) > 0 {
		slices.Sort(killedLate)
		q := quantile.Summarize(killedLate)
		observe(row, "the kills' %d alerts (held by the killed replica, or due within %s of a kill): p99 %s, max %s late",
			len(killedLate), config.DefaultLiveness, q.P99.Round(time.Millisecond), q.Max.Round(time.Millisecond))
		if bound := e.killedBound + e.rateBacklog; e.killedBound > 0 && q.P99 > bound {
			row.Problems = append(row.Problems, fmt.Sprintf("the killed replicas' alerts were %s late at p99, past %s",
				q.P99.Round(time.Millisecond), bound))
		}
	}
	row.OverLimit = e.sim.Stats().OverLimit
	row.PastBudget = e.pastBudget()
	row.Faults = strings.Join(e.notes, "; ")
	e.checkMechanism(row, got)
	e.checkRejected(ctx, row)
	e.checkPending(ctx, row)
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if row.DLQ, err = scheduler.DLQDepth(dctx, []string{e.r.stack.Env["ROCKETDELAY_NAMESRV"]}, wire.Access{}, e.group, "chaos-"+e.idPrefix); err != nil {
		row.DLQ = -1
		e.r.logf("  %s: cannot measure the dead-letter queue: %v", e.name, err)
	}
}

// times lists when each copy was accepted, and by which replica instance.
func times(cs []acceptance) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.at.Format("15:04:05.000")
		if c.instance != "" {
			out[i] += " by " + c.instance
		}
	}
	return out
}

func randHex(rng *rand.Rand, n int) string {
	const digits = "0123456789abcdef"
	b := make([]byte, 2*n)
	for i := range b {
		b[i] = digits[rng.IntN(16)]
	}
	return string(b)
}

// pastBudget sums, over every replica instance's last scrape, the redeliveries their
// rocketdelay_message_reconsume_times histograms saw of messages handed back more than
// 16 times before. The caller holds e.mu.
func (e *env) pastBudget() int {
	h := e.histogramLocked("rocketdelay_message_reconsume_times")
	return int(h.count - h.cumulative(16))
}

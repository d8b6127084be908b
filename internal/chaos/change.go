package chaos

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// The change scenarios stage the routine changes of a deployment under a steady load,
// replica by replica as a Kubernetes rolling update makes them: a new release beside the
// previous one (rolling-upgrade), a new configuration beside the old one
// (rolling-config), a second deployment started on the same Redis key prefix
// (two-deployments) and a replica started while Redis is out of reach
// (start-without-redis). Each is judged at the simulator like every other scenario:
// nothing lost, nothing doubled, nothing early.

// previousReleaseFile names the previous release: the commit rolling-upgrade builds
// from the repository's git history and runs beside the current build.
const previousReleaseFile = "internal/chaos/previous-release"

// setups prepare a scenario's env before its replicas start (prepare).
var setups = map[string]func(ctx context.Context, e *env) error{
	ScenarioRollingUpgrade: setupPreviousRelease,
	ScenarioRollingConfig:  setupRollingConfig,
	ScenarioReloadConfig:   setupRollingConfig,
	ScenarioReshard:        setupReshard,
}

// previousRelease reads the commit of the previous release from previousReleaseFile
// under root: its first line that is neither blank nor a comment.
func previousRelease(root string) (string, error) {
	f, err := os.Open(filepath.Join(root, previousReleaseFile))
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			return line, nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("chaos: %s names no commit", previousReleaseFile)
}

// previousBinary builds the previous release once per run, from the git history of the
// repository (git archive of its commit into the run's work directory), and returns the
// binary and the commit.
func (r *runner) previousBinary(ctx context.Context) (bin, commit string, err error) {
	if r.prevBin != "" {
		return r.prevBin, r.prevCommit, nil
	}
	commit, err = previousRelease(r.opts.RepoRoot)
	if err != nil {
		return "", "", err
	}
	if out, err := exec.CommandContext(ctx, "git", "-C", r.opts.RepoRoot, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("chaos: the previous release %s is not in the repository's git history (a shallow clone?): %v %s",
			commit, err, strings.TrimSpace(string(out)))
	}
	src := filepath.Join(r.work, "previous-release")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", "", err
	}
	archive := exec.CommandContext(ctx, "sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh",
		r.opts.RepoRoot, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("chaos: extract the previous release %s: %v\n%s", commit, err, out)
	}
	r.logf("building the previous release %s (%s)", commit[:min(12, len(commit))], previousReleaseFile)
	binDir := filepath.Join(r.work, "previous-bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return "", "", err
	}
	if bin, err = BuildBinary(ctx, src, binDir); err != nil {
		return "", "", err
	}
	r.prevBin, r.prevCommit = bin, commit
	return bin, commit, nil
}

// setupPreviousRelease has both replicas start on the previous release.
func setupPreviousRelease(ctx context.Context, e *env) error {
	bin, commit, err := e.r.previousBinary(ctx)
	if err != nil {
		return err
	}
	e.bins = [2]string{bin, bin}
	e.note("both replicas start on the previous release %s", commit[:min(12, len(commit))])
	return nil
}

// rollingUpdate stops each replica in turn with SIGTERM, applies change(i) to what it
// starts with, and starts it again (ready before the next one stops), the first a third
// into the publishing and the second dwell after the first is ready: a rollout that
// leaves the two replicas different for a while.
func rollingUpdate(ctx context.Context, e *env, dwell time.Duration, change func(i int) string) error {
	start := time.Now()
	sleep(ctx, e.r.opts.PublishOver/3)
	for i := range 2 {
		if i > 0 {
			sleep(ctx, dwell)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err := e.roll(ctx, i, start, func() string { return change(i) }); err != nil {
			return err
		}
	}
	return nil
}

// roll stops replica i with SIGTERM (what Kubernetes sends), applies change to what it
// starts with, starts it again and waits until it is ready; the note says when, from
// start, and what changed.
func (e *env) roll(ctx context.Context, i int, start time.Time, change func() string) error {
	rp := e.replica(i)
	e.scrape(rp) // its counters survive its stop
	at := time.Now()
	rp.stop()
	stopped := time.Since(at)
	what := change()
	if _, err := e.startReplica(ctx, i); err != nil {
		return err
	}
	e.note("replica %d: SIGTERM at +%s, stopped in %s, %s, ready again %s after the SIGTERM", i,
		at.Sub(start).Round(100*time.Millisecond), stopped.Round(100*time.Millisecond), what,
		time.Since(at).Round(100*time.Millisecond))
	return nil
}

// reload applies change to what replica i's configuration file says, rewrites the file
// in place and waits until the replica runs it (rocketdelay_config_info names another
// content) and is ready again, without a restart of its process; the note says when,
// from start, and what changed.
func (e *env) reload(ctx context.Context, i int, start time.Time, change func() string) error {
	rp := e.replica(i)
	before, err := rp.configDigest()
	if err != nil {
		return err
	}
	at := time.Now()
	what := change()
	if _, err := e.writeConfig(rp.name, rp.root, e.revision[i]); err != nil {
		return err
	}
	for {
		if time.Since(at) > time.Minute {
			return fmt.Errorf("chaos: %s still runs configuration %s a minute after its file changed; see %s", rp.name, before, e.logPath(i))
		}
		if !sleep(ctx, 100*time.Millisecond) {
			return nil
		}
		if d, err := rp.configDigest(); err == nil && d != before {
			break
		}
	}
	if err := rp.waitReady(ctx, time.Minute, e.logPath(i)); err != nil {
		return err
	}
	e.note("replica %d: its file rewritten at +%s, %s, reloaded and ready again %s later, the same process", i,
		at.Sub(start).Round(100*time.Millisecond), what, time.Since(at).Round(100*time.Millisecond))
	return nil
}

// rolling-upgrade: the previous release (previousReleaseFile) and this one side by side
// under a steady load: both replicas start on the previous release, then each in turn is
// stopped with SIGTERM and started on the current build, the second a third of the
// publishing after the first (old+old, old+new, new+new). Nothing may be lost, doubled
// or early, and the p99 lateness stays within 1s.
func runRollingUpgrade(ctx context.Context, e *env) error {
	o := e.r.opts
	e.latenessBound = time.Second
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		return rollingUpdate(ctx, e, o.PublishOver/3, func(i int) string {
			e.bins[i] = ""
			return "started on the current build"
		})
	})
}

// The targets rolling-config adds and removes, and the robot it adds to "ops".
const (
	addedTarget   = "newt"
	removedTarget = "oldt"
)

// setupRollingConfig gives the scenario two revisions of the configuration. Revision 0
// (both replicas at start) has the usual targets and "oldt"; revision 1 has "newt"
// instead of "oldt" and a fifth robot in "ops". Each has a robot of its own.
func setupRollingConfig(_ context.Context, e *env) error {
	p := e.tokenPrefix()
	limit := senderLimits[dingtalk.Kind]
	removed := chatsim.Robot{Name: "d1", Kind: dingtalk.Kind, Token: p + "-" + removedTarget + "-1", Limit: limit}
	added := chatsim.Robot{Name: "n1", Kind: dingtalk.Kind, Token: p + "-" + addedTarget + "-1", Limit: limit}
	fifth := chatsim.Robot{Name: "r5", Kind: dingtalk.Kind, Token: p + "-ops-5", Limit: limit}
	e.extraRobots = []chatsim.Robot{removed, added, fifth}
	e.reconfigure = func(revision int, d *configData) {
		if revision == 0 {
			d.Targets = append(d.Targets, configTarget{Name: removedTarget, Kind: dingtalk.Kind, Robots: []chatsim.Robot{removed}})
			return
		}
		d.Targets = append(d.Targets, configTarget{Name: addedTarget, Kind: dingtalk.Kind, Robots: []chatsim.Robot{added}})
		for k := range d.Targets {
			if d.Targets[k].Name == chatTargets[dingtalk.Kind] {
				d.Targets[k].Robots = append(d.Targets[k].Robots, fifth)
			}
		}
	}
	return nil
}

// rolling-config: a configuration change rolled out replica by replica under a steady
// load, the replicas on different revisions for half the publishing: a target added
// ("newt"), a target removed ("oldt") and a robot added to "ops". Midway, the replica
// that has the new revision is restarted once more (a new pod rescheduled during the
// rollout): while it is away, the other hands off newt's alerts that fall due, and must
// keep them for it. Alerts for "ops" all along; for "newt" from the moment the first
// replica has it, at any delay; for "oldt" until the first replica's turn, each due at
// least half the dwell before the second replica's turn: the replica without "oldt"
// sends its alerts back to the topic for the one that has it, a step of about a second
// over the topic's queues, which it reaches within a few steps, not within none (an
// alert of a removed target due in the last moments of the last replica that has it
// can miss it, and is then rejected once unknownTargetWait passed, as after the
// removal). Published to the scheduler topic, so that either replica consumes each: the
// one that does not have its target must leave it to the one that does. Nothing may be
// lost, doubled, early or rejected. reload-config is the same change applied by
// rewriting each replica's file, which the replica reloads without a restart of its
// process (the mid-rollout restart stays a restart).
func runRollingConfig(ctx context.Context, e *env) error {
	o := e.r.opts
	dwell := o.PublishOver / 2
	first := make(chan time.Time, 1) // when the first replica runs revision 1
	// One generator per publishing goroutine (e.rng is publishDefault's), seeded from the
	// fault script's, which this scenario draws nothing else from.
	oldRNG := rand.New(rand.NewPCG(e.faultRNG.Uint64(), e.faultRNG.Uint64()))
	newRNG := rand.New(rand.NewPCG(e.faultRNG.Uint64(), e.faultRNG.Uint64()))
	changed := fmt.Sprintf("started with %q added, %q removed and a fifth robot in %q", addedTarget, removedTarget,
		chatTargets[dingtalk.Kind])
	start := time.Now()
	return concurrently(ctx,
		e.publishDefault(o.OtherAlerts),
		func(ctx context.Context) error { // "oldt": until the first turn, each due before the middle of the dwell
			over := o.PublishOver / 3
			until := start.Add(over + dwell/2)
			n := o.OtherAlerts / 4
			for k := range n {
				if !sleep(ctx, time.Until(start.Add(time.Duration(int64(over)*int64(k)/int64(n))))) {
					return nil
				}
				if err := e.publishTo(ctx, removedTarget, 20000+k, time.Duration(oldRNG.Int64N(int64(time.Until(until))))); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context) error { // "newt": from the first turn to the end of the publishing
			var at time.Time
			select {
			case at = <-first:
			case <-ctx.Done():
				return nil
			}
			over := max(time.Until(at.Add(o.PublishOver-o.PublishOver/3)), time.Second)
			n := o.OtherAlerts / 4
			begin := time.Now()
			for k := range n {
				if !sleep(ctx, time.Until(begin.Add(time.Duration(int64(over)*int64(k)/int64(n))))) {
					return nil
				}
				if err := e.publishTo(ctx, addedTarget, 10000+k, time.Duration(newRNG.Int64N(int64(o.MaxDelay)+1))); err != nil {
					return err
				}
			}
			return nil
		},
		func(ctx context.Context) error {
			// rolling-config restarts each replica with its new revision; reload-config
			// rewrites its file and lets it reload.
			apply := e.roll
			if e.name == ScenarioReloadConfig {
				apply = e.reload
			}
			sleep(ctx, o.PublishOver/3)
			if err := apply(ctx, 0, start, func() string { e.revision[0] = 1; return changed }); err != nil {
				return err
			}
			first <- time.Now()
			if !sleep(ctx, dwell/2) {
				return nil
			}
			if err := e.roll(ctx, 0, start, func() string { return "restarted on the same revision (a pod rescheduled mid-rollout)" }); err != nil {
				return err
			}
			if !sleep(ctx, dwell/2) {
				return nil
			}
			return apply(ctx, 1, start, func() string { e.revision[1] = 1; return changed })
		})
}

// publishTo publishes valid alert number k of the scenario for target, due in delay.
func (e *env) publishTo(ctx context.Context, target string, k int, delay time.Duration) error {
	id := fmt.Sprintf("%s-%05d", e.idPrefix, k)
	at := time.Now().Add(delay).Truncate(time.Millisecond)
	return e.publishOne(ctx, wire.Publication{Target: target, At: at, ID: id, Body: alertBody(dingtalk.Kind, e.name, id, k)})
}

// two-deployments: a second deployment (its own topic and consumer group) is started on
// the first's Redis key prefix a third into the publishing. It must refuse to start,
// naming the deployment that owns the prefix, and leave the first's alerts alone:
// nothing lost, doubled or early.
func runTwoDeployments(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/3)
		root, err := e.sim.listen(e.name + "-second")
		if err != nil {
			return err
		}
		cfg, err := e.writeConfig(e.name+"-second", root, 0)
		if err != nil {
			return err
		}
		logPath := filepath.Join(e.r.stack.Dir, "logs", "chaos-"+e.name+"-second.log")
		vars := append(e.replicaEnv(), "ROCKETDELAY_TOPIC="+e.topic+"_second", "ROCKETDELAY_GROUP="+e.group+"_second")
		rp, err := launchReplica(e.r.bin, cfg, logPath, e.name+"-second", vars)
		if err != nil {
			return err
		}
		select {
		case <-rp.done:
		case <-time.After(90 * time.Second):
			rp.kill()
			return fmt.Errorf("chaos: a second deployment on the prefix %s was still running after 90s; see %s", e.prefix, logPath)
		case <-ctx.Done():
			rp.kill()
			return nil
		}
		log, _ := os.ReadFile(logPath)
		if rp.cmd.ProcessState.Success() || !strings.Contains(string(log), e.group) {
			return fmt.Errorf("chaos: a second deployment on the prefix %s ended with %s without naming the owner %s; see %s",
				e.prefix, rp.cmd.ProcessState, e.group, logPath)
		}
		e.note("a second deployment (group %s_second) on the prefix refused to start (%s), naming the owner", e.group, rp.cmd.ProcessState)
		return nil
	})
}

// start-without-redis: a third into the publishing, replica 1 is SIGKILLed and started
// again while Redis is out of reach of both replicas (the proxy refuses every
// connection) for Outage. It must stay up and unready (/healthz 200, /readyz 503) and be
// ready once Redis is back; nothing may be lost, doubled or early.
func runStartWithoutRedis(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/3)
		e.killReplicas(1)
		e.redisProxy.Down()
		down := time.Now() // not a fault: a store out of reach loses no write
		rp, err := e.launch(ctx, 1)
		if err != nil {
			return err
		}
		sleep(ctx, o.Outage)
		client := &http.Client{Timeout: time.Second}
		health, _ := rp.get(client, "/healthz")
		ready, why := rp.get(client, "/readyz")
		if err := e.redisProxy.Up(); err != nil {
			return err
		}
		if rp.exited() || health != http.StatusOK || ready != http.StatusServiceUnavailable {
			return fmt.Errorf("chaos: a replica started while Redis was out of reach: exited %v, /healthz %d, /readyz %d %q; see %s",
				rp.exited(), health, ready, why, e.logPath(1))
		}
		if err := rp.waitReady(ctx, 90*time.Second, e.logPath(1)); err != nil {
			return err
		}
		e.note("replica 1 SIGKILLed and started while Redis was out of reach for %s: up and unready (/readyz %d %s), ready %s after Redis was back",
			o.Outage, ready, strings.Join(strings.Fields(why), " "), time.Since(down.Add(o.Outage)).Round(100*time.Millisecond))
		return nil
	})
}

// failover-degraded: the replicas use Redis through Sentinel with redis.durability
// replicas=1, and a third into the publishing the only Redis replica is SIGKILLed for
// Outage: every write falls short of the durability the operator chose, so alerts are
// held (handed back to RocketMQ) rather than acknowledged on the primary alone. The
// replicas must say so while it lasts (rocketdelay_redis_durability_met 0 on each), and
// once the Redis replica is back, deliver everything: nothing lost, doubled or early.
func runFailoverDegraded(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/3)
		_, primary, err := e.sentinelPrimary(ctx)
		if err != nil {
			return err
		}
		// The Redis node that is not the primary: the sentinel-primary process can be the
		// replica after an earlier failover.
		_, primaryPort, _ := strings.Cut(primary, ":")
		victim := "sentinel-replica"
		if port, err := e.r.stack.ListenPort("sentinel-replica"); err == nil && strconv.Itoa(port) == primaryPort {
			victim = "sentinel-primary"
		}
		at := time.Now()
		if err := e.r.stack.Kill(ctx, victim); err != nil {
			return err
		}
		sleep(ctx, o.Outage)
		said := make([]string, 0, 2)
		for i := range 2 {
			v, err := e.replica(i).gauge("rocketdelay_redis_durability_met")
			if err != nil {
				return err
			}
			if v != 0 {
				return fmt.Errorf("chaos: replica %d says rocketdelay_redis_durability_met %v %s after the only Redis replica was SIGKILLed", i, v, o.Outage)
			}
			said = append(said, fmt.Sprintf("replica %d: durability_met 0", i))
		}
		if err := e.r.stack.StartTopology(context.WithoutCancel(ctx), "sentinel"); err != nil {
			return err
		}
		back := time.Now()
		for i := range 2 {
			for v := 0.0; v != 1; {
				if time.Since(back) > time.Minute {
					return fmt.Errorf("chaos: replica %d still says rocketdelay_redis_durability_met %v a minute after the Redis replica was back", i, v)
				}
				if !sleep(ctx, 200*time.Millisecond) {
					return nil
				}
				if v, err = e.replica(i).gauge("rocketdelay_redis_durability_met"); err != nil {
					return err
				}
			}
		}
		e.note("the only Redis replica (%s) SIGKILLed at +%s for %s (%s); started again, both replicas met the durability again %s later",
			victim, (o.PublishOver / 3).Round(100*time.Millisecond), back.Sub(at).Round(100*time.Millisecond),
			strings.Join(said, ", "), time.Since(back).Round(100*time.Millisecond))
		return nil
	})
}

// metric reads the family name from the replica's /metrics.
func (r *replica) metric(name string) (*dto.MetricFamily, error) {
	code, body := r.get(&http.Client{Timeout: 5 * time.Second}, "/metrics")
	if code != http.StatusOK {
		return nil, fmt.Errorf("chaos: %s /metrics answered %d", r.name, code)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("chaos: %s /metrics: %w", r.name, err)
	}
	mf, ok := mfs[name]
	if !ok {
		return nil, fmt.Errorf("chaos: %s has no metric %s", r.name, name)
	}
	return mf, nil
}

// gauge reads the gauge name (the sum of its series) from the replica's /metrics.
func (r *replica) gauge(name string) (float64, error) {
	mf, err := r.metric(name)
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, m := range mf.GetMetric() {
		sum += m.GetGauge().GetValue()
	}
	return sum, nil
}

// configDigest is the digest of the configuration the replica runs
// (rocketdelay_config_info).
func (r *replica) configDigest() (string, error) {
	mf, err := r.metric("rocketdelay_config_info")
	if err != nil {
		return "", err
	}
	for _, m := range mf.GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "digest" {
				return l.GetValue(), nil
			}
		}
	}
	return "", fmt.Errorf("chaos: %s names no configuration digest", r.name)
}

// reshardTo is the shard count reshard rolls out; the replicas start with one.
const reshardTo = 3

// setupReshard gives the scenario two revisions of the configuration: redis.shards 1
// (both replicas at start) and reshardTo.
func setupReshard(_ context.Context, e *env) error {
	e.reconfigure = func(revision int, d *configData) {
		d.Shards = 1 + revision*(reshardTo-1)
	}
	return nil
}

// reshard: redis.shards changed from 1 to 3 under a steady load, replica by replica as
// rolling-upgrade changes the release: the first replica started with 3 starts the
// wheel stage's move (phase 1: both counts scanned, alerts placed as before) beside the
// other, which still runs 1; once the second runs 3 too, every live replica has acked
// the move and new alerts are placed in the new shards (phase 2). Nothing may be lost,
// doubled or early, the p99 lateness stays within 1s, and the move must have reached
// phase 2 with alerts placed in the new shards, or the scenario proves nothing.
func runReshard(ctx context.Context, e *env) error {
	o := e.r.opts
	e.latenessBound = time.Second
	changed := fmt.Sprintf("started with redis.shards %d", reshardTo)
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		start := time.Now()
		if !sleep(ctx, o.PublishOver/3) {
			return nil
		}
		if err := e.roll(ctx, 0, start, func() string { e.revision[0] = 1; return changed }); err != nil {
			return err
		}
		if !sleep(ctx, o.PublishOver/3) {
			return nil
		}
		// Replica 1, live in the old count alone, holds the move in phase 1.
		l, err := e.layout(ctx)
		if err != nil {
			return err
		}
		if l.String() != fmt.Sprintf("1>%d", reshardTo) {
			return fmt.Errorf("chaos: beside a replica of the old count the layout is %s, not phase 1 of the move", l)
		}
		e.note("the layout is %s beside the replica of the old count", l)
		if err := e.roll(ctx, 1, start, func() string { e.revision[1] = 1; return changed }); err != nil {
			return err
		}
		if err := e.awaitPhase2(ctx); err != nil {
			return err
		}
		if sleep(ctx, time.Until(start.Add(o.PublishOver))) {
			moved, err := e.rdb.Keys(ctx, "{"+e.prefix+"}:fwd:*").Result()
			if err != nil {
				return err
			}
			e.note("publishing over: %d alerts were placed in new shards", len(moved))
		}
		return nil
	})
}

// layout reads the deployment's layout record.
func (e *env) layout(ctx context.Context) (store.Layout, error) {
	l, ok, err := store.ReadLayout(ctx, e.rdb, e.prefix)
	if err == nil && !ok {
		err = errors.New("chaos: no layout is recorded")
	}
	return l, err
}

// awaitPhase2 waits, a bounded time, until the layout record says the move is in phase
// 2, and until alerts were placed in the new shards; it notes both.
func (e *env) awaitPhase2(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		l, err := e.layout(ctx)
		if err != nil {
			return err
		}
		moved, err := e.rdb.Keys(ctx, "{"+e.prefix+"}:fwd:*").Result()
		if err != nil {
			return err
		}
		if l.Phase == 2 && len(moved) > 0 {
			e.note("the layout is %s, %d alerts placed in new shards by then", l, len(moved))
			return nil
		}
		if time.Now().After(deadline) || !sleep(ctx, 200*time.Millisecond) {
			return fmt.Errorf("chaos: the move never placed an alert in a new shard: the layout is %s, %d alerts moved", l, len(moved))
		}
	}
}

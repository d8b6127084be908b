package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/sender/topic/relay"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
	"github.com/rocketdelay/rocketdelay/wire"
)

func newServeCmd(stdio IO) *cobra.Command {
	var path string
	var offset time.Duration
	cmd := &cobra.Command{
		Use: "serve [-f FILE]",
		Example: `  rocketdelay serve -f deploy/local/rocketdelay.yaml
  ROCKETDELAY_LOG_LEVEL=debug rocketdelay serve`,
		Short: "Run the service: scheduler, chat and topic channels, failed-sends retry job, health, metrics and admin API",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, stdio)
			if err != nil {
				return err
			}
			logger := func(cfg config.Config) *slog.Logger {
				l := cfg.Log.Logger(stdio.Stderr)
				// The RocketMQ client's and go-redis's loggers are process-wide: set
				// them here, not in Serve.
				scheduler.RouteClientLog(l)
				store.RouteRedisLog(l)
				return l
			}
			opts := ServeOptions{ClockOffset: offset}
			hup := make(chan os.Signal, 1) // caught from the start: its default ends the process
			signal.Notify(hup, syscall.SIGHUP)
			defer signal.Stop(hup)
			file := config.File(path, stdio.Getenv)
			if file == "" { // the environment alone: nothing to reload
				opts.Logger = logger(cfg)
				go func() {
					for {
						select {
						case <-c.Context().Done():
							return
						case <-hup:
							opts.Logger.Info("SIGHUP: the configuration is the environment alone; nothing to reload")
						}
					}
				}()
				return Serve(c.Context(), cfg, opts)
			}
			return Reloading{Path: file, Getenv: stdio.Getenv, Hup: hup, Logger: logger}.Serve(c.Context(), cfg, opts)
		},
	}
	configFlag(cmd, &path)
	// Fault injection only: the fault suite runs replicas whose clock is off by seconds.
	durationVar(cmd.Flags(), &offset, "clock-offset", 0, "run as if this replica's clock were off by this much (fault injection)")
	_ = cmd.Flags().MarkHidden("clock-offset")
	return cmd
}

// ServeOptions are the parts of Serve that tests replace.
type ServeOptions struct {
	// Logger receives the service's log. Required.
	Logger *slog.Logger
	// Listener, when set, is used instead of listening on cfg.HTTP.Addr.
	Listener net.Listener
	// PublicListener, when set, is used instead of listening on cfg.HTTP.PublicAddr.
	PublicListener net.Listener
	// Registry, when set, receives the metrics instead of a fresh registry.
	Registry *prometheus.Registry
	// Gatherer, when set, adds its metrics to /metrics (Reloading's, which outlive one
	// run of Serve).
	Gatherer prometheus.Gatherer
	// ClockOffset shifts every clock the service reads (its wall clock, its timing
	// wheel) by this much: the fault suite's fast-clock scenario. Default 0.
	ClockOffset time.Duration
	// Started, when set, is called once the service has started: its dependencies
	// answered and everything runs (Reloading's check that a reload took).
	Started func()
}

// principalsPoll is how often serve reads ingress.principalsFile again: a Kubernetes
// Secret's update reaches the mounted file within about a minute, and the new principals
// are in force within this much after.
const principalsPoll = 5 * time.Second

// Serve runs the service — scheduler, chat and topic channels, failed-sends retry job, and the
// HTTP endpoints — until ctx is cancelled, then shuts down gracefully within
// cfg.ShutdownTimeout: readiness turns off first, then the consumer leaves its group,
// nothing more is claimed, and every claim and park is handed back to the other replicas
// (the requests on the wire finish first; see scheduler.Stop) while the retry job hands
// its rows back; then the HTTP server stops, and the stores close.
// At start it waits, alive and not ready, for Redis, Postgres and RocketMQ's name servers
// (starting.go); it returns an error when a start can never succeed. Stopped before it
// started (ctx ended while it started), it returns nil: a stop, not a failure.
func Serve(ctx context.Context, cfg config.Config, opts ServeOptions) (err error) {
	started := false
	defer func() {
		if err != nil && !started && ctx.Err() != nil {
			opts.Logger.Info("stopped while starting", "err", err)
			err = nil
		}
	}()
	logger := opts.Logger
	reg := opts.Registry
	if opts.ClockOffset != 0 {
		logger.Warn("running with a shifted clock (fault injection)", "offset", opts.ClockOffset.String())
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		newBuildInfo(),
	)

	// The HTTP server answers from the start: while the replica waits for its stores,
	// /healthz says it is alive and everything else that it is starting.
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.HTTP.Addr); err != nil {
			return fmt.Errorf("serve: listen on %s (http.addr): %w", cfg.HTTP.Addr, err)
		}
	}
	tlsConf, err := serverTLS(cfg.HTTP, logger)
	if err != nil {
		return err
	}
	conns := newConnMetrics(reg)
	wait := newStarting(cfg.Admin.Token)
	var handler switchHandler
	handler.set(wait)
	srv := newHTTPServer(cfg.HTTP, &handler, tlsConf, logger)
	defer srv.Close()               // after the graceful Shutdown below, or when the start fails
	serveErr := make(chan error, 2) // the internal listener's, and the public one's
	go func() { serveErr <- serveOn(srv, capConnections(ln, cfg.HTTP.MaxConnections, conns, "internal")) }()
	st, err := openStores(ctx, cfg, logger, wait)
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("stopped while waiting for the stores")
			return nil
		}
		return err
	}
	defer st.close()
	rdb, pg, beatRdb := st.rdb, st.pg, st.beat
	if err := waitForNameServers(ctx, cfg, logger, wait); err != nil {
		if ctx.Err() != nil {
			logger.Info("stopped while waiting for RocketMQ")
			return nil
		}
		return err
	}

	mode, replicas, _ := config.ParseDurability(cfg.Redis.Durability) // validated
	durability := newDurabilityWatch(reg, logger)
	switch err := store.CheckDurability(ctx, rdb, mode, replicas); {
	case errors.Is(err, store.ErrCannotCheck):
		logger.Warn("cannot confirm the Redis durability setting; trusting the operator", "durability", cfg.Redis.Durability, "err", err)
	case err != nil && mode == "replicas":
		// Too few replicas now: said at once (gauge, /readyz), not at the first write; the
		// writes wait for them, and the first that meets it says so.
		durability.changed(false, err.Error())
	case err != nil:
		return err
	}
	wsOpts := store.WheelStageOptionsFromConfig(cfg).In(st.layout)
	wsOpts.OnDurability = durability.changed
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, wsOpts)
	layouts := newLayoutWatch(reg, rdb, cfg.Redis.KeyPrefix, ws, max(ws.Options().CancelTTL, ws.Options().DoneTTL), logger)
	if st.layout.Moving() || st.layout.Shards != max(cfg.Redis.Shards, 1) {
		logger.Warn("the wheel stage moves to another shard count; this replica follows the deployment's layout",
			"redis.shards", max(cfg.Redis.Shards, 1), "layout", st.layout.String())
	}
	// Every clock of the service is the reference clock: this replica's own clock corrected
	// by its offset to Redis TIME, so a host whose clock is off neither sends early nor late.
	schedMetrics := scheduler.NewMetrics(reg)
	clock := scheduler.NewRefClock(ws, timewheel.ShiftedClock(opts.ClockOffset), 0, logger, schedMetrics)
	if err := clock.Sync(ctx); err != nil {
		return err
	}
	now := clock.Now
	clockCtx, stopClock := context.WithCancel(context.WithoutCancel(ctx))
	clockDone := make(chan struct{})
	go func() { defer close(clockDone); clock.Run(clockCtx) }()
	defer func() { stopClock(); <-clockDone }()
	failedSends := store.NewFailedSends(pg, store.FailedSendsOptions{ClaimLease: cfg.FailedSends.ClaimLease, Guard: ws.Guard()})
	chatOpts, err := chatOptions(cfg)
	if err != nil {
		return err
	}
	chatOpts.Fence = ws.Guard() // a request starts only while its confirm keeps the alert from a take-over
	signer, err := signer(ctx, cfg, rdb)
	if err != nil {
		return err
	}
	chatOpts.PrincipalOf = func(a sender.Alert) string { // the share a busy target's alert waits in
		return signer.ProvenPrincipal(a.ID, a.Target, a.Props[wire.PropPrincipal], a.Props[wire.PropPrincipalSig])
	}
	pool := store.RobotPoolFor(rdb, cfg.Redis.KeyPrefix, cfg.Sender)
	chatMetrics := sender.NewMetrics(reg)
	snd, err := sender.NewChat(chatOpts, pool, logger.With("component", "sender"), chatMetrics, now)
	if err != nil {
		return err
	}
	defer snd.Close()
	topics, err := relay.New(relay.Options{NameServers: cfg.RocketMQ.NameServers, Access: scheduler.AccessFromConfig(cfg), SendTimeout: cfg.RocketMQ.SendTimeout,
		MaxMessageSize: cfg.RocketMQ.MaxMessageSize, Fence: ws.Guard(), Now: now},
		topic.Targets(cfg), store.NewTopicRate(rdb, cfg.Redis.KeyPrefix), logger, relay.NewMetrics(reg))
	if err != nil {
		return err
	}
	defer topics.Close()
	for name := range topic.Targets(cfg) {
		chatMetrics.Target(name, config.KindTopic)
	}
	roster := store.NewRoster(rdb, cfg.Redis.KeyPrefix) // which targets the replicas' configurations have
	deliverer := delivery.New(channels(cfg, snd, topics), ws, failedSends, delivery.Options{FirstRetry: cfg.FailedSends.BackoffBase,
		Roster: roster, UnknownTargetWait: cfg.Scheduler.UnknownTargetWait}, logger, delivery.NewMetrics(reg), now)
	// The HTTP ways in publish through a producer of their own; their templates are
	// checked before anything starts.
	pub, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Access: scheduler.AccessFromConfig(cfg), Topic: cfg.RocketMQ.Topic,
		SendTimeout: cfg.RocketMQ.SendTimeout, Now: now, CheckBody: snd.Check})
	if err != nil {
		return err
	}
	defer pub.Close()
	// Every way in cancels through one canceller: the wheel stage, then failed_sends.
	canceller := failed.Canceller{Stage: ws, Rows: failedSends}
	ingressCancels := canceller
	ingressCancels.Note = store.CancelNote{By: "ingress",
		Reason: "DELETE " + ingress.AlertsPath + "/{id}, or an Alertmanager notification that replaced or resolved it"}
	// And reschedules through one rescheduler.
	rescheduler := failed.Rescheduler{Stage: ws, Rows: failedSends, Publisher: pub, Reach: cfg.Scheduler.Threshold,
		Horizon: cfg.Scheduler.Horizon, Now: now,
		Reader: wire.Reader{Access: scheduler.AccessFromConfig(cfg), Timeout: cfg.RocketMQ.SendTimeout}}
	esc, err := escalator(cfg, rdb, signer, pub, canceller, ws, snd, logger, reg, now)
	if err != nil {
		return err
	}
	deliverer.SetGate(esc)                                                                 // an escalation's step goes only while its episode runs
	producers := store.NewProducers(rdb, cfg.Redis.KeyPrefix, cfg.Redis.Shards).Beside(ws) // who owns an id, and the principals' rates
	ing, err := ingress.New(cfg, ingress.Deps{Publisher: pub, Wheel: ingressCancels, Rescheduler: rescheduler, Pending: ws, Chat: snd, Signer: signer, Logger: logger, Now: now,
		Escalations: esc, Dedupe: store.NewDedupe(rdb, cfg.Redis.KeyPrefix), Producers: producers, Roster: roster},
		ingress.NewMetrics(reg))
	if err != nil {
		return err
	}
	schedOpts := scheduler.OptionsFromConfig(cfg)
	schedOpts.Wheel.Clock = clock
	schedOpts.CheckBody = snd.Check
	schedOpts.Liveness = ws.Liveness(beatRdb)
	schedOpts.Roster = roster
	var sched *scheduler.Scheduler
	schedOpts.AfterFirstBeat = func(ctx context.Context) error { // before it takes anything
		return store.AckLayout(ctx, rdb, cfg.Redis.KeyPrefix, sched.InstanceName(), ws.Layout())
	}
	schedOpts.Principal = func(e store.Entry) string { // who published it, for the list of pending alerts
		return signer.ProvenPrincipal(e.ID, e.Target, e.Props[wire.PropPrincipal], e.Props[wire.PropPrincipalSig])
	}
	schedOpts.StepMarkProven = func(e store.Entry) bool { // a step of bede048, which signed marks only
		return signer.ProvenMark(e.ID, e.Target, e.Props[wire.PropEpisode], e.Props[wire.PropEpisodeSig])
	}
	sched, err = scheduler.New(schedOpts, ws, deliverer, logger, schedMetrics, now)
	if err != nil {
		return err
	}
	snd.SetParking(sched) // a busy robot group's sends are one for the deployment
	// The retry job's claims are this replica's: a survivor releases them once it departs.
	retryOpts := delivery.RetryOptionsFromConfig(cfg.FailedSends)
	retryOpts.Replica = sched.InstanceName()
	job := delivery.NewRetryJob(deliverer, retryOpts)
	sched.SetRetryJob(job)
	// One deadline bounds the whole stop, set when the stop begins; Stop is idempotent,
	// so this deferred call only matters when Serve returns early (a listener that cannot
	// open, a start that fails part way), and then it has the same deadline: without one
	// a release retrying against an unreachable Redis kept Serve from returning, and a
	// reload from falling back.
	stopCtx, cancelStop := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelStop()
	defer func() {
		bounded, cancel := context.WithTimeout(stopCtx, cfg.ShutdownTimeout)
		defer cancel()
		_ = sched.Stop(bounded)
	}()
	if err := sched.Start(ctx); err != nil {
		return err
	}
	jobCtx, stopJob := context.WithCancel(context.WithoutCancel(ctx))
	jobDone := make(chan error, 1)
	go func() { jobDone <- job.Run(jobCtx) }()
	var jobOnce sync.Once
	stopRetryJob := func() { jobOnce.Do(func() { stopJob(); <-jobDone }) } // hands claimed rows back
	defer stopRetryJob()
	escCtx, stopEsc := context.WithCancel(context.WithoutCancel(ctx))
	escDone := make(chan struct{})
	go func() { defer close(escDone); esc.Run(escCtx) }() // carries out what a dead replica left
	defer func() { stopEsc(); <-escDone }()
	layoutCtx, stopLayout := context.WithCancel(ctx)
	layoutDone := make(chan struct{})
	movedOn := make(chan error, 1)
	go func() {
		defer close(layoutDone)
		movedOn <- layouts.run(layoutCtx, sched.InstanceName(), cfg.Scheduler.Liveness)
	}()
	defer func() { stopLayout(); <-layoutDone }()
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan struct{})
	go func() { defer close(watchDone); ing.WatchPrincipals(watchCtx, principalsPoll) }()
	defer func() { stopWatch(); <-watchDone }()

	checks := []check{
		{name: "consumer", fn: func(context.Context) error {
			if !sched.Running() {
				return errors.New("the consumer is not running")
			}
			return nil
		}},
		{name: "redis", fn: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
		{name: "postgres", fn: func(ctx context.Context) error { return pg.Ping(ctx) }},
	}
	if wsOpts.Replicas > 0 {
		checks = append(checks, check{name: "redis durability", fn: durability.check, advisory: true})
	}
	h := newHealth(reg, cfg.Admin.Token, logger, checks...)
	templates, err := newRenderer(cfg)
	if err != nil {
		return err
	}
	trusted, err := proxies.Parse(cfg.HTTP.TrustedProxies)
	if err != nil {
		return err // validated with the configuration: only a bug reaches this
	}
	logins := store.NewConsoleAccess(rdb, cfg.Redis.KeyPrefix) // the console's sessions, and guesses of the admin token
	guard := func(h http.Handler) http.Handler { return guardAdmin(h, cfg.Admin.Token, logins, trusted, logger) }
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.live)
	mux.Handle("GET /readyz", guard(http.HandlerFunc(h.ready)))
	var gatherer prometheus.Gatherer = reg
	if opts.Gatherer != nil {
		gatherer = prometheus.Gatherers{reg, opts.Gatherer}
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(gatherer, promhttp.HandlerOpts{Registry: reg}))
	adminAPI := guard(failed.Handler(failedSends, failed.Targets(cfg.Targets), logger, cfg.Admin.Token))
	inspector := failed.Inspector{Wheel: ws, Rows: failedSends, Config: cfg, Now: now, Owners: producers}
	mux.Handle("GET "+failed.AlertsPath+"/{id}", guard(failed.InspectHandler(inspector, logger, cfg.Admin.Token)))
	mux.Handle(failed.APIPrefix, adminAPI)
	mux.Handle(failed.APIPrefix+"/", adminAPI)
	ingressAPI := ing.Handler()
	mux.Handle(ingress.AlertsPath, ingressAPI)
	mux.Handle(ingress.AlertsPath+"/", ingressAPI)
	mux.Handle(ingress.AlertmanagerPath+"/", ingressAPI)
	mux.Handle(ingress.EscalationsPath, ingressAPI)
	mux.Handle(ingress.EscalationsPath+"/", ingressAPI)
	ackHandler := esc.AckHandler(trusted, logger)
	mux.Handle(escalation.AckPath, ackHandler)
	mux.Handle(console.Prefix, console.Handler(failedSends, failed.Targets(cfg.Targets), console.AlertFinder{Inspector: inspector, Canceller: canceller, Rescheduler: rescheduler, List: ws}, console.Sources{Wheel: ws, Pool: pool, Targets: chatOpts.Targets,
		Limit: cfg.Sender.Limit, Mode: sched.Mode, Lateness: schedMetrics.HandoffLateness}.State, esc, templates,
		console.Access{Token: cfg.Admin.Token, Sessions: logins, Proxies: trusted,
			Operators: cfg.Admin.Operators, ProxyUserHeader: cfg.Admin.ProxyUserHeader}, logger))

	handler.set(mux)
	public, err := servePublic(cfg.HTTP, opts.PublicListener, publicMux(h, ackHandler), tlsConf, conns, logger, serveErr)
	if err != nil {
		return err
	}
	defer public.Close()
	started = true
	if opts.Started != nil {
		opts.Started()
	}
	logger.Info("rocketdelay serving", "version", Version, "http", ln.Addr().String(),
		"topic", cfg.RocketMQ.Topic, "group", cfg.RocketMQ.Group, "levels", cfg.Scheduler.Levels.String())

	var stopErr error // the replica stops because it may not run on: it exits with it, to start again
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return fmt.Errorf("serve: http server: %w", err)
	case err := <-movedOn:
		if err == nil {
			break
		}
		stopErr = fmt.Errorf("serve: %w", err)
		logger.Error("this replica acts in a wheel-stage layout the deployment moved away from; it stops, to start again in the move", "err", err)
	}

	// Readiness off first; then, within one deadline: the scheduler leaves the consumer
	// group, claims nothing more, and hands everything it holds back to the other
	// replicas (sched.Stop), while the retry job hands its rows back; the HTTP server
	// closes last.
	logger.Info("shutting down", "timeout", cfg.ShutdownTimeout.String())
	h.drain()
	var cancelDeadline context.CancelFunc
	stopCtx, cancelDeadline = context.WithTimeout(stopCtx, cfg.ShutdownTimeout)
	defer cancelDeadline()
	jobStopped := make(chan struct{})
	go func() { defer close(jobStopped); stopRetryJob() }()
	if err := sched.Stop(stopCtx); err != nil {
		logger.Warn("scheduler did not stop cleanly", "err", err)
	}
	<-jobStopped
	for _, s := range []*http.Server{srv, public} {
		if err := s.Shutdown(stopCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("http server did not shut down cleanly", "err", err)
		}
	}
	logger.Info("stopped")
	return stopErr
}

func newBuildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rocketdelay_build_info",
		Help: "Always 1; the labels say which build is running.",
	}, []string{"version", "goversion"})
	g.WithLabelValues(Version, runtime.Version()).Set(1)
	return g
}

package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/topicsink"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/sender/topic/relay"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TopicDoc is the long help of `rocketdelay bench topic`.
const TopicDoc = `topic measures, in one run on the configured broker, Redis and Postgres, a topic target
as its business consumer sees it:

  precision   messages due at random moments over --spread (some take broker hops, the
              rest only the wheel stage), each received by a plain consumer of the
              business topic: lateness p50/p99/max from the due time to the receipt,
              early messages by the broker's store time; next to the broker's own timer
              messages (TIMER_DELIVER_MS) consumed directly on the same broker, the
              anchor: RocketMQ 5's timer with its ~1 s precision
  throughput  --burst messages due at the same moment, handed off by one replica through
              the wheel stage and the relay's batch sends: messages per second from the
              due time to the last receipt, and messages per broker send

The broker must have timer messages (RocketMQ 5, timerWheelEnable) and, for the timer
anchor, a timerMaxDelaySec above --spread (20 s on the local test profile).`

// TopicOptions configure Topic. A zero field takes its default.
type TopicOptions struct {
	// N is how many messages the precision run publishes. Default 300.
	N int
	// Spread: the precision run's due times are uniform over [1s, Spread]. Default 18s.
	Spread time.Duration
	// Burst is how many messages the throughput run makes due at once. Default 5000.
	Burst int
	// Seed draws the due times. Default 1.
	Seed uint64
}

// Topic runs the topic-target benchmark and prints its table to out.
func Topic(ctx context.Context, cfg config.Config, o TopicOptions, out io.Writer) error {
	config.Default(&o.N, 300)
	config.Default(&o.Spread, 18*time.Second)
	config.Default(&o.Burst, 5000)
	config.Default(&o.Seed, 1)
	if len(cfg.RocketMQ.Brokers) == 0 {
		return fmt.Errorf("bench: set rocketmq.brokers (ROCKETDELAY_BROKERS) so the benchmark can create its topics")
	}
	scheduler.RouteClientLog(slog.New(slog.DiscardHandler))
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	rng := rand.New(rand.NewPCG(o.Seed, 26))
	delays := make([]time.Duration, o.N)
	for i := range delays {
		delays[i] = time.Second + time.Duration(rng.Int64N(int64(o.Spread-time.Second)))
	}

	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.RocketMQ.NameServers)),
		producer.WithGroupName("rd-bench-topic-p"), producer.WithInstanceName("rd-bench-topic-p-"+suffix), producer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	anchorTopic := "rd_bench_topic_timer_" + suffix
	if err := createTopic(ctx, cfg, anchorTopic); err != nil {
		return err
	}
	fmt.Fprintf(out, "precision: %d messages due over [1s, %s]; the broker's timer alone first\n", o.N, o.Spread)
	anchor, err := runBrokerTimer(ctx, out, cfg, p, anchorTopic, delays, o.Spread+o.Spread/10, suffix)
	if err != nil {
		return err
	}
	run, err := newTopicRun(ctx, cfg, suffix)
	if err != nil {
		return err
	}
	defer run.close()
	prec, err := run.precision(ctx, delays)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "throughput: %d messages due at one moment\n", o.Burst)
	tput, err := run.throughput(ctx, o.Burst)
	if err != nil {
		return err
	}

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "run\tmessages\tp50 late\tp99 late\tmax late\tearly\t")
	fmt.Fprintf(tw, "broker timer alone (TIMER_DELIVER_MS)\t%d\t%s\t%s\t%s\t%d\t\n", len(delays), ms(anchor.p50), ms(anchor.p99), ms(anchor.worst), anchor.early)
	fmt.Fprintf(tw, "rocketdelay topic target\t%d\t%s\t%s\t%s\t%d\t\n", len(delays), ms(prec.P50), ms(prec.P99), ms(prec.Max), prec.Early)
	if err := tw.Flush(); err != nil {
		return err
	}
	ratio := 0.0
	if prec.P99 > 0 {
		ratio = float64(anchor.p99) / float64(prec.P99)
		fmt.Fprintf(out, "p99 lateness: the broker's timer / rocketdelay = %.0fx\n", ratio)
	}
	fmt.Fprintf(out, "targets: p99 at the consumer ≤ 50ms (%s: %s); ≥ 20x tighter than the broker's timer (%.0fx: %s); 0 early (%d: %s)\n",
		ms(prec.P99), verdict(prec.P99 <= 50*time.Millisecond), ratio, verdict(prec.P99 > 0 && ratio >= 20), prec.Early, verdict(prec.Early == 0))
	fmt.Fprintf(out, "throughput: %d messages due at once received in %s after their due time: %.0f messages/s; %.1f messages per broker send; "+
		"%.1f Redis round trips per message (put, claim, confirm, release, sweeps); p50/p99 lateness %s/%s\n",
		o.Burst, tput.span.Round(time.Millisecond), tput.rate, tput.perSend, tput.redisOps, ms(tput.late.P50), ms(tput.late.P99))
	return nil
}

// topicRun is one replica with a topic target "orders" and a consumer of its business
// topic.
type topicRun struct {
	cfg      config.Config
	suffix   string
	biz      string
	consumer *topicsink.Sink
	pub      *wire.Producer
	rdb      redis.UniversalClient
	prefix   string
	reg      *prometheus.Registry
	redisOps *atomic.Int64 // Redis round trips of the replica
	stop     []func()
}

func newTopicRun(ctx context.Context, cfg config.Config, suffix string) (*topicRun, error) {
	r := &topicRun{cfg: cfg, suffix: suffix, biz: "rd_bench_orders_" + suffix, prefix: "rdbenchtopic" + suffix, reg: prometheus.NewRegistry(),
		redisOps: new(atomic.Int64)}
	ok := false
	defer func() {
		if !ok {
			r.close()
		}
	}()
	delayTopic := "rd_bench_topic_" + suffix
	if err := createTopic(ctx, cfg, delayTopic); err != nil {
		return nil, err
	}
	c, err := topicsink.Start(ctx, cfg.RocketMQ.NameServers[0], r.biz)
	if err != nil {
		return nil, err
	}
	r.consumer = c
	r.stop = append(r.stop, c.Close)
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	if err != nil {
		return nil, err
	}
	r.rdb = rdb
	rdb.AddHook(countingHook{n: r.redisOps})
	r.stop = append(r.stop, func() { _, _ = store.DeleteKeys(context.Background(), rdb, r.prefix); _ = rdb.Close() })
	pg, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	if err != nil {
		return nil, err
	}
	r.stop = append(r.stop, pg.Close)
	targets := map[string]topic.Target{"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: r.biz}}}
	quiet := slog.New(slog.DiscardHandler)
	snd, err := relay.New(relay.Options{NameServers: cfg.RocketMQ.NameServers, SendTimeout: cfg.RocketMQ.SendTimeout}, targets,
		store.NewTopicRate(rdb, r.prefix), quiet, relay.NewMetrics(r.reg))
	if err != nil {
		return nil, err
	}
	r.stop = append(r.stop, snd.Close)
	ws := store.NewWheelStage(rdb, r.prefix, store.WheelStageOptionsFromConfig(cfg))
	d := delivery.New(delivery.Channels{"orders": snd}, ws, store.NewFailedSends(pg, store.FailedSendsOptions{}), delivery.Options{},
		quiet, nil, time.Now)
	opts := scheduler.OptionsFromConfig(cfg)
	opts.Topic, opts.Group, opts.InstanceName = delayTopic, "rd_bench_topic_"+suffix, "rd-bench-topic-"+suffix
	opts.KnownTarget = func(name string) bool { return name == "orders" }
	opts.Liveness = ws.Liveness(nil)
	opts.Topics = targets
	stop, err := startScheduler(ctx, opts, ws, d, r.reg)
	if err != nil {
		return nil, err
	}
	r.stop = append(r.stop, stop)
	if r.pub, err = wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: delayTopic}); err != nil {
		return nil, err
	}
	r.stop = append(r.stop, func() { _ = r.pub.Close() })
	ok = true
	return r, nil
}

func (r *topicRun) close() {
	for i := len(r.stop) - 1; i >= 0; i-- {
		r.stop[i]()
	}
}

// publish publishes a message for "orders" due at at, and returns its id.
func (r *topicRun) publish(ctx context.Context, id string, at time.Time) error {
	_, err := r.pub.Publish(ctx, wire.Publication{Target: "orders", ID: id, At: at, Body: []byte("order " + id), Raw: true})
	return err
}

// receive waits for ids at the business consumer and returns each one's lateness
// (receipt minus due), counting as early a message the broker stored before its due
// time.
func (r *topicRun) receive(ctx context.Context, ids []string, due map[string]time.Time, within time.Duration) (quantile.Summary, time.Time, error) {
	wctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	if missing := r.consumer.Wait(wctx, ids); len(missing) > 0 {
		return quantile.Summary{}, time.Time{}, fmt.Errorf("bench: %d of %d messages never reached the business consumer", len(missing), len(ids))
	}
	late := make([]time.Duration, 0, len(ids))
	early := 0
	var last time.Time
	for _, id := range ids {
		c := r.consumer.Copies(id)
		if len(c) != 1 {
			return quantile.Summary{}, time.Time{}, fmt.Errorf("bench: %s reached the consumer as %d messages", id, len(c))
		}
		if c[0].Msg.StoreTimestamp < due[id].UnixMilli() {
			early++
		}
		late = append(late, c[0].At.Sub(due[id]))
		if c[0].At.After(last) {
			last = c[0].At
		}
	}
	q := quantile.Summarize(late)
	q.Early = early
	return q, last, nil
}

func (r *topicRun) precision(ctx context.Context, delays []time.Duration) (quantile.Summary, error) {
	due := map[string]time.Time{}
	ids := make([]string, len(delays))
	for i, d := range delays {
		ids[i] = fmt.Sprintf("p-%s-%05d", r.suffix, i)
		due[ids[i]] = time.Now().Add(d).Truncate(time.Millisecond)
		if err := r.publish(ctx, ids[i], due[ids[i]]); err != nil {
			return quantile.Summary{}, err
		}
	}
	q, _, err := r.receive(ctx, ids, due, 3*time.Minute)
	return q, err
}

type throughputRun struct {
	span     time.Duration
	rate     float64
	perSend  float64
	redisOps float64 // Redis round trips per message, from its publish to its release
	late     quantile.Summary
}

// throughput publishes n messages due at one moment, far enough out for all of them to
// be waiting in the wheel stage by then, and measures how fast they reach the consumer.
func (r *topicRun) throughput(ctx context.Context, n int) (throughputRun, error) {
	sendsBefore, msgsBefore := histogram(r.reg, "rocketdelay_topic_batch_messages")
	opsBefore := r.redisOps.Load()
	ids := make([]string, n)
	due := map[string]time.Time{}
	lead := r.cfg.Scheduler.Threshold - time.Second // below the threshold: no hop
	at := time.Now().Add(lead).Truncate(time.Millisecond)
	for i := range ids {
		ids[i] = fmt.Sprintf("t-%s-%05d", r.suffix, i)
		due[ids[i]] = at
	}
	if err := publishAll(ctx, r, ids, at); err != nil {
		return throughputRun{}, err
	}
	if time.Now().After(at) {
		return throughputRun{}, fmt.Errorf("bench: publishing %d messages took longer than %s: lower --burst or raise the threshold", n, lead)
	}
	q, last, err := r.receive(ctx, ids, due, 5*time.Minute)
	if err != nil {
		return throughputRun{}, err
	}
	sends, msgs := histogram(r.reg, "rocketdelay_topic_batch_messages")
	span := last.Sub(at)
	time.Sleep(500 * time.Millisecond) // the last releases
	return throughputRun{span: span, rate: float64(n) / span.Seconds(), perSend: (msgs - msgsBefore) / max(sends-sendsBefore, 1),
		redisOps: float64(r.redisOps.Load()-opsBefore) / float64(n), late: q}, nil
}

// publishAll publishes ids due at at from 16 goroutines.
func publishAll(ctx context.Context, r *topicRun, ids []string, at time.Time) error {
	next := make(chan string)
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			for id := range next {
				if err := r.publish(ctx, id, at); err != nil {
					errs <- err
					for range next {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	for _, id := range ids {
		next <- id
	}
	close(next)
	var first error
	for range 16 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// histogram returns the sample count and sum of histogram name.
func histogram(g prometheus.Gatherer, name string) (count, sum float64) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				count += float64(m.GetHistogram().GetSampleCount())
				sum += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return count, sum
}

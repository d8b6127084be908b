package chaos

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestBrokerWithAuthentication starts a private name server and a broker with ACL 2.0
// authentication on (deploy/local/up's RD_BROKER_AUTH): a plain RocketMQ producer without
// credentials, or with a wrong secret, is refused, and so is an unsigned topic creation;
// with rocketmq.accessKey and secretKey the topic is created, an alert is published, a
// scheduler takes it through a broker hop to its hand-off, a hopping alert's message is
// read back (wire.Reader, signed; unsigned or with a wrong secret it is refused), and the
// dead-letter queue's depth is read.
func TestBrokerWithAuthentication(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a private RocketMQ broker; skipped under -short")
	}
	root, err := findRepoRoot()
	require.NoError(t, err)
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	const user, secret = "rd-auth-test", "rd-auth-test-secret"
	st, err := StartStack(ctx, StackOptions{RepoRoot: root, Components: []string{"namesrv", "broker"},
		Env: []string{"RD_BROKER_AUTH=" + user + ":" + secret}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Stop(context.Background())) })
	require.Equal(t, user, st.Env["ROCKETDELAY_ROCKETMQ_ACCESS_KEY"], "deploy/local/env prints the credentials")

	ns, brokers := []string{st.Env["ROCKETDELAY_NAMESRV"]}, []string{st.Env["ROCKETDELAY_BROKERS"]}
	access := wire.Access{AccessKey: user, SecretKey: secret}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	scheduler.RouteClientLog(logger)
	topic := testenv.Unique("rd_auth_")

	// Unsigned, the broker creates nothing.
	err = scheduler.EnsureTopic(ctx, ns, wire.Access{}, topic, brokers, logger)
	require.Error(t, err, "an unsigned topic creation is refused")
	require.NoError(t, scheduler.EnsureTopic(ctx, ns, access, topic, brokers, logger))

	// A plain producer, as anyone who reaches the broker could run one.
	send := func(opts ...producer.Option) error {
		p, err := rocketmq.NewProducer(append(opts, producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
			producer.WithGroupName(testenv.Unique("rd_auth_plain_")), producer.WithRetry(0),
			producer.WithSendMsgTimeout(5*time.Second))...)
		require.NoError(t, err)
		require.NoError(t, p.Start())
		defer func() { _ = p.Shutdown() }()
		m := primitive.NewMessage(topic, []byte("forged"))
		m.WithProperty(wire.PropTarget, "ops")
		m.WithProperty(wire.PropID, testenv.Unique("forged"))
		m.WithProperty(wire.PropDelay, "0")
		_, err = p.SendSync(ctx, m)
		return err
	}
	require.Error(t, send(), "a producer without credentials is refused")
	require.Error(t, send(producer.WithCredentials(primitive.Credentials{AccessKey: user, SecretKey: "wrong"})),
		"a producer with a wrong secret is refused")

	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Liveness: config.DefaultLiveness})
	levels, err := config.ParseDelayLevels(st.Env["ROCKETDELAY_LEVELS"])
	require.NoError(t, err)
	got := make(chan sender.Alert, 4)
	group, instance := testenv.Unique("rd_auth_"), testenv.Unique("rd-auth-")
	require.NoError(t, scheduler.EnsureTopic(ctx, ns, access, scheduler.DLQTopic(group), brokers, logger))
	s, err := scheduler.New(scheduler.Options{
		NameServers: ns, Access: access, Brokers: brokers, Topic: topic, Group: group, InstanceName: instance,
		Levels: levels, Threshold: 5 * time.Second, Horizon: 24 * time.Hour, Mode: config.ModeLevels,
		KnownTarget: func(name string) bool { return name == "ops" }, Liveness: ws.Liveness(nil),
	}, ws, chanDelivery(got), logger, scheduler.NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	defer func() { require.NoError(t, s.Stop(context.Background())) }()

	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: ns, Access: access, Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	pub, err := p.Publish(ctx, wire.Publication{Target: "ops", ID: "signed", In: 8 * time.Second, Body: []byte("signed")})
	require.NoError(t, err)
	select {
	case a := <-got:
		require.Equal(t, "signed", a.ID, "only the signed alert reaches the scheduler")
		require.Greater(t, a.Hops, 0, "it crossed the broker again (a hop), signed")
		require.False(t, time.Now().Before(pub.DeliverAt), "handed off early")
	case <-time.After(90 * time.Second):
		t.Fatal("the signed alert was not handed off within 90s")
	}
	// A hopping alert's message is read back from the broker (a reschedule earlier does
	// it), signed: unsigned, the broker refuses the read, and not as a message it lacks.
	_, err = p.Publish(ctx, wire.Publication{Target: "ops", ID: "far", In: time.Hour, Body: []byte("far ahead")})
	require.NoError(t, err)
	var om string
	require.Eventually(t, func() bool {
		om, _ = rdb.HGet(ctx, "{"+prefix+"}:trace:far", "om").Result()
		return om != ""
	}, 60*time.Second, 50*time.Millisecond, "the hop of the far alert is noted with its message")
	msg, err := wire.Reader{Access: access}.Read(ctx, om)
	require.NoError(t, err)
	require.Equal(t, "far ahead", string(msg.Body))
	require.Equal(t, "far", msg.GetProperty(wire.PropID))
	_, err = wire.Reader{}.Read(ctx, om)
	require.Error(t, err, "an unsigned read is refused")
	require.NotErrorIs(t, err, wire.ErrMessageGone)
	_, err = wire.Reader{Access: wire.Access{AccessKey: user, SecretKey: "wrong"}}.Read(ctx, om)
	require.Error(t, err, "a read with a wrong secret is refused")
	require.NotErrorIs(t, err, wire.ErrMessageGone)

	// The dead-letter queue's depth is read from the broker, signed.
	depth, err := scheduler.DLQDepth(ctx, ns, access, group, instance)
	require.NoError(t, err)
	require.Zero(t, depth)
}

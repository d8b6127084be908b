package scheduler

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestBrokerHonoursDelayLevel proves the local broker is real: a message produced with
// delay level 2 to a fresh topic arrives no earlier than that level's delay.
func TestBrokerHonoursDelayLevel(t *testing.T) {
	ns := testenv.NameServer(t)
	levels := testenv.Levels(t)
	topic := testenv.Unique("rd_proof_")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName(testenv.Unique("rd_proof_p_")),
		producer.WithInstanceName(testenv.Unique("proof")),
		producer.WithRetry(2),
	)
	require.NoError(t, err)
	require.NoError(t, p.Start())
	defer p.Shutdown()

	// The first send creates the topic (autoCreateTopicEnable on the local broker), so the
	// consumer below finds its route.
	warm, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("warm-up")))
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, warm.Status)

	got := make(chan *primitive.MessageExt, 16)
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName(testenv.Unique("rd_proof_c_")),
		consumer.WithInstance(testenv.Unique("proof")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	require.NoError(t, err)
	require.NoError(t, c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			if string(m.Body) == "delayed" {
				got <- m
			}
		}
		return consumer.ConsumeSuccess, nil
	}))
	require.NoError(t, c.Start())
	defer shutdownConsumer(c)

	msg := primitive.NewMessage(topic, []byte("delayed"))
	msg.WithDelayTimeLevel(2)
	sent := time.Now()
	res, err := p.SendSync(ctx, msg)
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, res.Status, "send result %s", res)

	select {
	case m := <-got:
		arrived := time.Now()
		waited := arrived.Sub(sent)
		t.Logf("level 2 (%s) message arrived after %s", levels[1], waited)
		require.GreaterOrEqual(t, waited, levels[1], "delivered before its delay level")
		require.GreaterOrEqual(t, arrived.UnixMilli()-m.BornTimestamp, levels[1].Milliseconds(), "delivered before born+level")
	case <-ctx.Done():
		t.Fatalf("the delayed message never arrived on topic %s", topic)
	}
}

// TestCheckGroup asks the real broker about a group before and after a consumer of it
// ran (the local broker creates groups on first use).
func TestCheckGroup(t *testing.T) {
	ns, broker := testenv.NameServer(t), testenv.Brokers(t)
	group := testenv.Unique("rd_group_")
	ctx := context.Background()
	missing, err := CheckGroup(ctx, []string{ns}, wire.Access{}, group, []string{broker}, discardLogger())
	require.NoError(t, err)
	require.Equal(t, []string{broker}, missing, "a group nobody used is unknown to the broker")

	topic := testenv.Unique("rd_group_t_")
	require.NoError(t, EnsureTopic(ctx, []string{ns}, wire.Access{}, topic, []string{broker}, discardLogger()))
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName(group), consumer.WithInstance(testenv.Unique("grp")))
	require.NoError(t, err)
	require.NoError(t, c.Subscribe(topic, consumer.MessageSelector{}, func(context.Context, ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		return consumer.ConsumeSuccess, nil
	}))
	require.NoError(t, c.Start())
	defer shutdownConsumer(c)
	require.Eventually(t, func() bool {
		missing, err := CheckGroup(ctx, []string{ns}, wire.Access{}, group, []string{broker}, discardLogger())
		return err == nil && len(missing) == 0
	}, 30*time.Second, 200*time.Millisecond, "the broker never reported the group after a consumer of it started")
}

// shutdownConsumer stops c the way Scheduler.Stop does: suspended first, so that a
// rebalance still running does not race rocketmq-client-go's unsynchronised close flag.
func shutdownConsumer(c rocketmq.PushConsumer) {
	c.Suspend()
	time.Sleep(200 * time.Millisecond)
	_ = c.Shutdown()
}

// TestDLQDepth counts the messages in a group's dead-letter queue on the real broker: 0
// before the queue exists, then what was put there.
func TestDLQDepth(t *testing.T) {
	t.Parallel()
	ns, broker := testenv.NameServer(t), testenv.Brokers(t)
	group := testenv.Unique("rd_dlq_")
	ctx := context.Background()
	depth, err := DLQDepth(ctx, []string{ns}, wire.Access{}, group, testenv.Unique("dlq"))
	require.NoError(t, err)
	require.Zero(t, depth, "no dead-letter queue yet")

	require.NoError(t, EnsureTopic(ctx, []string{ns}, wire.Access{}, DLQTopic(group), []string{broker}, discardLogger()))
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{ns}, Topic: DLQTopic(group)})
	require.NoError(t, err)
	defer p.Close()
	for i := range 3 {
		_, err := p.Publish(ctx, wire.Publication{Target: "ops", In: time.Minute, ID: fmt.Sprint("dead-", i), Body: []byte("x")})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		depth, err = DLQDepth(ctx, []string{ns}, wire.Access{}, group, testenv.Unique("dlq"))
		return err == nil && depth == 3
	}, 30*time.Second, 500*time.Millisecond, "depth %d, err %v", depth, err)
}

// clientLogTee is the handler the tests route the client's log to, once (the client's
// logger is a global its goroutines read without a lock): records go to base, and to the
// observer a test sets.
type clientLogTee struct {
	base     slog.Handler
	observer atomic.Pointer[slog.Handler]
}

// testClientLog is the tee TestMain installed.
var testClientLog *clientLogTee

func (h *clientLogTee) Enabled(context.Context, slog.Level) bool { return true }
func (h *clientLogTee) Handle(ctx context.Context, r slog.Record) error {
	if o := h.observer.Load(); o != nil {
		_ = (*o).Handle(ctx, r)
	}
	if h.base.Enabled(ctx, r.Level) {
		return h.base.Handle(ctx, r)
	}
	return nil
}
func (h *clientLogTee) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *clientLogTee) WithGroup(string) slog.Handler      { return h }

// levelCounter is a slog handler that counts records at or above Error.
type levelCounter struct {
	mu     sync.Mutex
	errors []string
}

func (h *levelCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *levelCounter) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.errors = append(h.errors, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *levelCounter) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *levelCounter) WithGroup(string) slog.Handler      { return h }

// observe makes o see every record of the client's log until the test ends. Only a
// test that does not run in parallel may observe.
func observe(t *testing.T, o slog.Handler) {
	testClientLog.observer.Store(&o)
	t.Cleanup(func() { testClientLog.observer.Store(nil) })
}

// slowRouteChange widens a race in rocketmq-client-go so that a test meets it every
// time: when a topic's route changes, the client makes it visible to its producers,
// logs "change the route for clients", and only then records the brokers' addresses. A
// send in between finds a queue but no broker address and fails at once with "route
// info not found". This handler holds the client in that window.
type slowRouteChange struct{ pause time.Duration }

func (h slowRouteChange) Enabled(context.Context, slog.Level) bool { return true }
func (h slowRouteChange) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "change the route for clients" {
		time.Sleep(h.pause)
	}
	return nil
}
func (h slowRouteChange) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h slowRouteChange) WithGroup(string) slog.Handler      { return h }

// TestFirstStartLogsNoError: creating a topic that does not exist yet, as every first
// start does, logs no ERROR (the client's "queryTopicRouteInfoFromServer failed" is
// expected there).
func TestFirstStartLogsNoError(t *testing.T) {
	h := &levelCounter{}
	observe(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	topic := testenv.Unique("rd_first_")
	require.NoError(t, EnsureTopic(ctx, []string{testenv.NameServer(t)}, wire.Access{}, topic, []string{testenv.Brokers(t)}, discardLogger()))
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Empty(t, h.errors)
}

// TestAccessTLSDialsTLS: with rocketmq.tls the clients speak TLS to the name server
// (every connection through a recording proxy in front of it opens with a TLS handshake
// record, 0x16) and publish through the local broker, which takes TLS and plain TCP
// alike (RocketMQ's default tls.server.mode, permissive); without it they speak the
// plain remoting protocol. The client's TLS is process-wide (wire.Access), so each case
// runs in a process of its own: this test binary again, as tlsChild.
func TestAccessTLSDialsTLS(t *testing.T) {
	if env := os.Getenv("ROCKETDELAY_TLS_CHILD"); env != "" {
		tlsChild(t, env)
		return
	}
	for _, useTLS := range []bool{true, false} {
		first := recordFirstBytes(t, testenv.NameServer(t))
		cmd := exec.Command(os.Args[0], "-test.run", "^TestAccessTLSDialsTLS$", "-test.count", "1")
		cmd.Env = append(os.Environ(), fmt.Sprintf("ROCKETDELAY_TLS_CHILD=%s,%t", first.addr, useTLS))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "tls %v: %s", useTLS, out)
		got := first.bytes()
		require.NotEmpty(t, got, "no connection reached the name server")
		for _, b := range got {
			require.Equal(t, useTLS, b == 0x16, "tls %v: a connection opened with 0x%02x", useTLS, b)
		}
	}
}

// tlsChild creates a topic and publishes an alert through the name server and with the
// TLS setting env names ("addr,true").
func tlsChild(t *testing.T, env string) {
	addr, useTLS, _ := strings.Cut(env, ",")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns, access := []string{addr}, wire.Access{TLS: useTLS == "true"}
	topic := testenv.Unique("rd_tls_")
	require.NoError(t, EnsureTopic(ctx, ns, access, topic, []string{testenv.Brokers(t)}, discardLogger()))
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: ns, Access: access, Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Publish(ctx, wire.Publication{Target: "ops", ID: testenv.Unique("tls"), In: time.Minute, Body: []byte("over TLS?")})
	require.NoError(t, err)
}

// firstBytes is a TCP proxy in front of a server that records the first byte each
// client connection sends.
type firstBytes struct {
	addr  string
	mu    sync.Mutex
	first []byte
}

func (f *firstBytes) bytes() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.first)
}

func recordFirstBytes(t *testing.T, target string) *firstBytes {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	f := &firstBytes{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				up, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer up.Close()
				b := make([]byte, 1)
				if _, err := io.ReadFull(c, b); err != nil {
					return
				}
				f.mu.Lock()
				f.first = append(f.first, b[0])
				f.mu.Unlock()
				if _, err := up.Write(b); err != nil {
					return
				}
				go func() { _, _ = io.Copy(c, up); c.Close() }()
				_, _ = io.Copy(up, c)
			}()
		}
	}()
	return f
}

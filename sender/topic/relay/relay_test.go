package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) {
	// The RocketMQ client's own log goes where the tests' log goes (RD_TEST_LOG).
	scheduler.RouteClientLog(testenv.Logger())
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}

// newRelay returns a relay on the local broker for one topic target "orders" of a topic
// of the test's own (consumed by the returned consumer), with rate per second.
func newRelay(t *testing.T, rate int) (*Sender, *topic.Target, *sinktest.Sink, *prometheus.Registry) {
	t.Helper()
	ns := testenv.NameServer(t)
	target := topic.Target{Target: "orders", TopicTarget: config.TopicTarget{Name: testenv.Unique("rd_relay_"), RatePerSecond: rate}}
	c := sinktest.Start(t, ns, target.Name)
	rdb, prefix := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	s, err := New(Options{NameServers: []string{ns}}, map[string]topic.Target{"orders": target}, store.NewTopicRate(rdb, prefix),
		testenv.Logger(), NewMetrics(reg))
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, &target, c, reg
}

// Messages that wait while a send is in flight go out together: with the first send
// held at its confirm until 199 more wait, 200 messages take three sends (1, then 128,
// the batch limit, then 71), and each arrives once with its own body and keys.
func TestWhatWaitsGoesOutInBatches(t *testing.T) {
	t.Parallel()
	s, target, c, reg := newRelay(t, 0)
	release := make(chan struct{})
	first := make(chan struct{})
	const n = 200
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("batch-%03d", i)
		confirm := func(context.Context, int) error { return nil }
		if i == 0 {
			confirm = func(context.Context, int) error { close(first); <-release; return nil }
		}
		m := sender.Alert{ID: ids[i], Target: "orders", Body: []byte("body of " + ids[i]),
			Props: map[string]string{"KEYS": "k-" + ids[i]}, Claim: sender.ConfirmFunc(confirm)}
		wg.Go(func() { _, errs[i] = s.Send(context.Background(), m) })
		if i == 0 {
			<-first // the first send is in flight: everything after it waits
		}
	}
	b := s.batcher(*target, target.Name)
	require.Eventually(t, func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return len(b.queue) == n-1
	}, 30*time.Second, time.Millisecond)
	close(release)
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, ids[i])
	}
	require.Equal(t, uint64(3), histogramCount(t, reg), "sends")
	require.Equal(t, float64(n), testutil.ToFloat64(s.metrics.messages.WithLabelValues("orders", "delivered")))
	c.WaitAll(t, ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, 1, c.Copies(id), id)
		m, _ := c.First(id)
		require.Equal(t, "body of "+id, string(m.Body))
		require.ElementsMatch(t, []string{"k-" + id, id}, strings.Fields(m.GetKeys()))
	}
}

// histogramCount is how many sends the batch histogram observed.
func histogramCount(t *testing.T, reg *prometheus.Registry) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "rocketdelay_topic_batch_messages" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatal("no rocketdelay_topic_batch_messages")
	return 0
}

// A large body (100 KiB, any bytes) arrives byte for byte; a body the broker would refuse
// (over its 4 MiB maxMessageSize) fails for good before it is sent, and does not take the
// message beside it down.
func TestLargeBodiesAndOneTheBrokerRefuses(t *testing.T) {
	t.Parallel()
	s, _, c, _ := newRelay(t, 0)
	big := make([]byte, 100<<10)
	_, _ = rand.Read(big)
	huge := make([]byte, 5<<20)
	_, _ = rand.Read(huge)
	var wg sync.WaitGroup
	var bigErr, hugeErr error
	wg.Go(func() { _, bigErr = s.Send(context.Background(), sender.Alert{ID: "big", Target: "orders", Body: big}) })
	wg.Go(func() {
		_, hugeErr = s.Send(context.Background(), sender.Alert{ID: "huge", Target: "orders", Body: huge})
	})
	wg.Wait()
	require.NoError(t, bigErr)
	var f *sender.Failure
	require.ErrorAs(t, hugeErr, &f)
	require.Equal(t, sender.ClassPermanent, f.Class, "%v", hugeErr)
	require.Contains(t, f.Reason, "the body of 5242880 bytes is larger than the brokers accept (rocketmq.maxMessageSize, 4194304 bytes)")
	c.WaitAll(t, []string{"big"}, 30*time.Second)
	m, _ := c.First("big")
	require.True(t, bytes.Equal(big, m.Body), "the compressed body arrived changed")
}

// A message whose claim cannot be confirmed is not sent; its failure wraps the
// confirm's error, so the hand-off sees a lost claim for what it is.
func TestAMessageWhoseClaimIsLostIsNotSent(t *testing.T) {
	t.Parallel()
	s, _, c, _ := newRelay(t, 0)
	_, err := s.Send(context.Background(), sender.Alert{ID: "lost", Target: "orders", Body: []byte("x"),
		Claim: sender.ConfirmFunc(func(context.Context, int) error { return store.ErrNotHeld })})
	require.ErrorIs(t, err, store.ErrNotHeld)
	_, err = s.Send(context.Background(), sender.Alert{ID: "after", Target: "orders", Body: []byte("y")})
	require.NoError(t, err)
	c.WaitAll(t, []string{"after"}, 30*time.Second)
	require.Zero(t, c.Copies("lost"))
}

// TestStaleConfirmSendsNothingToTheTopic: a send must start within the fence of its
// claims' confirms. The relay's clock is aged past the fence by the confirm itself, as
// if this replica were paused right after it: the batch send is not made (the broker
// sees no send, the topic no message), and each attempt confirms again. Paused after
// every confirm, the message fails, transiently, wrapping sender.ErrStaleConfirm; paused
// once, the next attempt's confirm is fresh and the message arrives once.
func TestStaleConfirmSendsNothingToTheTopic(t *testing.T) {
	t.Parallel()
	s, _, c, reg := newRelay(t, 0)
	const fence = time.Second
	var skew atomic.Int64 // how far the relay's clock is ahead
	s.opts.Fence = fence
	s.opts.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	pause := func() { skew.Add(int64(fence + time.Second)) }
	ctx := context.Background()

	var confirms atomic.Int32
	_, err := s.Send(ctx, sender.Alert{ID: "stale", Target: "orders", Body: []byte("x"),
		Claim: sender.ConfirmFunc(func(context.Context, int) error { confirms.Add(1); pause(); return nil })})
	require.ErrorIs(t, err, sender.ErrStaleConfirm)
	var f *sender.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, sender.ClassTransient, f.Class)
	require.EqualValues(t, s.opts.Attempts, confirms.Load(), "each attempt confirmed again")

	confirms.Store(0)
	_, err = s.Send(ctx, sender.Alert{ID: "paused-once", Target: "orders", Body: []byte("y"),
		Claim: sender.ConfirmFunc(func(context.Context, int) error {
			if confirms.Add(1) == 1 {
				pause()
			}
			return nil
		})})
	require.NoError(t, err)
	require.EqualValues(t, 2, confirms.Load())
	c.WaitAll(t, []string{"paused-once"}, 30*time.Second)
	require.Equal(t, uint64(1), histogramCount(t, reg), "one send reached the broker: the fresh one")
	require.Equal(t, 1, c.Copies("paused-once"))
	require.Zero(t, c.Copies("stale"))
}

// A broker that cannot be reached is a transient failure (the hand-off retries it, then
// records it for the retry job); an unknown target is a permanent one.
func TestUnreachableBrokerIsTransient(t *testing.T) {
	t.Parallel()
	target := topic.Target{Target: "orders", TopicTarget: config.TopicTarget{Name: "nowhere"}}
	s, err := New(Options{NameServers: []string{testenv.ClosedAddr(t)}, SendTimeout: 2 * time.Second},
		map[string]topic.Target{"orders": target}, nil, testenv.Logger(), NewMetrics(nil))
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Send(context.Background(), sender.Alert{ID: "x", Target: "orders", Body: []byte("x")})
	var f *sender.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, sender.ClassTransient, f.Class, "%v", err)
	require.Contains(t, f.Reason, "send to topic nowhere failed")
	require.Equal(t, DefaultAttempts, f.Attempts, "a transient failure is tried again")

	_, err = s.Send(context.Background(), sender.Alert{ID: "x", Target: "billing", Body: []byte("x")})
	require.ErrorAs(t, err, &f)
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.False(t, errors.Is(err, store.ErrNotHeld))
}

// Two relays (two replicas) of a target with ratePerSecond 50 share its rate: 100
// messages take at least (100 - burst) / 50 s on Redis's clock. A lower bound on time
// that load cannot break: a slow machine only takes longer.
func TestRateIsSharedByReplicas(t *testing.T) {
	t.Parallel()
	ns := testenv.NameServer(t)
	target := topic.Target{Target: "orders", TopicTarget: config.TopicTarget{Name: testenv.Unique("rd_rate_"), RatePerSecond: 50}}
	c := sinktest.Start(t, ns, target.Name)
	rdb, prefix := testenv.Redis(t)
	var relays [2]*Sender
	for i := range relays {
		s, err := New(Options{NameServers: []string{ns}}, map[string]topic.Target{"orders": target}, store.NewTopicRate(rdb, prefix),
			testenv.Logger(), NewMetrics(nil))
		require.NoError(t, err)
		t.Cleanup(s.Close)
		relays[i] = s
	}
	ctx := context.Background()
	start, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	const n, burst = 100, 5
	ids := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = fmt.Sprintf("rate-%03d", i)
		wg.Go(func() {
			_, err := relays[i%2].Send(ctx, sender.Alert{ID: ids[i], Target: "orders", Body: []byte("x")})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	end, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	t.Logf("%d messages at 50/s took %s", n, end.Sub(start))
	require.GreaterOrEqual(t, end.Sub(start), time.Duration(n-burst)*time.Second/50)
	c.WaitAll(t, ids, 30*time.Second)
}

// shortOfOK is a producer whose broker stores every message on its master and answers
// SLAVE_NOT_AVAILABLE (a synchronously replicated broker whose slave is down).
type shortOfOK struct {
	rocketmq.Producer
	sends atomic.Int32
}

func (p *shortOfOK) SendSync(_ context.Context, msgs ...*primitive.Message) (*primitive.SendResult, error) {
	p.sends.Add(1)
	return &primitive.SendResult{Status: primitive.SendSlaveNotAvailable}, nil
}

// A send the broker stored but answered short of SEND_OK is delivered once and counted:
// it was sent again (three sends a hand-off, and as many each retry of its row: 63
// copies, the row ending dead).
func TestASendStoredShortOfOKIsNotSentAgain(t *testing.T) {
	t.Parallel()
	s, _, _, reg := newRelay(t, 0)
	stub := &shortOfOK{Producer: s.producer}
	s.producer = stub
	_, err := s.Send(context.Background(), sender.Alert{ID: "short-1", Target: "orders", Body: []byte("x")})
	require.NoError(t, err)
	require.Equal(t, int32(1), stub.sends.Load())
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.notDurable.WithLabelValues("orders", "SLAVE_NOT_AVAILABLE")), "%v", reg)
}

// A target naming a topic that does not exist fails its send (transient), rather than
// the broker creating it on the fly and the message counted delivered to a topic nobody
// consumes.
func TestAMissingTopicIsNotCreated(t *testing.T) {
	t.Parallel()
	target := topic.Target{Target: "orders", TopicTarget: config.TopicTarget{Name: testenv.Unique("rd_missing_")}}
	s, err := New(Options{NameServers: []string{testenv.NameServer(t)}, SendTimeout: 2 * time.Second, Attempts: 1},
		map[string]topic.Target{"orders": target}, nil, testenv.Logger(), NewMetrics(nil))
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Send(context.Background(), sender.Alert{ID: "missing-1", Target: "orders", Body: []byte("x")})
	var f *sender.Failure
	require.ErrorAs(t, err, &f, "sent to a topic that did not exist")
	require.Equal(t, sender.ClassTransient, f.Class)
}

// The broker's answers are classed: an illegal message (13) and a user without Pub on the
// topic (16) fail for good, an operator's to fix and retry (a denial was retried for a
// day, 63 sends); anything else is transient.
func TestBrokerCodesAreClassed(t *testing.T) {
	for code, class := range map[int]sender.Class{13: sender.ClassPermanent, 16: sender.ClassPermanent, 14: sender.ClassTransient} {
		f := classify("orders", "order-events", fmt.Errorf("CODE: %d  DESC: refused", code))
		require.Equal(t, class, f.Class, "code %d", code)
	}
}

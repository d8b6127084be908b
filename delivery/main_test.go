package delivery_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func ptr[T any](v T) *T { return &v }

// fakeSender records what it delivered; fail decides whether a send fails.
type fakeSender struct {
	mu        sync.Mutex
	fail      func(payload string) error
	delivered map[string]int
	failures  int
	fromParts []int
}

func newFakeSender(fail func(payload string) error) *fakeSender {
	return &fakeSender{fail: fail, delivered: map[string]int{}}
}

func (s *fakeSender) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	if err := ctx.Err(); err != nil {
		return sender.Sent{}, err
	}
	if a.Claim != nil {
		if err := a.Claim.Confirm(ctx, a.PartsSent); err != nil {
			return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "not sent: " + err.Error(), Err: err}
		}
	}
	payload := a.Body
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fromParts = append(s.fromParts, a.PartsSent+1)
	if s.fail != nil {
		if err := s.fail(string(payload)); err != nil {
			s.failures++
			return sender.Sent{}, err
		}
	}
	s.delivered[string(payload)]++
	return sender.Sent{Merged: 1, Parts: 1}, nil
}

func (s *fakeSender) snapshot() (map[string]int, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.delivered))
	for k, v := range s.delivered {
		out[k] = v
	}
	return out, s.failures
}

var errBlocked = errors.New("blocked until cancelled")

// stages holds one wheel stage per failed_sends table under test, so that the retry jobs
// and deliverers of one test share their done markers.
var stages sync.Map // *store.FailedSends → *store.WheelStage

// stageFor returns the wheel stage (in the test's own Redis prefix) that goes with fs.
func stageFor(t testing.TB, fs *store.FailedSends) *store.WheelStage {
	t.Helper()
	if ws, ok := stages.Load(fs); ok {
		return ws.(*store.WheelStage)
	}
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	actual, _ := stages.LoadOrStore(fs, ws)
	t.Cleanup(func() { stages.Delete(fs) })
	return actual.(*store.WheelStage)
}

// newDeliverer returns a Deliverer on fs and its wheel stage that sends through snd, the
// channel of target ops and of the rows the tests record without a target.
func newDeliverer(t testing.TB, fs *store.FailedSends, snd sender.Channel, opts delivery.Options, m *delivery.Metrics, now func() time.Time) *delivery.Deliverer {
	t.Helper()
	return delivery.New(delivery.Channels{"ops": snd, "": snd}, stageFor(t, fs), fs, opts, discardLogger(), m, now)
}

// newJob returns a retry job on fs that sends through snd.
func newJob(t testing.TB, fs *store.FailedSends, snd sender.Channel, opts delivery.RetryOptions, m *delivery.Metrics, now func() time.Time) *delivery.RetryJob {
	t.Helper()
	return delivery.NewRetryJob(newDeliverer(t, fs, snd, delivery.Options{}, m, now), opts)
}

// claimed puts an alert due now into fs's wheel stage, claims it, and returns the alert
// as the scheduler hands it off.
func claimed(t testing.TB, fs *store.FailedSends, id, body string) sender.Alert {
	t.Helper()
	ws := stageFor(t, fs)
	ctx := context.Background()
	due := time.UnixMilli(time.Now().UnixMilli())
	_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte(body)})
	require.NoError(t, err)
	got, err := ws.Claim(ctx, []string{id}, "test-claim")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	e := got.Entries[0]
	return sender.Alert{ID: e.ID, Target: e.Target, Due: e.DueAt, Body: e.Body, Claim: stageClaim{ws, e.Claim()},
		Noted: e.Failure, PartsSent: e.PartsSent}
}

// stageClaim is a wheel-stage claim as the scheduler hands it to delivery (its
// heldEntry): confirmed and noted in ws; never parked.
type stageClaim struct {
	ws *store.WheelStage
	c  store.Claim
}

func (s stageClaim) Confirm(ctx context.Context, parts int) error {
	return s.ws.Confirm(ctx, s.c, parts)
}
func (s stageClaim) MarkFailed(ctx context.Context, f []byte) error {
	return s.ws.MarkFailed(ctx, s.c, f)
}
func (stageClaim) Park(context.Context, string) error { return sender.ErrNoPark }

// heldBy is the wheel-stage claim that holds a.
func heldBy(a sender.Alert) store.Claim { return a.Claim.(stageClaim).c }

// lostClaim is c as held by another replica's token: this one lost it.
func lostClaim(c sender.Claim) sender.Claim {
	sc := c.(stageClaim)
	sc.c.Token = "someone-else"
	return sc
}

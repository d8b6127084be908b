package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestDeliverRecordsWhatTheSenderGivesUp checks what Deliver records for each outcome of
// a send: nothing when delivered, a pending row due after FirstRetry (or the failure's
// RetryAfter) for a retryable failure, a rejected row for a permanent one.
func TestDeliverRecordsWhatTheSenderGivesUp(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	failures := map[string]error{
		"throttled": &sender.Failure{Class: sender.ClassThrottled, Reason: "send too fast", Errcode: 130101},
		"breakers":  &sender.Failure{Class: sender.ClassTransient, Reason: "every breaker open", RetryAfter: time.Hour},
		"too-big":   &sender.Failure{Class: sender.ClassPermanent, Reason: "too long", Errcode: 460101},
	}
	snd := newFakeSender(func(p string) error { return failures[p] })
	d := delivery.New(snd, fs, delivery.Options{FirstRetry: time.Minute}, discardLogger(), nil, func() time.Time { return now })
	due := now.Add(-time.Second)
	for _, id := range []string{"ok", "throttled", "breakers", "too-big"} {
		require.NoError(t, d.Deliver(ctx, delivery.Alert{ID: id, Target: "ops", DueAt: due, Body: []byte(id)}), id)
	}
	delivered, _ := snd.snapshot()
	require.Equal(t, map[string]int{"ok": 1}, delivered)

	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	byID := map[string]store.FailedSend{}
	for _, r := range rows {
		byID[r.MessageID] = r
		require.True(t, due.Equal(*r.DueAt), r.MessageID)
		require.Equal(t, r.MessageID, string(r.Payload))
	}
	require.Equal(t, store.StatusPending, byID["throttled"].Status)
	require.Equal(t, "throttled", byID["throttled"].ErrorClass)
	require.Equal(t, 130101, *byID["throttled"].Errcode)
	require.True(t, now.Add(time.Minute).Equal(*byID["throttled"].NextAttemptAt))
	require.True(t, now.Add(time.Hour).Equal(*byID["breakers"].NextAttemptAt), "RetryAfter beyond FirstRetry wins")
	require.Equal(t, store.StatusRejected, byID["too-big"].Status)
	require.Equal(t, "permanent", byID["too-big"].ErrorClass)
	require.Equal(t, "too long", byID["too-big"].LastError)
}

// TestDeliverKeepsTheAlertWhenNothingCanBeRecorded: with Postgres gone, a failed send is
// an error (the caller keeps the alert) and the record error is counted.
func TestDeliverKeepsTheAlertWhenNothingCanBeRecorded(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	pool.Close()
	reg := prometheus.NewRegistry()
	m := delivery.NewMetrics(reg)
	snd := newFakeSender(func(string) error { return &sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503"} })
	d := delivery.New(snd, fs, delivery.Options{}, discardLogger(), m, time.Now)
	err := d.Deliver(context.Background(), delivery.Alert{ID: "a", Target: "ops", DueAt: time.Now(), Body: []byte("x")})
	require.ErrorIs(t, err, store.ErrUnavailable)
	err = d.Reject(context.Background(), delivery.Rejected{Alert: delivery.Alert{ID: "b"}, Reason: "bad_body", Detail: "not JSON"})
	require.ErrorIs(t, err, store.ErrUnavailable)
	got, err := reg.Gather()
	require.NoError(t, err)
	counts := map[string]float64{}
	for _, mf := range got {
		if mf.GetName() == "rocketdelay_failed_sends_record_errors_total" {
			for _, s := range mf.GetMetric() {
				counts[s.GetLabel()[0].GetValue()] = s.GetCounter().GetValue()
			}
		}
	}
	require.Equal(t, map[string]float64{"send_failure": 1, "rejected": 1}, counts)
}

// TestRejectNamesTheRow: a rejected input is recorded under its RD_ID, or, when the id
// itself is what is wrong, under its broker message key.
func TestRejectNamesTheRow(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	d := delivery.New(newFakeSender(nil), fs, delivery.Options{}, discardLogger(), nil, time.Now)
	due := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	require.NoError(t, d.Reject(ctx, delivery.Rejected{
		Alert:      delivery.Alert{ID: "order-1", Target: "nobody", DueAt: due, Body: []byte("hi")},
		Properties: map[string]string{"RD_TARGET": "nobody"}, MessageKey: "K1",
		Reason: "unknown_target", Detail: `RD_TARGET "nobody" is not a target`,
	}))
	require.NoError(t, d.Reject(ctx, delivery.Rejected{
		Alert: delivery.Alert{ID: "has space"}, MessageKey: "K2", Reason: delivery.ReasonBadID, Detail: "bad id",
	}))
	rows, _, err := fs.List(ctx, store.Filter{Status: store.StatusRejected})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	byID := map[string]store.FailedSend{}
	for _, r := range rows {
		byID[r.MessageID] = r
	}
	require.Equal(t, "rejected_unknown_target", byID["order-1"].ErrorClass)
	require.Equal(t, map[string]string{"RD_TARGET": "nobody"}, byID["order-1"].Properties)
	require.True(t, due.Equal(*byID["order-1"].DueAt))
	require.Equal(t, "rejected_bad_id", byID["rejected:K2"].ErrorClass)
	require.Nil(t, byID["rejected:K2"].DueAt)
}

package delivery_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
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
		"throttled": &sender.Failure{Class: sender.ClassThrottled, Reason: "send too fast", Code: 130101},
		"breakers":  &sender.Failure{Class: sender.ClassTransient, Reason: "every breaker open", RetryAfter: time.Hour},
		"too-big":   &sender.Failure{Class: sender.ClassPermanent, Reason: "too long", Code: 460101},
		"split":     &sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503", Part: 3, Parts: 5},
	}
	snd := newFakeSender(func(p string) error { return failures[p] })
	d := newDeliverer(t, fs, snd, delivery.Options{FirstRetry: time.Minute}, nil, func() time.Time { return now })
	dues := map[string]time.Time{}
	for _, id := range []string{"ok", "throttled", "breakers", "too-big", "split"} {
		a := claimed(t, fs, id, id)
		dues[id] = a.Due
		outcome, err := d.Deliver(ctx, a)
		require.NoError(t, err, id)
		want := store.Recorded
		if id == "ok" {
			want = store.Delivered
		}
		require.Equal(t, want, outcome.Outcome, id)
	}
	delivered, _ := snd.snapshot()
	require.Equal(t, map[string]int{"ok": 1}, delivered)

	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 4)
	byID := map[string]store.FailedSend{}
	for _, r := range rows {
		byID[r.MessageID] = r
		require.True(t, dues[r.MessageID].Equal(*r.DueAt), r.MessageID)
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
	require.Equal(t, 2, byID["split"].PartsSent, "parts 1 and 2 were delivered before part 3 failed")
}

// A failed send whose record cannot be written (Postgres down) is noted under the claim;
// the next hand-off of the same alert only records it, it never sends it again.
func TestDeliverRecordsANotedFailureWithoutSendingAgain(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	snd := newFakeSender(func(string) error { return &sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503"} })
	deadPool, deadFS := testenv.FailedSends(t)
	deadPool.Close()
	ws := stageFor(t, fs)
	stages.Store(deadFS, ws) // the same wheel stage, behind a Postgres that is down
	reg := prometheus.NewRegistry()
	down := newDeliverer(t, deadFS, snd, delivery.Options{}, delivery.NewMetrics(reg), time.Now)

	a := claimed(t, fs, "a", "disk full")
	_, err := down.Deliver(ctx, a)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Equal(t, 1.0, counterValue(t, reg, "rocketdelay_failed_sends_record_errors_total", "send_failure"))
	ok, err := ws.GiveBack(ctx, heldBy(a), time.Now().Add(-time.Second), 0)
	require.NoError(t, err)
	require.True(t, ok)

	again := claimed2(t, ws, "a")
	require.NotNil(t, again.Noted, "the failure was noted")
	up := newDeliverer(t, fs, snd, delivery.Options{}, nil, time.Now)
	outcome, err := up.Deliver(ctx, again)
	require.NoError(t, err)
	require.Equal(t, store.Recorded, outcome.Outcome)
	_, failures := snd.snapshot()
	require.Equal(t, 1, failures, "sent once: the second hand-off only recorded the failure")
	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "HTTP 503", rows[0].LastError)
}

// A replica that lost its claim (paused past its lease) neither sends nor records.
func TestDeliverWithALostClaimDoesNothing(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	snd := newFakeSender(nil)
	d := newDeliverer(t, fs, snd, delivery.Options{}, nil, time.Now)
	a := claimed(t, fs, "a", "x")
	a.Claim = lostClaim(a.Claim)
	_, err := d.Deliver(ctx, a)
	require.ErrorIs(t, err, store.ErrNotHeld)
	delivered, _ := snd.snapshot()
	require.Empty(t, delivered)

	// Nor does it record the failure of a send it made before losing the claim.
	failing := newFakeSender(func(string) error { return &sender.Failure{Class: sender.ClassThrottled, Reason: "too fast"} })
	b := claimed(t, fs, "b", "y")
	noted, err := json(&sender.Failure{Class: sender.ClassThrottled, Reason: "too fast"})
	require.NoError(t, err)
	b.Noted, b.Claim = noted, lostClaim(b.Claim)
	_, err = newDeliverer(t, fs, failing, delivery.Options{}, nil, time.Now).Deliver(ctx, b)
	require.ErrorIs(t, err, store.ErrNotHeld)
	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Empty(t, rows)
}

// A robot pick that failed because Redis is down is not a send failure: the alert is
// kept (an error), not recorded.
func TestDeliverKeepsAnAlertTheStoreFailed(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	storeDown := fmt.Errorf("store: pick robot: dial tcp: %w", store.ErrUnavailable)
	snd := newFakeSender(func(string) error {
		return &sender.Failure{Class: sender.ClassTransient, Reason: "robot pool: down", Err: storeDown}
	})
	d := newDeliverer(t, fs, snd, delivery.Options{}, nil, time.Now)
	_, err := d.Deliver(context.Background(), claimed(t, fs, "a", "x"))
	require.ErrorIs(t, err, store.ErrUnavailable)
	rows, _, err := fs.List(context.Background(), store.Filter{})
	require.NoError(t, err)
	require.Empty(t, rows)
}

// A send the channel ended because the replica is stopping (sender.ErrStopping) is no
// failure: the alert is kept (an error), neither noted as failed nor recorded, for the
// replica to hand it back. Deliverer.Stop stops the channels that can stop.
func TestDeliverKeepsAnAlertNotSentWhileStopping(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	snd := &stoppable{fakeSender: newFakeSender(func(string) error {
		return &sender.Failure{Class: sender.ClassTransient, Reason: "not sent: this replica is stopping", Err: sender.ErrStopping}
	})}
	d := newDeliverer(t, fs, snd, delivery.Options{}, nil, time.Now)
	d.Stop()
	require.True(t, snd.stopped.Load(), "the channel was stopped")
	a := claimed(t, fs, "a", "x")
	_, err := d.Deliver(context.Background(), a)
	require.ErrorIs(t, err, sender.ErrStopping)
	rows, _, err := fs.List(context.Background(), store.Filter{})
	require.NoError(t, err)
	require.Empty(t, rows)
	ws := stageFor(t, fs)
	again, err := ws.Claim(context.Background(), []string{"a"}, heldBy(a).Token)
	require.NoError(t, err)
	require.Len(t, again.Entries, 1)
	require.Nil(t, again.Entries[0].Failure, "no failure noted under the claim")
}

// stoppable is a fakeSender that can stop.
type stoppable struct {
	*fakeSender
	stopped atomic.Bool
}

func (s *stoppable) Stop() { s.stopped.Store(true) }

// TestRejectNamesTheRow: a rejected input is recorded under its RD_ID, or, when the id
// itself is what is wrong, under its broker message key; whatever bytes it carries.
func TestRejectNamesTheRow(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	d := newDeliverer(t, fs, newFakeSender(nil), delivery.Options{}, nil, time.Now)
	due := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	require.NoError(t, d.Reject(ctx, delivery.Rejected{
		Alert:      sender.Alert{ID: "order-1", Target: "nobody", Due: due, Body: []byte("hi")},
		Properties: map[string]string{"RD_TARGET": "nobody"}, MessageKey: "K1",
		Reason: "unknown_target", Detail: `RD_TARGET "nobody" is not a target`,
	}))
	require.NoError(t, d.Reject(ctx, delivery.Rejected{
		Alert: sender.Alert{ID: "has space"}, MessageKey: "K2", Reason: delivery.ReasonBadID, Detail: "bad id",
	}))
	require.NoError(t, d.Reject(ctx, delivery.Rejected{
		Alert:      sender.Alert{ID: "nul\x00id", Target: "bad\xffutf8", Body: []byte("\x00\xff")},
		Properties: map[string]string{"RD_ID": "nul\x00id", "RD_TARGET": "bad\xffutf8", "k\x00": "v\xfe"},
		MessageKey: "K3\x00", Reason: delivery.ReasonBadID, Detail: "RD_ID must be printable",
	}))
	rows, _, err := fs.List(ctx, store.Filter{Status: store.StatusRejected})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	byID := map[string]store.FailedSend{}
	for _, r := range rows {
		byID[r.MessageID] = r
	}
	require.Equal(t, "rejected_unknown_target", byID["order-1"].ErrorClass)
	require.Equal(t, map[string]string{"RD_TARGET": "nobody"}, byID["order-1"].Properties)
	require.True(t, due.Equal(*byID["order-1"].DueAt))
	require.Equal(t, "rejected_bad_id", byID["rejected:K2"].ErrorClass)
	require.Nil(t, byID["rejected:K2"].DueAt)
	nul := byID["rejected:K3\u2400"]
	require.Equal(t, "bad\uFFFDutf8", nul.Target, "invalid UTF-8 is recorded, visibly")
	require.Equal(t, []byte("\x00\xff"), nul.Payload, "the body is kept byte for byte")
	require.Equal(t, "nul\u2400id", nul.Properties["RD_ID"])
	require.Equal(t, "v\uFFFD", nul.Properties["k\u2400"])
}

// Every rejection leaves a row, and none overwrites another: a bad input whose RD_ID
// names an alert that already has a live row is recorded under its message key, and a
// redelivery of the same bad input is still one row.
func TestRejectNeverOverwritesAnotherRow(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	d := newDeliverer(t, fs, newFakeSender(nil), delivery.Options{}, nil, time.Now)
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "order-7", Target: "ops", Payload: []byte("real alert"),
		ErrorClass: "transient", LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	bad := delivery.Rejected{Alert: sender.Alert{ID: "order-7", Target: "ops", Body: []byte("{not json")},
		MessageKey: "KEY-7", Reason: "bad_body", Detail: "the body is not valid JSON"}
	for range 2 { // a redelivery of the same message records nothing more
		require.NoError(t, d.Reject(ctx, bad))
	}
	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	byID := map[string]store.FailedSend{}
	for _, r := range rows {
		byID[r.MessageID] = r
	}
	require.Equal(t, store.StatusPending, byID["order-7"].Status, "the alert's own row is untouched")
	require.Equal(t, []byte("real alert"), byID["order-7"].Payload)
	require.Equal(t, "HTTP 503", byID["order-7"].LastError)
	require.Equal(t, store.StatusRejected, byID["rejected:KEY-7"].Status)
	require.Equal(t, "rejected_bad_body", byID["rejected:KEY-7"].ErrorClass)
	require.Equal(t, []byte("{not json"), byID["rejected:KEY-7"].Payload)
}

// A stale hand-off (a replica that lost its claim, a redelivered copy) of an alert whose
// row the retry job delivered meanwhile records nothing over it and does not downgrade
// its done marker: the row is not revived and sent again.
func TestStaleRecordLeavesADeliveredRowAlone(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	snd := newFakeSender(func(string) error { return &sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503"} })
	d := newDeliverer(t, fs, snd, delivery.Options{}, nil, time.Now)
	a := claimed(t, fs, "late", "disk full")
	outcome, err := d.Deliver(ctx, a)
	require.NoError(t, err)
	require.Equal(t, store.Recorded, outcome.Outcome)
	id := rowID(t, fs, "late")
	require.NoError(t, fs.MarkDelivered(ctx, id)) // the retry job delivered it
	ws := stageFor(t, fs)
	require.NoError(t, ws.MarkDelivered(ctx, "late"))

	// The stale copy: the same alert, its failure noted, handed off once more by a
	// replica whose claim outlived the retry job's delivery.
	stale := a
	stale.Noted, err = json(&sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503"})
	require.NoError(t, err)
	outcome, err = d.Deliver(ctx, stale)
	require.NoError(t, err)
	require.Equal(t, store.Recorded, outcome.Outcome, "done with: released, never sent")
	row, err := fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, row.Status, "a stale record revived a delivered row")
	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 1, "a stale record added a live row of the delivered alert: the retry job would send it again")
	_, failures := snd.snapshot()
	require.Equal(t, 1, failures, "sent once, by the first hand-off")
	_, err = ws.Release(ctx, store.Recorded, heldBy(a))
	require.NoError(t, err)
	delivered, err := ws.IsDelivered(ctx, "late")
	require.NoError(t, err)
	require.True(t, delivered, "the done marker stays delivered")
	row, err = fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, row.Status)
}

// claimed2 claims an entry already in ws again and returns it as the scheduler hands it
// off.
func claimed2(t testing.TB, ws *store.WheelStage, id string) sender.Alert {
	t.Helper()
	got, err := ws.Claim(context.Background(), []string{id}, "second-claim")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	e := got.Entries[0]
	return sender.Alert{ID: e.ID, Target: e.Target, Due: e.DueAt, Body: e.Body, Claim: stageClaim{ws, e.Claim()},
		Noted: e.Failure, PartsSent: e.PartsSent}
}

// json encodes f as a noted failure, the way Deliver notes it (a round trip through the
// wheel stage would do the same).
func json(f *sender.Failure) ([]byte, error) {
	if f == nil {
		return nil, errors.New("nil failure")
	}
	return fmt.Appendf(nil, `{"class":%q,"reason":%q}`, f.Class, f.Reason), nil
}

// counterValue is the value of the counter name{label} in reg.
func counterValue(t testing.TB, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) > 0 && m.GetLabel()[0].GetValue() == label {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A replica with no targets of its own claims no failed row: nil targets would claim
// every target's rows (store.FailedSends.ClaimDue), which it could only put off until
// they died.
func TestNoTargetsIsNotEveryTarget(t *testing.T) {
	require.NotNil(t, delivery.Channels{}.Targets())
	require.Empty(t, delivery.Channels{}.Targets())
}

package delivery_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/sender/topic/relay"
	"github.com/rocketdelay/rocketdelay/store"
)

// A due message of a topic target whose broker cannot be reached is recorded in
// failed_sends with its class, reason and properties; the retry job then sends it, with
// those properties, to the business topic once the broker is there.
func TestTopicMessageRecordedThenSentByTheRetryJob(t *testing.T) {
	t.Parallel()
	ns := testenv.NameServer(t)
	biz := testenv.Unique("rd_dlv_orders_")
	targets := map[string]topic.Target{"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: biz, Tag: "delayed"}}}
	consumer := sinktest.Start(t, ns, biz)
	_, fs := testenv.FailedSends(t)
	ws := stageFor(t, fs)
	ctx := context.Background()

	down, err := relay.New(relay.Options{NameServers: []string{testenv.ClosedAddr(t)}, SendTimeout: time.Second, Attempts: 2,
		BackoffBase: 10 * time.Millisecond}, targets, nil, discardLogger(), relay.NewMetrics(nil))
	require.NoError(t, err)
	defer down.Close()
	d := delivery.New(delivery.Channels{"orders": down}, ws, fs, delivery.Options{FirstRetry: time.Millisecond}, discardLogger(), nil, time.Now)

	props := map[string]string{"KEYS": "order-7", "shop": "eu-1"}
	due := time.UnixMilli(time.Now().UnixMilli())
	_, err = ws.Put(ctx, store.Entry{ID: "order-7-close", Target: "orders", DueAt: due, Body: []byte{1, 2, 0xff}, Props: props})
	require.NoError(t, err)
	got, err := ws.Claim(ctx, []string{"order-7-close"}, "claim")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	e := got.Entries[0]
	out, err := d.Deliver(ctx, sender.Alert{ID: e.ID, Target: e.Target, Due: e.DueAt, Body: e.Body, Props: e.Props, Claim: stageClaim{ws, e.Claim()}})
	require.NoError(t, err)
	require.Equal(t, store.Recorded, out.Outcome)
	rows, _, err := fs.List(ctx, store.Filter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	row := rows[0]
	require.Equal(t, store.StatusPending, row.Status)
	require.Equal(t, "transient", row.ErrorClass)
	require.Contains(t, row.LastError, "send to topic "+biz+" failed")
	require.Equal(t, props, row.Properties)
	require.Equal(t, []byte{1, 2, 0xff}, row.Payload)

	up, err := relay.New(relay.Options{NameServers: []string{ns}}, targets, nil, discardLogger(), relay.NewMetrics(nil))
	require.NoError(t, err)
	defer up.Close()
	job := delivery.NewRetryJob(delivery.New(delivery.Channels{"orders": up}, ws, fs, delivery.Options{}, discardLogger(), nil, time.Now),
		delivery.RetryOptions{})
	r, err := job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, r.Delivered)
	consumer.WaitAll(t, []string{"order-7-close"}, 30*time.Second)
	m, _ := consumer.First("order-7-close")
	require.Equal(t, []byte{1, 2, 0xff}, m.Body)
	require.Equal(t, "delayed", m.GetTags())
	require.Equal(t, "eu-1", m.GetProperty("shop"))
	require.Equal(t, "order-7 order-7-close", m.GetKeys())
	row, err = fs.Get(ctx, row.ID)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, row.Status)
}

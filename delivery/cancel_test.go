package delivery_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// simJob is a retry job that sends through a real sender to a DingTalk simulator, whose
// record says what DingTalk received, and the service's canceller.
type simJob struct {
	sim  *chatsim.Server
	pool *pgxpool.Pool
	ws   *store.WheelStage
	fs   *store.FailedSends
	job  *delivery.RetryJob
	hook *confirmHook
}

// confirmHook is a Sender that runs before and after around every confirm of the
// sender it wraps (each nil: nothing), to put a step of a test exactly there.
type confirmHook struct {
	sender.Channel
	mu            sync.Mutex
	before, after func()
}

func (h *confirmHook) set(before, after func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.before, h.after = before, after
}

func (h *confirmHook) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	h.mu.Lock()
	before, after := h.before, h.after
	h.mu.Unlock()
	claim := a.Claim
	a.Claim = sender.ConfirmFunc(func(ctx context.Context, partsSent int) error {
		if before != nil {
			before()
		}
		err := claim.Confirm(ctx, partsSent)
		if after != nil {
			after()
		}
		return err
	})
	return h.Channel.Send(ctx, a)
}

// cancelNote is who cancels in these tests, and why.
var cancelNote = store.CancelNote{By: "on-call", Reason: "order was paid"}

func newSimJob(t *testing.T) *simJob {
	t.Helper()
	pool, fs := testenv.FailedSends(t)
	ws := stageFor(t, fs)
	rdb, prefix := testenv.Redis(t)
	sim, url := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "cancel-token"}},
		Limit: 10000})
	snd, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{"ops": {Protocol: dingtalk.New(url),
		Robots: []sender.Robot{{Name: "r1", Token: config.Secret("cancel-token")}}}}, Limit: 10000, HTTPTimeout: 5 * time.Second},
		store.NewRobotPool(rdb, prefix, time.Minute), discardLogger(), sender.NewMetrics(prometheus.NewRegistry()), nil)
	require.NoError(t, err)
	t.Cleanup(snd.Close)
	hook := &confirmHook{Channel: snd}
	d := delivery.New(delivery.Channels{"ops": hook}, ws, fs, delivery.Options{}, discardLogger(), nil, time.Now)
	return &simJob{sim: sim, pool: pool, ws: ws, fs: fs, job: delivery.NewRetryJob(d, delivery.RetryOptions{}), hook: hook}
}

// recordFailed takes the alert id through the wheel stage as a hand-off whose send
// failed does: claimed, its failure recorded in failed_sends (pending, due now), then
// released as recorded. It returns the row's id.
func (s *simJob) recordFailed(t *testing.T, id string) int64 {
	t.Helper()
	ctx := context.Background()
	due := time.UnixMilli(time.Now().Add(-time.Second).UnixMilli())
	_, err := s.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte(id)})
	require.NoError(t, err)
	c, err := s.ws.Claim(ctx, []string{id}, "hand-off-"+id)
	require.NoError(t, err)
	require.Len(t, c.Entries, 1)
	_, err = s.fs.Record(ctx, store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte(id), DueAt: &due,
		ErrorClass: "transient", LastError: "HTTP 503", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	_, err = s.ws.Release(ctx, store.Recorded, c.Entries[0].Claim())
	require.NoError(t, err)
	return rowID(t, s.fs, id)
}

// received counts the messages the simulator accepted whose text is body.
func (s *simJob) received(body string) int {
	n := 0
	for _, m := range s.sim.Accepted() {
		if strings.Contains(string(m.Body), body) {
			n++
		}
	}
	return n
}

// cancel cancels the alert id as every way in does.
func (s *simJob) cancel(ctx context.Context, id string) (store.CancelResult, error) {
	return failed.Canceller{Stage: s.ws, Rows: s.fs, Note: cancelNote}.Cancel(ctx, id)
}

// requireCancelled checks that row id is cancelled, noting who and why, and held by no
// claim.
func (s *simJob) requireCancelled(t *testing.T, id int64) {
	t.Helper()
	row, err := s.fs.Get(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, store.StatusCancelled, row.Status)
	require.Equal(t, cancelNote.By, *row.CancelledBy)
	require.Equal(t, cancelNote.Reason, *row.CancelReason)
	require.Nil(t, row.NextAttemptAt)
	require.Nil(t, row.ClaimedBy)
}

// A cancel of an alert whose send failed and whose only live copy is a pending
// failed_sends row cancels that row: the answer is "cancelled", the row notes who and
// why, and the retry job, run afterwards, sends nothing; a repeated cancel answers the
// same.
func TestCancelOfAPendingFailedSend(t *testing.T) {
	t.Parallel()
	s := newSimJob(t)
	ctx := context.Background()
	id := s.recordFailed(t, "pending-cancel")

	res, err := s.cancel(ctx, "pending-cancel")
	require.NoError(t, err)
	require.Equal(t, store.CancelRowCancelled, res, "answered %s: %s", res, res.Explain())
	require.True(t, res.Cancelled())
	require.Equal(t, "cancelled", res.String())
	s.requireCancelled(t, id)

	r, err := s.job.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, r, "the retry job took a cancelled row")
	require.Zero(t, s.received("pending-cancel"), "DingTalk received a cancelled alert")

	res, err = s.cancel(ctx, "pending-cancel")
	require.NoError(t, err)
	require.Equal(t, store.CancelRowCancelled, res, "a repeat answers the same")
}

// The same for a dead row, which only an operator's retry could still send: cancelled,
// it stays so through that retry, and nothing is sent.
func TestCancelOfADeadFailedSend(t *testing.T) {
	t.Parallel()
	s := newSimJob(t)
	ctx := context.Background()
	id := s.recordFailed(t, "dead-cancel")
	testenv.MakeDead(t, s.pool, id, 20, "transient", "HTTP 503")

	res, err := s.cancel(ctx, "dead-cancel")
	require.NoError(t, err)
	require.Equal(t, store.CancelRowCancelled, res, "answered %s: %s", res, res.Explain())
	s.requireCancelled(t, id)

	retried, err := s.fs.Retry(ctx, []int64{id})
	require.NoError(t, err)
	require.Empty(t, retried, "an operator's retry brought a cancelled row back")
	retried, err = s.fs.RetryWhere(ctx, store.StatusDead, "")
	require.NoError(t, err)
	require.Empty(t, retried)
	r, err := s.job.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, r)
	require.Zero(t, s.received("dead-cancel"), "DingTalk received a cancelled alert")
}

// A cancel racing the retry job's claim and confirm of the same row ends one way or the
// other, and its answer says which: "cancelled" and DingTalk never receives the alert,
// or "too late" / "already delivered" and DingTalk received it once ("already
// delivered" only once it had). A quarter of the rounds cancel right before the
// confirm (cancelled: the confirm fails), a quarter right after it (too late: its request
// may be in flight); the others run the two at once, the cancel a little later each
// round, while DingTalk answers in 10ms.
func TestCancelRacingTheRetryJob(t *testing.T) {
	t.Parallel()
	s := newSimJob(t)
	ctx := context.Background()
	require.NoError(t, s.sim.Inject("cancel-token", chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 10 * time.Millisecond}))
	outcomes := map[string]int{}
	for i := range 40 {
		id := fmt.Sprintf("race-%02d", i)
		s.recordFailed(t, id)
		var res store.CancelResult
		var cerr error
		var seenAtAnswer int
		cancel := func() {
			res, cerr = s.cancel(ctx, id)
			seenAtAnswer = s.received(id)
		}
		var want store.CancelResult
		switch i % 4 {
		case 0:
			s.hook.set(cancel, nil)
			want = store.CancelRowCancelled
		case 1:
			s.hook.set(nil, cancel)
			want = store.CancelTooLate
		default:
			s.hook.set(nil, nil)
		}
		var wg sync.WaitGroup
		var jerr error
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			_, jerr = s.job.RunOnce(ctx)
		})
		if want == 0 {
			wg.Go(func() {
				<-start
				time.Sleep(time.Duration(i/4%6) * 3 * time.Millisecond) // vary which one comes first
				cancel()
			})
		}
		close(start)
		wg.Wait()
		require.NoError(t, jerr)
		require.NoError(t, cerr)
		if want != 0 {
			require.Equal(t, want, res, "%s", id)
		}
		got := s.received(id)
		require.LessOrEqual(t, got, 1, "%s sent twice", id)
		switch {
		case res.Cancelled():
			require.Zero(t, got, "%s: answered %s, yet DingTalk received it", id, res)
			s.requireCancelled(t, rowID(t, s.fs, id))
		case res == store.CancelAlreadyDelivered:
			require.Equal(t, 1, seenAtAnswer, "%s: answered %s before DingTalk received it", id, res)
		case res == store.CancelTooLate:
			require.Equal(t, 1, got, "%s: answered %s, yet it was never sent", id, res)
		default:
			t.Fatalf("%s: unexpected answer %s: %s", id, res, res.Explain())
		}
		outcomes[res.String()]++
	}
	t.Logf("outcomes: %v", outcomes)
}

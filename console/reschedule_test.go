package console_test

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// An alert waiting in the wheel stage can be rescheduled from its page: the form moves
// it, the page says to when; a bad time is refused, and one the wheel stage cannot reach
// is refused with the reason.
func TestConsoleReschedulesAnAlert(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	_, err := s.ws.Put(ctx, store.Entry{ID: "order-10-recheck", Target: "ops", DueAt: time.Now().Add(30 * time.Second), Body: []byte("x")})
	require.NoError(t, err)

	resp, body := s.get("/ui/alerts?id=order-10-recheck")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `action="/ui/alerts/order-10-recheck/reschedule"`)
	csrf := s.csrf(body)

	at := time.Now().Add(45 * time.Second).Truncate(time.Second)
	resp, _ = s.post("/ui/alerts/order-10-recheck/reschedule", url.Values{"csrf": {csrf}, "when": {at.Format(time.RFC3339)}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(resp.Header.Get("Location"))
	require.Contains(t, body, "Rescheduled to "+at.Format(time.RFC3339)+": moved in the wheel stage.")
	st, err := s.ws.Inspect(ctx, "order-10-recheck")
	require.NoError(t, err)
	require.Equal(t, at, st.NextDue)

	resp, _ = s.post("/ui/alerts/order-10-recheck/reschedule", url.Values{"csrf": {csrf}, "when": {"2h"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(resp.Header.Get("Location"))
	// This rescheduler has no RocketMQ producer (serve's has): it cannot send the alert
	// back to the broker, and says so; the alert keeps waiting.
	require.Contains(t, body, "Not rescheduled: not moved: it waits in the wheel stage and the new due time is beyond "+
		"scheduler.threshold from now, so it must go back to RocketMQ, which this process could not do.")
	st, err = s.ws.Inspect(ctx, "order-10-recheck")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Stage)
	require.Equal(t, at, st.NextDue)

	resp, body = s.post("/ui/alerts/order-10-recheck/reschedule", url.Values{"csrf": {csrf}, "when": {"soon"}}, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "Give the new due time")
	resp, _ = s.post("/ui/alerts/order-10-recheck/reschedule", url.Values{"when": {"1m"}}, s.srv.URL)
	require.NotEqual(t, http.StatusSeeOther, resp.StatusCode, "no form without the session's token")
}

package ingress

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// TestRescheduleAPI moves alerts in every stage through POST …/{id}/reschedule and
// checks the status of every answer: 200 with the new due time, 404, 409, 400.
func TestRescheduleAPI(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	put := func(id string, due time.Time) {
		_, err := s.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
	}
	put("in-flight", time.Now().Add(-time.Second))
	got, err := s.ws.Claim(ctx, []string{"in-flight"}, "claimer")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	for _, id := range []string{"waiting", "team/a/waiting", "far", "cancelled"} {
		put(id, time.Now().Add(30*time.Second))
	}
	_, err = s.ws.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	require.NoError(t, s.ws.TraceHop(ctx, store.HopNote{ID: "hopping", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1, Delay: 10 * time.Minute}))
	require.NoError(t, s.ws.MarkDelivered(ctx, "sent"))
	_, err = s.fs.Record(ctx, store.NewFailedSend{MessageID: "failed", Target: "ops", Payload: []byte("x"),
		ErrorClass: "transient", NextAttemptAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)

	at := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	for _, c := range []struct {
		id     string
		body   any
		code   int
		result string
		due    time.Time
	}{
		{"waiting", map[string]string{"at": at.Format(time.RFC3339Nano)}, http.StatusOK, "moved", at},
		{"team/a/waiting", map[string]string{"in": "10s"}, http.StatusOK, "moved", s.clock.Now().Add(10 * time.Second)},
		{"hopping", map[string]string{"in": "2h"}, http.StatusOK, "hop_moved", s.clock.Now().Add(2 * time.Hour)},
		{"hopping", map[string]string{"in": "1m"}, http.StatusConflict, "in_hop", time.Time{}},
		{"failed", map[string]string{"in": "1h"}, http.StatusOK, "row_moved", s.clock.Now().Add(time.Hour)},
		{"far", map[string]string{"in": "1h"}, http.StatusOK, "requeued", s.clock.Now().Add(time.Hour)},
		{"in-flight", map[string]string{"in": "1m"}, http.StatusConflict, "too_late", time.Time{}},
		{"sent", map[string]string{"in": "1m"}, http.StatusConflict, "already_delivered", time.Time{}},
		{"cancelled", map[string]string{"in": "1m"}, http.StatusConflict, "cancelled", time.Time{}},
		{"never", map[string]string{"in": "1m"}, http.StatusNotFound, "unknown", time.Time{}},
	} {
		code, out := s.do("POST", AlertsPath+"/"+url.PathEscape(c.id)+"/reschedule", c.body)
		require.Equal(t, c.code, code, "%s: %v", c.id, out)
		require.Equal(t, c.result, out["result"], c.id)
		require.NotEmpty(t, out["detail"], c.id)
		if c.due.IsZero() {
			require.NotContains(t, out, "due", c.id)
			continue
		}
		due, err := time.Parse(time.RFC3339Nano, out["due"].(string))
		require.NoError(t, err, c.id)
		require.WithinDuration(t, c.due, due, time.Millisecond, c.id)
	}
	_, out := s.do("POST", AlertsPath+"/hopping/reschedule", map[string]string{"in": "1m"})
	require.NotEmpty(t, out["earliest"], "in_hop names the earliest time")
	// Beyond the wheel stage's reach: a copy of generation 1 went to the broker, with the
	// new due time, and the entry that waited is gone.
	props, body := s.published("far")
	require.Equal(t, "1", props["RD_GEN"])
	require.Equal(t, strconv.FormatInt(s.clock.Now().Add(time.Hour).UnixMilli(), 10), props["RD_DELIVER_AT_MS"])
	require.Equal(t, "ops", props["RD_TARGET"])
	require.Equal(t, "x", string(body))
	st, err := s.ws.Inspect(ctx, "far")
	require.NoError(t, err)
	require.Equal(t, "hopping", st.Stage)

	// Bad input: 400, with what is wrong.
	for name, body := range map[string]any{
		"both":        map[string]string{"at": at.Format(time.RFC3339), "in": "1m"},
		"neither":     map[string]string{},
		"bad at":      map[string]string{"at": "tomorrow"},
		"bad in":      map[string]string{"in": "soon"},
		"negative in": map[string]string{"in": "-5s"},
		"unknown key": map[string]string{"when": "1m"},
		"too far":     map[string]string{"in": "9000h"},
	} {
		code, out := s.do("POST", AlertsPath+"/waiting/reschedule", body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", name, out)
		require.NotEmpty(t, out["error"], name)
	}
}

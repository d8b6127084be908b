package ingress

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/escalation"
)

// The escalation API: a producer starts an episode, starts it again (an update), sees it
// listed with its next step, and acknowledges it once a step was sent: the next step is
// cancelled and "acknowledged by" is published; a resolve then ends it with the
// producer's resolution. Bad input is a 4xx naming what is wrong; an unknown episode 404.
func TestEscalationAPI(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	key := "pay-" + randomHex(4)

	code, out := s.do("POST", EscalationsPath, map[string]any{"key": key, "policy": "db", "title": "Payments down", "text": "checkout fails"})
	require.Equal(t, http.StatusCreated, code, out)
	require.Equal(t, "started", out["result"])
	seq := int64(out["seq"].(float64))
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": key, "policy": "db", "title": "Payments down", "text": "checkout fails at 40%"})
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "updated", out["result"])

	for name, c := range map[string]struct {
		body   map[string]any
		reason string
	}{
		"key with a slash": {map[string]any{"key": "a/b", "policy": "db", "text": "x"}, "bad_key"},
		"unknown policy":   {map[string]any{"key": "k", "policy": "nope", "text": "x"}, "unknown_policy"},
		"no text":          {map[string]any{"key": "k", "policy": "db"}, "bad_request"},
		"unknown field":    {map[string]any{"key": "k", "policy": "db", "text": "x", "colour": "blue"}, "bad_json"},
	} {
		code, out := s.do("POST", EscalationsPath, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", name, out)
		require.Equal(t, c.reason, out["reason"], name)
	}

	code, out = s.do("GET", EscalationsPath, nil)
	require.Equal(t, http.StatusOK, code, out)
	var listed map[string]any
	for _, e := range out["episodes"].([]any) {
		if e.(map[string]any)["key"] == key {
			listed = e.(map[string]any)
		}
	}
	require.NotNil(t, listed, "the episode is listed")
	require.Equal(t, "pending", listed["state"])
	require.Equal(t, 1.0, listed["next"])
	require.Equal(t, "ops", listed["nextTarget"])
	require.Equal(t, "checkout fails at 40%", listed["content"].(map[string]any)["text"])

	send, body := s.stepDue(escalation.StepID(key, seq, 0))
	require.True(t, send)
	require.Contains(t, string(body), "checkout fails at 40%", "a step says the latest content")
	s.published(escalation.StepID(key, seq, 1)) // the next step is published when one is granted

	for _, by := range []string{"", "[ana](http://evil.example)", "ana\n@all", "<at id=all></at>"} {
		code, out = s.do("POST", EscalationsPath+"/"+key+"/ack", map[string]any{"by": by})
		require.Equal(t, http.StatusBadRequest, code, "%q: %v", by, out)
	}
	code, out = s.do("POST", EscalationsPath+"/"+key+"/ack", map[string]any{"by": "ana"})
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "acknowledged", out["result"])
	cancelled, err := s.ws.IsCancelled(ctx, escalation.StepID(key, seq, 1))
	require.NoError(t, err)
	require.True(t, cancelled, "acknowledging cancels the next step")
	send, _ = s.stepDue(escalation.StepID(key, seq, 1))
	require.False(t, send, "a step of an acknowledged episode is withheld")
	_, body = s.published(escalation.AckID(key, seq))
	require.Contains(t, string(body), "Acknowledged by ana")
	code, out = s.do("POST", EscalationsPath+"/"+key+"/ack", map[string]any{"by": "bo"})
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "already", out["result"])
	require.Equal(t, "ana", out["by"])

	code, out = s.do("POST", EscalationsPath+"/"+key+"/resolve", map[string]any{"title": "Payments back", "text": "all good"})
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "resolved", out["result"])
	_, body = s.published(escalation.ResolutionID(key, seq))
	require.Contains(t, string(body), "all good")
	code, out = s.do("GET", EscalationsPath+"/"+key, nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "resolved", out["state"])
	require.Equal(t, "ana", out["ackedBy"])

	code, out = s.do("POST", EscalationsPath+"/nobody-here/resolve", nil)
	require.Equal(t, http.StatusNotFound, code, out)
	require.Equal(t, "no_episode", out["reason"])
	code, out = s.do("GET", EscalationsPath+"/nobody-here", nil)
	require.Equal(t, http.StatusNotFound, code, out)
}

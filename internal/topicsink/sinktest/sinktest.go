// Package sinktest wraps topicsink for tests: a consumer of a business topic that stops
// when the test ends, and fails the test instead of returning errors.
package sinktest

import (
	"context"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/topicsink"
)

// Sink is a consumer of a business topic as an application runs one
// (topicsink.Sink), stopped when the test ends.
type Sink struct{ c *topicsink.Sink }

// Start creates topic on the local broker and consumes it from its first offset
// until the test ends.
func Start(t testing.TB, ns, topic string) *Sink {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := topicsink.Start(ctx, ns, topic)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return &Sink{c: c}
}

// CreateTopic creates topic on the local broker (a first send), so that consumers find
// its route.
func CreateTopic(t testing.TB, ns, topic string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, topicsink.CreateTopic(ctx, ns, topic))
}

// WaitAll waits until every id was received at least once, or fails the test after
// timeout.
func (tc *Sink) WaitAll(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if missing := tc.c.Wait(ctx, ids); len(missing) > 0 {
		t.Fatalf("%d of %d messages never reached the business consumer within %s (first: %s)", len(missing), len(ids), timeout, missing[0])
	}
}

// Copies counts the distinct broker messages received for id.
func (tc *Sink) Copies(id string) int { return len(tc.c.Copies(id)) }

// First returns the first message received for id and when it was received; nil when
// none was.
func (tc *Sink) First(id string) (*primitive.MessageExt, time.Time) {
	c := tc.c.Copies(id)
	if len(c) == 0 {
		return nil, time.Time{}
	}
	return c[0].Msg, c[0].At
}

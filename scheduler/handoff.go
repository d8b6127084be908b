package scheduler

import (
	"context"
	"log/slog"
	"time"
)

// Handoff receives due alerts. Deliver returns nil once the alert is delivered (or
// durably recorded as failed); any error gives the alert back to the wheel stage for a
// later attempt. Deliver must honour ctx.
type Handoff interface {
	Deliver(ctx context.Context, a Alert) error
}

// LogSink is a Handoff that only logs each alert; `serve` uses it until a sender is
// configured.
type LogSink struct {
	Logger *slog.Logger
	Now    func() time.Time
}

// Deliver logs the alert.
func (s LogSink) Deliver(_ context.Context, a Alert) error {
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	s.Logger.Info("alert due", "rd_id", a.ID, "target", a.Target,
		"due", a.DeliverAt.UTC().Format(time.RFC3339Nano), "late", now().Sub(a.DeliverAt).String(),
		"hops", a.Hops, "bytes", len(a.Body))
	return nil
}

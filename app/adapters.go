package app

import (
	"context"
	"time"

	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
)

// rejectRecorder records the scheduler's rejected inputs in failed_sends.
type rejectRecorder struct{ fs *store.FailedSends }

func (r rejectRecorder) RecordRejected(ctx context.Context, a scheduler.Alert, props map[string]string, rej *scheduler.Rejection) error {
	var due *time.Time
	if !a.DeliverAt.IsZero() {
		due = &a.DeliverAt
	}
	id := a.ID
	if id == "" || len(id) > scheduler.MaxIDLength {
		// The id itself is what is wrong; keep the row findable by the broker's message key.
		id = "rejected:" + props["UNIQ_KEY"]
	}
	_, err := r.fs.Record(ctx, store.NewFailedSend{
		MessageID:  id,
		Target:     a.Target,
		Payload:    a.Body,
		Properties: props,
		DueAt:      due,
		Rejected:   true,
		ErrorClass: "rejected_" + string(rej.Reason),
		LastError:  rej.Detail,
	})
	return err
}

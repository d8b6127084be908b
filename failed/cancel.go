package failed

import (
	"context"

	"github.com/rocketdelay/rocketdelay/store"
)

// StageCanceller cancels an alert in the wheel stage; *store.WheelStage implements it.
type StageCanceller interface {
	Cancel(ctx context.Context, id string) (store.CancelResult, error)
}

// RowCanceller cancels the failed_sends rows of an alert; *store.FailedSends implements
// it.
type RowCanceller interface {
	Cancel(ctx context.Context, id string, note store.CancelNote) (store.RowsCancel, error)
}

// Canceller cancels an alert by its RD_ID wherever it is: still hopping through the
// broker or waiting in the wheel stage (the wheel stage's cancel), or, after its send
// failed, waiting in failed_sends for the retry job or an operator (its row is
// cancelled). Every way in cancels through it (the publish API, the Alertmanager
// receiver, the console, `rocketdelay cancel`), so each gives the same answer, and a
// true one: cancelled means it will not be sent, already delivered that it was, too
// late that it is being sent right now.
type Canceller struct {
	Stage StageCanceller
	Rows  RowCanceller
	// Note says who cancels through this Canceller, and why; a cancelled failed_sends row
	// keeps it. Set it per way in, or per request.
	Note store.CancelNote
}

// Cancel cancels the alert id. The wheel stage answers first: an alert in flight there
// is too late, one it delivered is delivered. Otherwise (it was removed from the wheel
// stage, is still hopping, or its hand-off recorded its failure) its failed_sends rows
// that could still be sent are cancelled too, unless the retry job is sending one, which
// is too late. The answer is the wheel stage's when it stopped the alert there (removed,
// tombstoned: the rows were an older episode's), and the rows' when the alert was in
// failed_sends. A stage and its rows are not one transaction: an error (wrapping
// store.ErrUnavailable when a store could not be reached) may come after the wheel
// stage's part was done; the cancel is then repeated, which is safe.
func (c Canceller) Cancel(ctx context.Context, id string) (store.CancelResult, error) {
	res, err := c.Stage.Cancel(ctx, id)
	if err != nil {
		return 0, err
	}
	switch res {
	case store.CancelTooLate, store.CancelAlreadyDelivered:
		return res, nil
	}
	rows, err := c.Rows.Cancel(ctx, id, c.Note)
	if err != nil {
		return 0, err
	}
	switch {
	case rows.Result == store.CancelTooLate:
		return rows.Result, nil // a row of it is being sent: whatever the stage held, it goes out
	case res == store.CancelRecorded && rows.Result != 0:
		return rows.Result, nil // its row was its live copy
	case res == store.CancelTombstoned && rows.Result == store.CancelRowCancelled:
		return rows.Result, nil // its row was its live copy (the done marker had expired)
	}
	return res, nil
}

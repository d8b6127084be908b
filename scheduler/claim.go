package scheduler

import (
	"context"
	"fmt"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// heldEntry is the wheel stage's claim on an entry this replica hands off, as the alert
// carries it to its channel (sender.Claim): the channel confirms it before every
// request, may park it while its target is busy, and delivery notes a final failure
// under it.
type heldEntry struct {
	p *handoffPool
	e store.Entry
}

// Confirm checks that the claim still holds the entry and notes the parts delivered.
func (h heldEntry) Confirm(ctx context.Context, partsSent int) error {
	return h.p.store.Confirm(ctx, h.e.Claim(), partsSent)
}

// MarkFailed notes under the claim that the entry's send failed for good.
func (h heldEntry) MarkFailed(ctx context.Context, failure []byte) error {
	return h.p.store.MarkFailed(ctx, h.e.Claim(), failure)
}

// Park ends the claim: the entry waits in its target's park until a replica adopts it
// or the park's lease (one lease) runs out. An entry that is only to be recorded, or
// resumed part by part, is never merged, so never parked.
func (h heldEntry) Park(ctx context.Context, share string) error {
	if h.e.Failure != nil || h.e.PartsSent > 0 {
		return sender.ErrNoPark
	}
	ids, err := h.p.store.Park(ctx, h.e.Target, h.p.store.Lease(), store.Parked{Claim: h.e.Claim(), DueAt: h.e.DueAt, Share: share})
	if err != nil {
		return err
	}
	if len(ids) == 0 {
		return fmt.Errorf("park %q: %w", h.e.ID, store.ErrNotHeld)
	}
	return nil
}

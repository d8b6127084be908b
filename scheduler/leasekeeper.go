package scheduler

import (
	"context"
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// The lease keeper keeps the claims of the entries this replica holds alive.

// heldClaims are the claims a replica holds: id → token of the claim, from the claim to
// the release or give-back.
type heldClaims struct {
	mu sync.Mutex
	m  map[string]string
}

func (h *heldClaims) add(entries []store.Entry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		h.m[e.ID] = e.Token
	}
}

func (h *heldClaims) addClaim(c store.Claim) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.m[c.ID] = c.Token
}

// has reports whether this replica still holds the claim on id: false once it was
// released, given back, or taken over by another replica (the lease keeper found out).
func (h *heldClaims) has(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.m[id]
	return ok
}

func (h *heldClaims) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.m, id)
}

func (h *heldClaims) list() []store.Claim {
	h.mu.Lock()
	defer h.mu.Unlock()
	claims := make([]store.Claim, 0, len(h.m))
	for id, token := range h.m {
		claims = append(claims, store.Claim{ID: id, Token: token})
	}
	return claims
}

// keepLeases extends the leases of every entry the pool holds, three times per lease,
// so that claimed alerts waiting in a backlog stay this replica's; after a round that
// could not reach Redis it tries again within half a second, so a blip does not eat into
// the lease. A claim the store no longer renews (another replica took it over after this
// one was cut off or paused past the lease) is forgotten: its hand-off, if it still runs,
// fails its confirm.
func (p *handoffPool) keepLeases(ctx context.Context) {
	defer close(p.keptDone)
	every := p.store.Lease() / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := every
		if !p.extendAll(ctx) {
			next = min(every, keeperRetry)
		}
		t.Reset(next)
	}
}

// keeperRetry is how soon the lease keeper tries again after a round that failed.
const keeperRetry = 500 * time.Millisecond

// extendAll renews every held claim, a thousand per round trip, and reports whether
// every round trip landed.
func (p *handoffPool) extendAll(ctx context.Context) bool {
	claims := p.held.list()
	ok := true
	for len(claims) > 0 {
		chunk := claims[:min(len(claims), 1000)]
		claims = claims[len(chunk):]
		lost, err := p.store.ExtendLease(ctx, chunk)
		if err != nil {
			if ctx.Err() == nil {
				p.logger.Warn("extending leases failed; trying again shortly", "count", len(chunk), "err", err)
			}
			ok = false
			continue
		}
		if len(lost) > 0 {
			p.metrics.claimsLost.Add(float64(len(lost)))
			p.logger.Warn("claims taken over by another replica (this one was paused or cut off past the lease)",
				"count", len(lost))
			for _, id := range lost {
				p.held.remove(id)
			}
		}
	}
	return ok
}

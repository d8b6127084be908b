package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

// The reference clock: every replica schedules by Redis TIME, the clock the wheel
// stage's scripts (claims, leases) and the robot pool already judge by, rather than by
// its own. A replica whose clock runs fast or slow (a node with broken NTP, a stepped
// clock) then fires its wheel at the right moment; the claim scripts, which say how long
// each entry they take has until it is due by Redis's clock (Entry.DueIn, waited for
// from their reply), are what make it impossible to send early, and the reference clock
// is what keeps such a replica from being late.

// DefaultClockSyncInterval is how often a RefClock measures its offset to Redis.
const DefaultClockSyncInterval = 10 * time.Second

// clockSamples is how many round trips one sync takes; the one with the shortest round
// trip gives the offset, its half round trip the uncertainty.
const clockSamples = 5

// TimeSource tells the reference time; *store.WheelStage implements it with Redis TIME.
type TimeSource interface {
	Time(ctx context.Context) (time.Time, error)
}

// RefClock is a timewheel.Clock that follows a TimeSource: Now is this replica's own
// clock (base) plus the offset last measured to the source. Timers are base's. It is
// safe for concurrent use; until the first Sync its offset is 0.
type RefClock struct {
	src      TimeSource
	base     timewheel.Clock
	logger   *slog.Logger
	metrics  *Metrics
	interval time.Duration

	offset atomic.Int64 // nanoseconds: source minus base
	warned atomic.Bool  // the offset is past clockOffsetWarn and was logged
}

// clockOffsetWarn is the offset past which a sync logs a warning: the replica is still
// on time (it schedules by the source), but its host's clock needs attention.
const clockOffsetWarn = time.Second

// NewRefClock returns a reference clock that follows src from base (nil: the system
// clock), measuring every interval (0: DefaultClockSyncInterval). metrics may not be nil.
func NewRefClock(src TimeSource, base timewheel.Clock, interval time.Duration, logger *slog.Logger, metrics *Metrics) *RefClock {
	if base == nil {
		base = timewheel.ShiftedClock(0)
	}
	if interval <= 0 {
		interval = DefaultClockSyncInterval
	}
	return &RefClock{src: src, base: base, logger: logger.With("component", "refclock"), metrics: metrics, interval: interval}
}

// Now returns the reference time as this replica knows it.
func (c *RefClock) Now() time.Time { return c.base.Now().Add(c.Offset()) }

// NewTimer returns a timer of the base clock: durations need no correction.
func (c *RefClock) NewTimer(d time.Duration) timewheel.Timer { return c.base.NewTimer(d) }

// Offset is the last measured offset: the source's time minus this replica's clock.
func (c *RefClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// Sync measures the offset now: a few round trips to the source, the shortest one
// counting (the source read its clock within it, so the offset is known to half its
// length). It returns an error, leaving the offset as it was, when no round trip
// succeeded.
func (c *RefClock) Sync(ctx context.Context) error {
	best := time.Duration(-1)
	var offset time.Duration
	var lastErr error
	for range clockSamples {
		sent := c.base.Now()
		ref, err := c.src.Time(ctx)
		back := c.base.Now()
		if err != nil {
			lastErr = err
			continue
		}
		rtt := back.Sub(sent)
		if best < 0 || rtt < best {
			best = rtt
			offset = ref.Sub(sent.Add(rtt / 2))
		}
	}
	if best < 0 {
		c.metrics.clockSyncs.WithLabelValues("error").Inc()
		return fmt.Errorf("scheduler: measure the clock offset to Redis: %w", lastErr)
	}
	c.offset.Store(int64(offset))
	c.metrics.clockSyncs.WithLabelValues("ok").Inc()
	c.metrics.clockOffset.Set(offset.Seconds())
	c.metrics.clockUncertainty.Set((best / 2).Seconds())
	switch far := offset.Abs() > clockOffsetWarn; {
	case far && !c.warned.Swap(true):
		c.logger.Warn("this replica's clock is off Redis's; rocketdelay schedules by Redis's clock, but fix the host's time sync",
			"offset", offset.String(), "uncertainty", (best / 2).String())
	case !far && c.warned.Swap(false):
		c.logger.Info("this replica's clock is close to Redis's again", "offset", offset.String())
	}
	return nil
}

// Run syncs every interval until ctx ends. A failed sync keeps the last offset.
func (c *RefClock) Run(ctx context.Context) {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := c.Sync(ctx); err != nil && ctx.Err() == nil {
			c.logger.Warn("clock sync failed; keeping the last offset", "offset", c.Offset().String(), "err", err)
		}
	}
}

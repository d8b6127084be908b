package scheduler

import (
	"context"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// A hop is noted in its alert's trace for operators (`rocketdelay inspect`), and lists
// the alert among the pending ones (store.WheelStage.Pending), off the consume path: the hop is durable once the broker took it, so it never waits for Redis.
// A note that finds the buffer full (Redis slow or down, or notes coming faster than it
// takes them) is dropped and counted (rocketdelay_hop_traces_dropped_total); inspect then
// shows an older hop.
const (
	// traceBuffer is how many notes wait for a writer.
	traceBuffer = 4096
	// traceWriters write notes concurrently.
	traceWriters = 2
	// traceTimeout bounds one note's write.
	traceTimeout = time.Second
)

// noteHop hands a hop's note to the writers, or drops it when they are behind.
func (s *Scheduler) noteHop(t store.HopNote) {
	select {
	case s.broker.traces <- t:
	default:
		s.metrics.tracesDropped.Inc()
	}
}

// traceLoop writes hop notes until ctx ends.
func (s *Scheduler) traceLoop(ctx context.Context) {
	defer s.life.loops.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case t := <-s.broker.traces:
			wctx, cancel := context.WithTimeout(ctx, traceTimeout)
			if err := s.store.TraceHop(wctx, t); err != nil {
				s.metrics.tracesDropped.Inc()
				s.logger.Debug("hop not traced", "rd_id", t.ID, "err", err)
			}
			cancel()
		}
	}
}

package app

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/store"
)

// layoutWatch carries a replica's wheel stage through a move from one shard count to
// another (online resharding, store/moving.go): every liveness period it says again
// which layout it acts in, moves phase 1 on to phase 2 once every live replica acks the
// move, and settles the move once the old count's records have ended.
type layoutWatch struct {
	rdb     redis.UniversalClient
	prefix  string
	replica string
	ws      *store.WheelStage
	// settleAfter is how long after phase 2 began the old count's records may live: the
	// horizon (an alert placed the old way is due by then) and its tombstone's life.
	settleAfter time.Duration
	logger      *slog.Logger
	phase       prometheus.Gauge
}

func newLayoutWatch(reg prometheus.Registerer, rdb redis.UniversalClient, prefix string, ws *store.WheelStage,
	settleAfter time.Duration, logger *slog.Logger) *layoutWatch {
	w := &layoutWatch{rdb: rdb, prefix: prefix, ws: ws, settleAfter: settleAfter, logger: logger,
		phase: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_shard_move_phase",
			Help: "The phase of the wheel stage's move to another shard count (redis.shards) this replica acts in: 0 settled, 1 scanning both counts, 2 placing new alerts by the new count.",
		})}
	w.phase.Set(float64(ws.Layout().Phase))
	reg.MustRegister(w.phase)
	return w
}

// run follows the move until it settles or ctx ends; a replica whose stage does not move
// has nothing to follow (a move another replica starts waits for it to start again).
func (w *layoutWatch) run(ctx context.Context, replica string, every time.Duration) {
	w.replica = replica
	t := time.NewTicker(every)
	defer t.Stop()
	for done := !w.ws.Layout().Moving(); !done; {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var err error
		if done, err = w.step(ctx); err != nil {
			w.logger.Warn("cannot follow the wheel stage's move to another shard count; trying again", "layout", w.ws.Layout().String(), "err", err)
		}
	}
}

// step is one look at the move; done once it settled.
func (w *layoutWatch) step(ctx context.Context) (done bool, err error) {
	l := w.ws.Layout()
	if err := store.AckLayout(ctx, w.rdb, w.prefix, w.replica, l); err != nil {
		return false, err
	}
	rec, err := store.AdvanceLayout(ctx, w.rdb, w.prefix, l)
	if err != nil || !rec.Moving() {
		return err == nil, err
	}
	if rec.Phase == 2 && l.Phase == 1 {
		w.ws.PlaceNew()
		w.phase.Set(2)
		w.logger.Info("every live replica scans both shard counts: new alerts are placed by the new count",
			"layout", rec.String())
		if err := store.AckLayout(ctx, w.rdb, w.prefix, w.replica, w.ws.Layout()); err != nil {
			return false, err
		}
	}
	if rec.Phase != 2 {
		return false, nil
	}
	settled, err := store.SettleLayout(ctx, w.rdb, w.prefix, rec, w.settleAfter, time.Now())
	if err != nil || settled.Moving() {
		return false, err
	}
	// This replica goes on in phase 2, which places every alert as the settled count
	// does; the replicas that start from now on act in the settled count alone.
	w.logger.Info("the wheel stage's move to another shard count is done", "shards", settled.Shards)
	return true, nil
}

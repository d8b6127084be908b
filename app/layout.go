package app

import (
	"context"
	"errors"
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
	// settleAfter is how long a record of an alert that is over may live: a done
	// marker's or a tombstone's life (store.SettleLayout).
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

// run says again every period which layout this replica acts in and follows the move,
// until ctx ends; it returns an error wrapping store.ErrShardsChanged when this replica
// may no longer run in its layout (it acts in a settled count the deployment moves away
// from: it was paused or cut off while phase 2 began), and the replica stops, to start
// again in the move.
func (w *layoutWatch) run(ctx context.Context, replica string, every time.Duration) error {
	w.replica = replica
	t := time.NewTicker(every)
	defer t.Stop()
	var lastSettle time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := w.step(ctx, time.Since(lastSettle) >= settleEvery)
		switch {
		case errors.Is(err, store.ErrShardsChanged):
			return err
		case errors.Is(err, errSettleTried):
			lastSettle = time.Now()
		case err != nil:
			w.logger.Warn("cannot say which shard layout this replica acts in; trying again", "layout", w.ws.Layout().String(), "err", err)
		}
	}
}

// settleEvery spaces the looks at whether a move can settle, which scan the old shards.
const settleEvery = 10 * time.Minute

// errSettleTried is step's answer when it looked whether the move can settle.
var errSettleTried = errors.New("looked whether the move settles")

// step is one look: the ack, and while the stage moves, the move's next phase, and,
// when settle is set, whether it settles.
func (w *layoutWatch) step(ctx context.Context, settle bool) error {
	l := w.ws.Layout()
	if err := store.AckLayout(ctx, w.rdb, w.prefix, w.replica, l); err != nil || !l.Moving() {
		return err
	}
	rec, err := store.AdvanceLayout(ctx, w.rdb, w.prefix, l)
	if err != nil || !rec.Moving() {
		return err
	}
	if rec.Phase == 2 && l.Phase == 1 {
		w.ws.PlaceNew()
		w.phase.Set(2)
		w.logger.Info("every live replica scans both shard counts: new alerts are placed by the new count",
			"layout", rec.String())
		if err := store.AckLayout(ctx, w.rdb, w.prefix, w.replica, w.ws.Layout()); err != nil {
			return err
		}
	}
	if rec.Phase != 2 || !settle {
		return nil
	}
	settled, err := store.SettleLayout(ctx, w.rdb, w.prefix, rec, w.settleAfter, time.Now())
	if err != nil {
		return err
	}
	if !settled.Moving() {
		// This replica goes on in phase 2, which places every alert as the settled count
		// does; the replicas that start from now on act in the settled count alone.
		w.logger.Info("the wheel stage's move to another shard count is done", "shards", settled.Shards)
	}
	return errSettleTried
}

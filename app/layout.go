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
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := w.step(ctx, every)
		if errors.Is(err, store.ErrShardsChanged) {
			return err
		}
		if err != nil {
			w.logger.Warn("cannot say which shard layout this replica acts in; trying again", "layout", w.ws.Layout().String(), "err", err)
		}
	}
}

// settleEvery spaces the deployment's looks at whether a move settles, which scan the
// old shards' indexes: one replica looks, once in this period.
const settleEvery = 10 * time.Minute

// step is one look: the ack and the fences a settled move left, and while the stage
// moves, the move's next phase and, now and then, whether it settles.
func (w *layoutWatch) step(ctx context.Context, every time.Duration) error {
	l := w.ws.Layout()
	if err := store.AckLayout(ctx, w.rdb, w.prefix, w.replica, l); err != nil {
		return err
	}
	if err := store.LiftFences(ctx, w.rdb, w.prefix); err != nil || !l.Moving() {
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
	// Every replica left phase 1 within a period of phase 2's start: from then on the
	// old count places no new alert, and a look that finds it clear holds.
	if rec.Phase != 2 || time.Since(rec.Since) < 2*every {
		return nil
	}
	if turn, err := store.SettleTurn(ctx, w.rdb, w.prefix, settleEvery); err != nil || !turn {
		return err
	}
	settled, err := store.SettleLayout(ctx, w.rdb, w.prefix, rec, w.settleAfter, time.Now())
	if err == nil && !settled.Moving() {
		// This replica goes on in phase 2, which places every alert as the settled count
		// does; the replicas that start from now on act in the settled count alone.
		w.logger.Info("the wheel stage's move to another shard count is done", "shards", settled.Shards)
	}
	return err
}

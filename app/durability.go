package app

import (
	"context"
	"errors"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// durabilityWatch says when the wheel stage's writes fall short of redis.durability
// replicas=N and when they meet it again (store.WheelStageOptions.OnDurability): one log
// line per change, the gauge rocketdelay_redis_durability_met, and /readyz's advisory
// check "redis durability". The replica stays ready: its API still takes alerts, which
// wait in RocketMQ (handed back, nothing lost) until enough Redis replicas take them.
type durabilityWatch struct {
	logger *slog.Logger
	gauge  prometheus.Gauge
	mu     sync.Mutex
	short  string // what is missing while the writes fall short; "" when they do not
}

func newDurabilityWatch(reg prometheus.Registerer, logger *slog.Logger) *durabilityWatch {
	d := &durabilityWatch{logger: logger, gauge: prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rocketdelay_redis_durability_met",
		Help: "1 while the wheel stage's writes are taken by as many Redis replicas as redis.durability replicas=N asks, 0 while they fall short (alerts wait in RocketMQ).",
	})}
	d.gauge.Set(1)
	reg.MustRegister(d.gauge)
	return d
}

// changed is the wheel stage's OnDurability.
func (d *durabilityWatch) changed(met bool, detail string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if met {
		d.short = ""
		d.gauge.Set(1)
		d.logger.Info("Redis writes meet redis.durability again; the alerts that waited in RocketMQ are stored", "detail", detail)
		return
	}
	d.short = detail
	d.gauge.Set(0)
	d.logger.Warn("Redis writes fall short of redis.durability: alerts wait in RocketMQ (handed back, nothing lost) "+
		"until enough replicas take them; run one Redis replica more than replicas=N to ride out a failover", "detail", detail)
}

// check is the advisory readiness check.
func (d *durabilityWatch) check(context.Context) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.short != "" {
		return errors.New(d.short)
	}
	return nil
}

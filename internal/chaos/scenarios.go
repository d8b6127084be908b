package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rocketdelay/rocketdelay/sender/dingtalksim"
)

// concurrently runs the publisher and a fault script, and returns the first error.
func concurrently(ctx context.Context, publish, faults func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, 2)
	go func() { errs <- publish(ctx) }()
	go func() { errs <- faults(ctx) }()
	var first error
	for range 2 {
		if err := <-errs; err != nil && first == nil {
			first = err
			cancel()
		}
	}
	return first
}

func (e *env) publishDefault(n int) func(ctx context.Context) error {
	o := e.r.opts
	return func(ctx context.Context) error { return e.publish(ctx, n, o.PublishOver, o.MaxDelay) }
}

func runBaseline(ctx context.Context, e *env) error {
	return e.publishDefault(e.r.opts.OtherAlerts)(ctx)
}

// kill-one: SIGKILL one replica (chosen at random) at random moments while alerts are
// published and due, restarting it each time after 1–3s.
func runKillOne(ctx context.Context, e *env) error {
	o := e.r.opts
	// The kills fall in the busy part of the run: from 3s after the start to the
	// publishing window plus most of the largest delay.
	span := o.PublishOver + o.MaxDelay*2/3
	var moments []time.Duration
	for range o.Kills {
		moments = append(moments, 3*time.Second+time.Duration(e.rng.Int64N(int64(span))))
	}
	slices.Sort(moments)
	start := time.Now()
	return concurrently(ctx, e.publishDefault(o.Alerts), func(ctx context.Context) error {
		for k, at := range moments {
			sleep(ctx, time.Until(start.Add(at)))
			if ctx.Err() != nil {
				return nil
			}
			i := e.rng.IntN(2)
			down := time.Second + time.Duration(e.rng.Int64N(int64(2*time.Second)))
			e.note("kill %d: SIGKILL replica %d at +%s, down %s", k+1, i, time.Since(start).Round(100*time.Millisecond), down.Round(100*time.Millisecond))
			if err := e.restartReplica(ctx, i, down); err != nil {
				return err
			}
		}
		return nil
	})
}

// kill-both: SIGKILL both replicas at once mid-run, restart both after Outage.
func runKillBoth(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/2)
		at := time.Now()
		a, b := e.replica(0), e.replica(1)
		done := make(chan struct{})
		go func() { a.kill(); close(done) }()
		b.kill()
		<-done
		e.addFault("sigkill both", at, at)
		e.note("SIGKILL both replicas at +%s, down %s", o.PublishOver/2, o.Outage)
		sleep(ctx, o.Outage)
		for i := range 2 {
			if _, err := e.startReplica(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
}

// stackRestart stops component mid-run, keeps it down for Outage and starts it again.
func (e *env) stackRestart(ctx context.Context, component string) error {
	o := e.r.opts
	sleep(ctx, o.PublishOver/2)
	at := time.Now()
	if err := e.r.stack.Down(ctx, component); err != nil {
		return err
	}
	sleep(ctx, o.Outage)
	if err := e.r.stack.Up(ctx, component); err != nil {
		return err
	}
	e.addFault(component+" restart", at, time.Now())
	e.note("%s stopped (deploy/local/down) for %s, started again (up took %s in all)", component, o.Outage, time.Since(at).Round(100*time.Millisecond))
	return nil
}

// redis: restart Redis (AOF, appendfsync everysec) mid-run.
func runRedis(ctx context.Context, e *env) error {
	return concurrently(ctx, e.publishDefault(e.r.opts.OtherAlerts), func(ctx context.Context) error {
		return e.stackRestart(ctx, "redis")
	})
}

// broker: restart the RocketMQ broker mid-run, keeping its store (see Stack.RestartBroker).
func runBroker(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/2)
		at := time.Now()
		if err := e.r.stack.RestartBroker(ctx, o.Outage); err != nil {
			return err
		}
		e.addFault("broker restart", at, time.Now())
		e.note("broker stopped (SIGTERM) for %s and restarted with its store (listening again after %s)", o.Outage, time.Since(at).Round(100*time.Millisecond))
		return nil
	})
}

// postgres: DingTalk answers 503 to everything, then Postgres is stopped, so failed
// sends cannot be recorded; after Outage both come back.
func runPostgres(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/3)
		at := time.Now()
		for _, rb := range e.robots {
			if err := e.sim.Inject(rb.Token, dingtalksim.Fault{Kind: dingtalksim.FaultStatus, Status: 503}); err != nil {
				return err
			}
		}
		e.note("DingTalk answers 503 on every robot from +%s", (o.PublishOver / 3).Round(100*time.Millisecond))
		sleep(ctx, 3*time.Second) // some sends fail and are recorded in failed_sends
		if err := e.r.stack.Down(ctx, "postgres"); err != nil {
			return err
		}
		e.note("postgres stopped (deploy/local/down postgres) while DingTalk fails, for %s", o.Outage)
		sleep(ctx, o.Outage)
		if err := e.r.stack.Up(ctx, "postgres"); err != nil {
			return err
		}
		e.sim.ClearFaults("")
		e.addFault("postgres down + DingTalk 503", at, time.Now())
		e.note("postgres started again and DingTalk healed at +%s", time.Since(at).Round(100*time.Millisecond))
		return nil
	})
}

// storm: DingTalk storms in phases over Storm: 5xx, 130101 with throttling, 10s answers,
// dropped connections, malformed answers, and -1 system busy.
func runStorm(ctx context.Context, e *env) error {
	o := e.r.opts
	type phase struct {
		name  string
		fault dingtalksim.Fault
		some  bool // only on half of the robots
	}
	phases := []phase{
		{"HTTP 503 on every robot", dingtalksim.Fault{Kind: dingtalksim.FaultStatus, Status: 503}, false},
		{"errcode 130101 then throttling on half the robots", dingtalksim.Fault{Kind: dingtalksim.FaultErrcode, Errcode: 130101, Count: 2}, true},
		{"10s answers on every robot", dingtalksim.Fault{Kind: dingtalksim.FaultSlow, Delay: 10 * time.Second, Count: 3}, false},
		{"dropped connections on every robot", dingtalksim.Fault{Kind: dingtalksim.FaultDrop, Count: 5}, false},
		{"throttled (302) on half the robots", dingtalksim.Fault{Kind: dingtalksim.FaultThrottle}, true},
		{"HTTP 429 with Retry-After 1s and errcode -1", dingtalksim.Fault{Kind: dingtalksim.FaultStatus, Status: 429, RetryAfter: time.Second, Count: 3}, false},
		{"malformed answers on every robot", dingtalksim.Fault{Kind: dingtalksim.FaultMalformed, Count: 2}, false},
	}
	each := o.Storm / time.Duration(len(phases))
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, 2*time.Second)
		stormStart := time.Now()
		for _, p := range phases {
			if ctx.Err() != nil {
				return nil
			}
			for i, rb := range e.robots {
				if p.some && i%2 == 1 {
					continue
				}
				if err := e.sim.Inject(rb.Token, p.fault); err != nil {
					return err
				}
				if p.fault.Kind == dingtalksim.FaultStatus && p.fault.Status == 429 {
					_ = e.sim.Inject(rb.Token, dingtalksim.Fault{Kind: dingtalksim.FaultErrcode, Errcode: -1, Count: 2})
				}
			}
			sleep(ctx, each)
			e.sim.ClearFaults("")
		}
		e.addFault("DingTalk storm", stormStart, time.Now())
		e.note("%d storm phases of %s each: 503, 130101+throttle, 10s answers, drops, 302 throttle, 429/-1, malformed", len(phases), each.Round(100*time.Millisecond))
		return nil
	})
}

// malformed: the corpus of malformed inputs mixed into a normal run.
func runMalformed(ctx context.Context, e *env) error {
	o := e.r.opts
	corpus := Corpus(e.idPrefix)
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		// Spread the bad inputs over the publishing window.
		gap := o.PublishOver / time.Duration(len(corpus)+1)
		for _, c := range corpus {
			if !sleep(ctx, gap) {
				return nil
			}
			if err := e.raw.send(ctx, c); err != nil {
				if c.BrokerMayRefuse {
					e.note("the broker refused case %s: %v", c.Name, err)
					continue
				}
				return fmt.Errorf("chaos: publish malformed case %s: %w", c.Name, err)
			}
			e.mu.Lock()
			e.cases = append(e.cases, c)
			e.mu.Unlock()
		}
		e.mu.Lock()
		n := len(e.cases)
		e.mu.Unlock()
		e.note("%d of %d malformed inputs published among %d good ones", n, len(corpus), o.OtherAlerts)
		return nil
	})
}

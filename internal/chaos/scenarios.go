package chaos

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// concurrently runs the publishers and fault scripts fns at once, and returns the first
// error (which cancels the others).
func concurrently(ctx context.Context, fns ...func(ctx context.Context) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(fns))
	for _, fn := range fns {
		go func() { errs <- fn(ctx) }()
	}
	var first error
	for range fns {
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
// published and due, 1.5s into a moment of slow robots (so that it holds alerts),
// restarting it each time after 1–3s. The kills' alerts (those the killed replica held,
// or due within a liveness period of a kill) are delivered within 5s at p99. Kills are
// at least killGap apart: one kill's alerts are recovered before the next kill's slow
// robots begin, so no alert is held by a replica killed while it was recovering another
// kill's alerts (that alert waits out two liveness periods, past the bound; kill-both
// stages two replicas down at once).
func runKillOne(ctx context.Context, e *env) error {
	o := e.r.opts
	// What a killed replica held moves by its liveness (3s), not by the lease.
	e.killedBound = 5 * time.Second
	// The kills fall in the busy part of the run: from 3s after the start to the
	// publishing window plus most of the largest delay.
	span := o.PublishOver + o.MaxDelay*2/3
	var moments []time.Duration
	for range o.Kills {
		moments = append(moments, 3*time.Second+time.Duration(e.faultRNG.Int64N(int64(span))))
	}
	slices.Sort(moments)
	for k := 1; k < len(moments); k++ {
		moments[k] = max(moments[k], moments[k-1]+killGap)
	}
	start := time.Now()
	return concurrently(ctx, e.publishDefault(o.Alerts), func(ctx context.Context) error {
		for k, at := range moments {
			sleep(ctx, time.Until(start.Add(at)))
			if ctx.Err() != nil {
				return nil
			}
			i := e.faultRNG.IntN(2)
			down := time.Second + time.Duration(e.faultRNG.Int64N(int64(2*time.Second)))
			// The robots answer slowly for a moment first, so that the replicas hold alerts
			// (claims waiting for a robot or in a request, parks) when one is killed.
			if err := e.slowRobots(time.Second); err != nil {
				return err
			}
			sleep(ctx, 1500*time.Millisecond)
			e.note("kill %d: SIGKILL replica %d at +%s, 1.5s into 1s answers, down %s", k+1, i,
				time.Since(start).Round(100*time.Millisecond), down.Round(100*time.Millisecond))
			e.killReplicas(i)
			e.sim.ClearFaults("")
			sleep(ctx, down)
			if _, err := e.startReplica(ctx, i); err != nil {
				return err
			}
		}
		return nil
	})
}

// killGap is the least time between two kill-one moments: the 5s bound of the first
// kill's alerts, 1.5s of the second's slow robots before it, and 1.5s to spare (the
// killed replica is back by then: down at most 3s).
const killGap = 8 * time.Second

// slowRobots has every robot of the scenario answer after d, until ClearFaults.
func (e *env) slowRobots(d time.Duration) error {
	for _, rb := range e.robots {
		if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultSlow, Delay: d}); err != nil {
			return err
		}
	}
	return nil
}

// kill-both: SIGKILL both replicas at once mid-run, restart both after Outage.
func runKillBoth(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/2)
		e.killReplicas(0, 1)
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

// redis-kill: SIGKILL Redis (AOF, appendfsync everysec) mid-run — no clean shutdown —
// and start it again after Outage from what its AOF holds.
func runRedisKill(ctx context.Context, e *env) error {
	return e.killRedis(ctx, e.r.opts.PublishOver/2, e.r.opts.Outage)
}

// redis-outage: SIGKILL Redis and keep it down for LongOutage, longer than RocketMQ's
// whole default reconsume schedule: the messages handed back meanwhile must come back
// until Redis does, and none may reach the dead-letter queue.
func runRedisOutage(ctx context.Context, e *env) error {
	return e.killRedis(ctx, e.r.opts.PublishOver/3, e.r.opts.LongOutage)
}

// killRedis publishes the scenario's alerts and, after `after`, SIGKILLs Redis and starts
// it again from its AOF `down` later (whatever else failed meanwhile).
func (e *env) killRedis(ctx context.Context, after, down time.Duration) error {
	return concurrently(ctx, e.publishDefault(e.r.opts.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, after)
		at := time.Now()
		if err := e.r.stack.KillRedis(ctx); err != nil {
			return err
		}
		sleep(ctx, down)
		err := e.r.stack.Up(context.WithoutCancel(ctx), "redis")
		// Its last acknowledged writes may be lost (appendfsync everysec), releases among
		// them, and a release that could not land meanwhile may come after a lease.
		e.addFault(fault{what: "redis sigkill", start: at, end: time.Now(), lost: redisLostWrites})
		if err != nil {
			return err
		}
		e.note("redis SIGKILLed at +%s, down for %s, started again from its AOF %s after the kill",
			after.Round(100*time.Millisecond), down, time.Since(at).Round(100*time.Millisecond))
		return nil
	})
}

// postgres-outage: DingTalk answers 503 to everything and Postgres goes down for
// LongOutage, while malformed inputs keep arriving: neither the failures nor the rejects
// can be recorded, for longer than RocketMQ's default reconsume schedule. Then both come
// back; every alert is delivered, every reject recorded, the dead-letter queue empty.
func runPostgresOutage(ctx context.Context, e *env) error {
	o := e.r.opts
	corpus := Corpus(e.idPrefix)
	corpus = corpus[:min(len(corpus), 12)]
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/3)
		at := time.Now()
		for _, rb := range e.robots {
			if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}); err != nil {
				return err
			}
		}
		if err := e.r.stack.Down(ctx, "postgres"); err != nil {
			return err
		}
		e.note("DingTalk answers 503 and postgres is down from +%s, for %s; %d malformed inputs arrive meanwhile",
			(o.PublishOver / 3).Round(100*time.Millisecond), o.LongOutage, len(corpus))
		perr := e.publishMalformed(ctx, corpus, o.PublishOver/2)
		sleep(ctx, time.Until(at.Add(o.LongOutage)))
		if err := e.r.stack.Up(context.WithoutCancel(ctx), "postgres"); err != nil { // restored whatever else failed
			return errors.Join(perr, err)
		}
		if perr != nil {
			e.sim.ClearFaults("")
			return perr
		}
		e.sim.ClearFaults("")
		return nil
	})
}

// zombie: a cluster of alerts falls due while the robots are throttled, so that both
// replicas hold claimed alerts waiting for a robot; then one replica is SIGSTOPped for
// three leases and SIGCONTed. The other replica's sweeper takes the frozen one's claims
// over and delivers them; the frozen one, when it wakes, must find its claims gone and
// send none of them.
func runZombie(ctx context.Context, e *env) error {
	o := e.r.opts
	const lease = 3 * time.Second // the chaos config's scheduler.lease
	cluster := max(o.OtherAlerts/3, 20)
	due := time.Now().Add(o.PublishOver/2 + 8*time.Second).Truncate(time.Millisecond)
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		for i := range cluster {
			id := fmt.Sprintf("%s-%05d", e.idPrefix, 90000+i)
			body := fmt.Sprintf("chaos %s", id)
			if err := e.publishOne(ctx, wire.Publication{Target: e.target, At: due, ID: id, Body: []byte(body)}); err != nil {
				return err
			}
		}
		sleep(ctx, time.Until(due.Add(-time.Second)))
		for _, rb := range e.robots {
			if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultThrottle}); err != nil {
				return err
			}
		}
		sleep(ctx, time.Until(due.Add(time.Second))) // the cluster is claimed and waits for a robot
		z := e.replica(0)
		at := time.Now()
		z.pause()
		sleep(ctx, time.Second)
		e.sim.ClearFaults("")
		sleep(ctx, 3*lease)
		// Requests already on the wire when it froze may have been accepted without their
		// release: the only ambiguous moment. Anything it sends after it wakes is a duplicate.
		e.addFault(fault{what: "zombie frozen", instance: z.name, start: at, end: time.Now()})
		z.resume()
		e.note("%d alerts due at once while the robots were throttled; replica 0 SIGSTOPped 1s after they were due, for %s (3 leases), then SIGCONTed",
			cluster, (time.Second + 3*lease).Round(100*time.Millisecond))
		return nil
	})
}

// fast-clock: one replica's clock runs 5s fast, the other's 5s slow (serve
// --clock-offset; Debian's faketime cannot reach a Go binary, which reads the clock
// through the vDSO, nor Debian's Redis, whose jemalloc it deadlocks). Each measures its
// offset to Redis's clock and schedules by it, and no claim takes an entry before it is
// due by Redis's clock: early and lateness are measured by the simulator's clock, which
// is the true time here, not by the replicas'.
func runFastClock(ctx context.Context, e *env) error {
	o := e.r.opts
	e.clockOffsets = []time.Duration{5 * time.Second, -5 * time.Second}
	for i := range 2 {
		e.replica(i).stop()
		if _, err := e.startReplica(ctx, i); err != nil {
			return err
		}
	}
	e.note("replica 0 restarted with its clock at %+v, replica 1 at %+v; early and lateness measured by the simulator's clock",
		e.clockOffsets[0], e.clockOffsets[1])
	return e.publishDefault(o.OtherAlerts)(ctx)
}

// rolling: a rolling update under a steady load: a third into the publishing, each
// replica in turn gets SIGTERM (what Kubernetes sends), stops gracefully (it leaves the
// consumer group and hands back everything it holds), and is started again, ready before
// the next one stops. Nothing may be lost or duplicated (no fault excuses a copy), and
// the p99 lateness stays within 1s.
func runRolling(ctx context.Context, e *env) error {
	o := e.r.opts
	e.latenessBound = time.Second
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		start := time.Now()
		sleep(ctx, o.PublishOver/3)
		for i := range 2 {
			if ctx.Err() != nil {
				return nil
			}
			rp := e.replica(i)
			e.scrape(rp) // its counters survive its stop
			at := time.Now()
			rp.stop()
			stopped := time.Since(at)
			if _, err := e.startReplica(ctx, i); err != nil {
				return err
			}
			e.note("replica %d: SIGTERM at +%s, stopped in %s, ready again %s after the SIGTERM", i,
				at.Sub(start).Round(100*time.Millisecond), stopped.Round(100*time.Millisecond), time.Since(at).Round(100*time.Millisecond))
		}
		return nil
	})
}

// redis-blips: the replicas reach Redis through a proxy that cuts every connection for
// 2-3s, with 4-6s between cuts, while alerts are published, due and sent. Redis loses nothing, and a
// replica that cannot release, give back or claim tries again until it can, so no
// duplicate is ambiguous, and the p99 lateness stays within the longest blip plus 2s.
func runRedisBlips(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		end := time.Now().Add(o.PublishOver + o.MaxDelay)
		var longest, total time.Duration
		n := 0
		for time.Now().Before(end) {
			if !sleep(ctx, 4*time.Second+time.Duration(e.faultRNG.Int64N(int64(2*time.Second)))) {
				break
			}
			d := 2*time.Second + time.Duration(e.faultRNG.Int64N(int64(time.Second)))
			if err := e.blip(ctx, d); err != nil {
				return err
			}
			n++
			longest, total = max(longest, d), total+d
		}
		e.latenessBound = longest + 2*time.Second
		e.note("%d Redis blips (every connection of the replicas cut) of 2-3s each, %s in all, the longest %s",
			n, total.Round(100*time.Millisecond), longest.Round(100*time.Millisecond))
		return nil
	})
}

// blip cuts the replicas off Redis for d (the proxy refuses and drops connections).
func (e *env) blip(ctx context.Context, d time.Duration) error {
	e.redisProxy.Down()
	sleep(ctx, d)
	return e.redisProxy.Up()
}

// retry-job-zombie: a cluster of alerts falls due while DingTalk answers 503, so every
// one of them is recorded in failed_sends; then DingTalk heals but answers slowly, so
// that both replicas' retry jobs hold claimed rows they are sending one by one; then
// replica 0 is SIGSTOPped for three claim leases and SIGCONTed. Replica 1's job takes
// the frozen one's rows over and sends them; the frozen one, when it wakes, finds its
// claims fenced off at its next confirm and sends none of them again.
func runRetryJobZombie(ctx context.Context, e *env) error {
	o := e.r.opts
	cluster := max(o.OtherAlerts/4, 30)
	due := time.Now().Add(6 * time.Second).Truncate(time.Millisecond)
	return concurrently(ctx, e.publishDefault(o.OtherAlerts/2), func(ctx context.Context) error {
		for i := range cluster {
			id := fmt.Sprintf("%s-%05d", e.idPrefix, 80000+i)
			if err := e.publishOne(ctx, wire.Publication{Target: e.target, At: due, ID: id, Body: []byte("chaos " + id)}); err != nil {
				return err
			}
		}
		sleep(ctx, time.Until(due.Add(-time.Second)))
		for _, rb := range e.robots {
			if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}); err != nil {
				return err
			}
		}
		recorded, err := e.waitPending(ctx, cluster, 60*time.Second)
		if err != nil {
			return err
		}
		e.sim.ClearFaults("")
		for _, rb := range e.robots {
			if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 700 * time.Millisecond}); err != nil {
				return err
			}
		}
		sleep(ctx, 2*time.Second) // both retry jobs claim rows and send them, slowly
		z := e.replica(0)
		at := time.Now()
		z.pause()
		frozen := 3*e.tuning.claimLease + time.Second
		sleep(ctx, frozen)
		// A request on the wire when it froze may be accepted without being settled: the
		// only ambiguous moment. Anything it sends after it wakes is a duplicate.
		e.addFault(fault{what: "retry-job zombie frozen", instance: z.name, start: at, end: time.Now()})
		z.resume()
		sleep(ctx, 3*time.Second)
		e.sim.ClearFaults("")
		e.note("%d alerts due at once while DingTalk answered 503 (%d rows pending in failed_sends); then 700ms answers, "+
			"and replica 0 SIGSTOPped 2s into the retries, for %s (3 claim leases), then SIGCONTed",
			cluster, recorded, frozen.Round(100*time.Millisecond))
		return nil
	})
}

// waitPending waits until failed_sends holds at least n pending rows, at most timeout,
// and returns how many it holds.
func (e *env) waitPending(ctx context.Context, n int, timeout time.Duration) (int, error) {
	pool, err := store.OpenPostgres(ctx, e.dsn)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	deadline := time.Now().Add(timeout)
	for {
		st, err := fs.Stats(ctx)
		if err == nil && st.ByStatus[store.StatusPending] >= int64(n) {
			return int(st.ByStatus[store.StatusPending]), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("chaos: %d pending rows in failed_sends after %s, want %d (err %v)", st.ByStatus[store.StatusPending], timeout, n, err)
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
}

// combined: for Options.CombinedFor, alerts are published steadily while a schedule
// drawn from the scenario's seed injects, one after the other with 4-12s between them:
// a SIGKILL of a replica (restarted after 1-3s), a SIGSTOP of a replica past its lease
// (2s past it), a Redis blip of 2-3s, a Postgres restart (down 3s), or a DingTalk storm
// of 5-10s (503, 130101 with throttling, slow answers, dropped connections) on some
// robots. The seed is printed; -scenarios combined -seed N runs the same schedule.
func runCombined(ctx context.Context, e *env) error {
	o := e.r.opts
	n := max(int(o.CombinedFor/(75*time.Millisecond)), 100) // about 13 alerts a second
	e.note("seed %d", e.r.opts.Seed)
	return concurrently(ctx, func(ctx context.Context) error { return e.publish(ctx, n, o.CombinedFor, o.MaxDelay) },
		func(ctx context.Context) error {
			start := time.Now()
			var did []string
			defer func() { e.note("schedule: %s", strings.Join(did, ", ")) }()
			for time.Since(start) < o.CombinedFor {
				if !sleep(ctx, 4*time.Second+time.Duration(e.faultRNG.Int64N(int64(8*time.Second)))) {
					return nil
				}
				at := time.Since(start).Round(100 * time.Millisecond)
				i := e.faultRNG.IntN(2)
				switch kind := e.faultRNG.IntN(5); kind {
				case 0:
					down := time.Second + time.Duration(e.faultRNG.Int64N(int64(2*time.Second)))
					did = append(did, fmt.Sprintf("+%s SIGKILL r%d (down %s)", at, i, down.Round(100*time.Millisecond)))
					if err := e.restartReplica(ctx, i, down); err != nil {
						return err
					}
				case 1:
					frozen := e.tuning.lease + 2*time.Second
					did = append(did, fmt.Sprintf("+%s SIGSTOP r%d for %s", at, i, frozen))
					z := e.replica(i)
					now := time.Now()
					z.pause()
					sleep(ctx, frozen)
					e.addFault(fault{what: "sigstop", instance: z.name, start: now, end: time.Now()})
					z.resume()
				case 2:
					d := 2*time.Second + time.Duration(e.faultRNG.Int64N(int64(time.Second)))
					did = append(did, fmt.Sprintf("+%s Redis blip %s", at, d.Round(100*time.Millisecond)))
					if err := e.blip(ctx, d); err != nil {
						return err
					}
				case 3:
					did = append(did, fmt.Sprintf("+%s Postgres restart", at))
					if err := e.r.stack.Down(ctx, "postgres"); err != nil {
						return err
					}
					sleep(ctx, 3*time.Second)
					if err := e.r.stack.Up(context.WithoutCancel(ctx), "postgres"); err != nil {
						return err
					}
				case 4:
					faults := []chatsim.Fault{
						{Kind: chatsim.FaultStatus, Status: 503},
						{Kind: chatsim.FaultErrcode, Errcode: 130101, Count: 2},
						{Kind: chatsim.FaultSlow, Delay: 5 * time.Second, Count: 3},
						{Kind: chatsim.FaultDrop, Count: 5},
						{Kind: chatsim.FaultThrottle},
					}
					f := faults[e.faultRNG.IntN(len(faults))]
					d := 5*time.Second + time.Duration(e.faultRNG.Int64N(int64(5*time.Second)))
					did = append(did, fmt.Sprintf("+%s DingTalk %s for %s", at, f.Kind, d.Round(100*time.Millisecond)))
					for k, rb := range e.robots {
						if k%2 == i {
							if err := e.sim.Inject(rb.Token, f); err != nil {
								return err
							}
						}
					}
					sleep(ctx, d)
					e.sim.ClearFaults("")
				}
			}
			return nil
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
		if e.sink != nil {
			// A send of a due message in flight when the broker stopped may have been stored
			// without its answer: resent, it is a duplicate by design (the RD_ID key tells).
			e.addFault(fault{what: "broker restart", start: at, end: time.Now()})
		}
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
			if err := e.sim.Inject(rb.Token, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}); err != nil {
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
		e.note("postgres started again and DingTalk healed at +%s", time.Since(at).Round(100*time.Millisecond))
		return nil
	})
}

// storm: storms of the platform of the scenario's target, in phases over Storm, on its
// robots: 5xx, its throttling answers, 10s answers, dropped connections, its answer for a
// broken robot, 429 and its "busy", malformed answers (storms). A phase that no request
// met by its end goes on until one does, for at most three phases more (a phase on half
// the robots moves, each phase's length, to the half the sender uses then); one that none
// met even then is a problem of the scenario (checkStorm): it proved nothing.
func runStorm(ctx context.Context, e *env) error {
	o := e.r.opts
	phases := storms[e.kind]
	each := o.Storm / time.Duration(len(phases))
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, 2*time.Second)
		var did []string
		for _, p := range phases {
			if ctx.Err() != nil {
				return nil
			}
			before := e.sim.Stats()
			start := time.Now()
			robots, err := e.inject(p, start.Add(-5*senderWindow))
			if err != nil {
				return err
			}
			sleep(ctx, each)
			for moved := start; p.met(before, e.sim.Stats()) == 0 && time.Since(start) < 4*each; { // none met it yet
				if p.some && time.Since(moved) >= each {
					// The sender left the half it was using when the phase began (the
					// previous phase sent it elsewhere): the fault moves to the half it
					// uses now, once a phase's length.
					e.sim.ClearFaults("")
					if robots, err = e.inject(p, moved); err != nil {
						return err
					}
					moved = time.Now()
				}
				if !sleep(ctx, 100*time.Millisecond) {
					break
				}
			}
			n := p.met(before, e.sim.Stats())
			e.sim.ClearFaults("")
			on := ""
			if p.some {
				for _, rb := range robots {
					on += " " + rb.Name
				}
				on = "on" + on + ", "
			}
			did = append(did, fmt.Sprintf("%s (%s%s, met %d)", p.name, on, time.Since(start).Round(100*time.Millisecond), n))
			if n == 0 {
				e.mu.Lock()
				e.unmet = append(e.unmet, p.name)
				e.mu.Unlock()
			}
		}
		e.note("%d storm phases: %s", len(phases), strings.Join(did, "; "))
		return nil
	})
}

// stormPhase is one phase of a storm: faults injected, in order, on every robot of the
// scenario's target or on the half the sender is using most (busiest), which it must
// then leave for the others.
type stormPhase struct {
	name   string
	faults []chatsim.Fault
	some   bool // only on half of the robots
}

// inject injects the phase's faults on every robot of the scenario's target, or on the
// half that accepted the most messages since the given moment (busiest), and returns
// the robots it injected them on.
func (e *env) inject(p stormPhase, since time.Time) ([]chatsim.Robot, error) {
	robots := e.robots
	if p.some {
		robots = e.busiest(len(robots)/2, since)
	}
	for _, rb := range robots {
		for _, f := range p.faults {
			if err := e.sim.Inject(rb.Token, f); err != nil {
				return nil, err
			}
		}
	}
	return robots, nil
}

// busiest returns the n robots of the scenario's target that accepted the most messages
// since the given moment, ties in their order: the robots the sender is using (it
// prefers the robots it knows, and sends through one scout among the others).
func (e *env) busiest(n int, since time.Time) []chatsim.Robot {
	used := map[string]int{}
	for _, m := range e.sim.Accepted() {
		if m.At.After(since) {
			used[m.Robot]++
		}
	}
	robots := slices.Clone(e.robots)
	slices.SortStableFunc(robots, func(a, b chatsim.Robot) int { return used[b.Name] - used[a.Name] })
	return robots[:n]
}

// met counts the requests that met the phase's faults between two of the simulator's
// counts: the answers shaped by a fault, or for slow answers (which the simulator does
// not count as faults) every request to a robot.
func (p stormPhase) met(before, after chatsim.Stats) int {
	if p.faults[0].Kind == chatsim.FaultSlow {
		return after.Requests - before.Requests
	}
	return after.Faults - before.Faults
}

// storms are each platform's storm: the same trouble in the platform's own answers,
// read from its failure table (sender.Failures). Its throttling answer makes a robot rest
// and the alert move on (DingTalk's 130101, WeCom's 45009, Feishu's 9499, Slack's 429),
// as does the simulator's lock-out (DingTalk's redirects, the others' throttle answer);
// its busy moments' answer (Feishu's 11232) likewise; its answer for a broken robot
// takes the robot out of rotation for sender.disableFor, so only half the robots get it;
// its "busy" (DingTalk's and WeCom's -1) is retried.
var storms = func() map[string][]stormPhase {
	out := map[string][]stormPhase{}
	for _, p := range platforms.All {
		out[p.Kind()] = stormOfPlatform(p)
	}
	return out
}()

// stormOfPlatform is p's storm.
func stormOfPlatform(p sender.Platform) []stormPhase {
	f := p.Failures
	code := func(c int) string { return fmt.Sprintf("%s %d", f.CodeName, c) }
	phases := []stormPhase{{"HTTP 503 on every robot", []chatsim.Fault{stormStatus(503)}, false}}
	if c, ok := firstCode(f, sender.ClassThrottled, f.Busy); ok {
		phases = append(phases, stormPhase{code(c) + " (throttled) on half the robots", []chatsim.Fault{stormCode(c, 2)}, true})
	}
	if f.Busy != 0 {
		phases = append(phases, stormPhase{code(f.Busy) + " (busy moments) on half the robots", []chatsim.Fault{stormCode(f.Busy, 2)}, true})
	}
	phases = append(phases,
		stormPhase{"10s answers on every robot", []chatsim.Fault{stormSlow}, false},
		stormPhase{"dropped connections on every robot", []chatsim.Fault{stormDrops}, false},
		stormPhase{"locked out on half the robots", []chatsim.Fault{stormThrottle}, true})
	if c, ok := firstCode(f, sender.ClassRobotBroken, 0); ok {
		phases = append(phases, stormPhase{code(c) + " (broken robot) on half the robots", []chatsim.Fault{stormCode(c, 2)}, true})
	}
	tooMany := stormPhase{"HTTP 429 with Retry-After 1s", []chatsim.Fault{stormTooMany}, false}
	if c, ok := firstCode(f, sender.ClassTransient, 0); ok {
		tooMany.name += " and " + code(c)
		tooMany.faults = append(tooMany.faults, stormCode(c, 2))
	}
	return append(phases, tooMany, stormPhase{"malformed answers on every robot", []chatsim.Fault{stormMalformed}, false})
}

// firstCode is the lowest code of f's table of class, other than not.
func firstCode(f sender.Failures, class sender.Class, not int) (int, bool) {
	codes := slices.Sorted(maps.Keys(f.Codes))
	for _, c := range codes {
		if f.Codes[c] == class && c != not {
			return c, true
		}
	}
	return 0, false
}

// The faults of the storms.
var (
	stormSlow      = chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 10 * time.Second, Count: 3}
	stormDrops     = chatsim.Fault{Kind: chatsim.FaultDrop, Count: 5}
	stormThrottle  = chatsim.Fault{Kind: chatsim.FaultThrottle}
	stormTooMany   = chatsim.Fault{Kind: chatsim.FaultStatus, Status: 429, RetryAfter: time.Second, Count: 3}
	stormMalformed = chatsim.Fault{Kind: chatsim.FaultMalformed, Count: 2}
)

// stormStatus answers HTTP s until the phase ends.
func stormStatus(s int) chatsim.Fault { return chatsim.Fault{Kind: chatsim.FaultStatus, Status: s} }

// stormCode answers the platform's code c, n times.
func stormCode(c, n int) chatsim.Fault {
	return chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: c, Count: n}
}

// malformed: the corpus of malformed inputs mixed into a normal run.
func runMalformed(ctx context.Context, e *env) error {
	o := e.r.opts
	corpus := Corpus(e.idPrefix)
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		if err := e.publishMalformed(ctx, corpus, o.PublishOver); err != nil {
			return err
		}
		e.mu.Lock()
		n := len(e.cases)
		e.mu.Unlock()
		e.note("%d of %d malformed inputs published among %d good ones", n, len(corpus), o.OtherAlerts)
		return nil
	})
}

// publishMalformed publishes the cases spread evenly over `over`.
func (e *env) publishMalformed(ctx context.Context, corpus []MalformedCase, over time.Duration) error {
	gap := over / time.Duration(len(corpus)+1)
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
	return nil
}

// redis-failover: the replicas use Redis through Sentinel with redis.durability
// replicas=1 (every write waits until the replica has it). Mid-run the primary is
// SIGKILLed; the sentinels promote the replica; after Outage the old primary starts
// again and the sentinels make it the new primary's replica, so writes can be
// acknowledged again. Nothing acknowledged was only on the dead primary.
func runRedisFailover(ctx context.Context, e *env) error {
	o := e.r.opts
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		sleep(ctx, o.PublishOver/2)
		master, primary, err := e.sentinelPrimary(ctx)
		if err != nil {
			return err
		}
		at := time.Now()
		if err := e.r.stack.Kill(ctx, "sentinel-primary"); err != nil {
			return err
		}
		promoted, err := e.r.stack.WaitPromotion(ctx, master, primary, 30*time.Second)
		// Until a replica is promoted, releases cannot land; a claim may lapse meanwhile.
		e.addFault(fault{what: "sentinel primary sigkill", start: at, end: time.Now()})
		if err != nil {
			return err
		}
		e.note("Sentinel primary %s SIGKILLed at +%s; the sentinels promoted %s after %s", primary,
			(o.PublishOver / 2).Round(100*time.Millisecond), promoted, time.Since(at).Round(100*time.Millisecond))
		sleep(ctx, o.Outage)
		if err := e.r.stack.StartTopology(context.WithoutCancel(ctx), "sentinel"); err != nil {
			return err
		}
		e.note("the old primary started again (the sentinels make it a replica) %s after the kill", time.Since(at).Round(100*time.Millisecond))
		return nil
	})
}

// sentinelPrimary is the Sentinel master's name on the private stack and the address of
// its primary now.
func (e *env) sentinelPrimary(ctx context.Context) (master, primary string, err error) {
	master = e.r.stack.Env["ROCKETDELAY_LOCAL_SENTINEL_MASTER"]
	primary, err = e.r.stack.SentinelPrimary(ctx, master)
	return master, primary, err
}

// kill-busy: a cluster of alerts falls due at once for the target "other", whose one
// robot takes 19 a second: far past its budget, so both replicas park the alerts they
// hold and each send, on either replica, adopts what both parked, merged. Each alert's
// body is about busyBodyBytes, an Alertmanager notification's size, so a message of
// DingTalk's 20000 bytes carries about ten and the cluster of 12 × OtherAlerts needs
// about 140 messages, seven windows' budget. (With bodies of a few bytes, merged 50 to a
// message, it needed about 29, and full messages go as fast as the robot's window allows:
// when the hand-offs came spread out over a couple of seconds the window kept up and
// nothing parked.) The robot
// answers slowly (1s) while the cluster drains, so merged sends carrying adopted alerts
// are in flight when one replica is SIGKILLed, twice, and restarted after 1-2s: the
// alerts it had adopted come back through their lease, the ones it had parked are the
// other replica's to adopt, and none may be lost or sent twice but where a kill cut a
// send whose request DingTalk had accepted. The replicas' metrics must show alerts
// parked and adopted (checkShared), or the scenario proves nothing about them.
// busyBodyBytes is about the size of each kill-busy alert's body; busyFiller pads it.
const busyBodyBytes = 1800

var busyFiller = strings.Repeat("lorem ", busyBodyBytes/len("lorem "))

func runKillBusy(ctx context.Context, e *env) error {
	o := e.r.opts
	cluster := max(o.OtherAlerts*12, 1200)
	due := time.Now().Add(o.PublishOver/2 + 6*time.Second).Truncate(time.Millisecond)
	other := otherRobot(e.tokenPrefix()).Token
	return concurrently(ctx, e.publishDefault(o.OtherAlerts), func(ctx context.Context) error {
		for i := range cluster {
			id := fmt.Sprintf("%s-%05d", e.idPrefix, 90000+i)
			body := fmt.Sprintf("chaos %s %s", id, busyFiller)
			if err := e.publishOne(ctx, wire.Publication{Target: "other", At: due, ID: id, Body: []byte(body)}); err != nil {
				return err
			}
		}
		sleep(ctx, time.Until(due.Add(-time.Second)))
		if err := e.sim.Inject(other, chatsim.Fault{Kind: chatsim.FaultSlow, Delay: time.Second}); err != nil {
			return err
		}
		start := time.Now()
		for k := range 2 {
			sleep(ctx, 300*time.Millisecond+time.Duration(e.faultRNG.Int64N(int64(time.Second))))
			if ctx.Err() != nil {
				return nil
			}
			i := e.faultRNG.IntN(2)
			down := time.Second + time.Duration(e.faultRNG.Int64N(int64(time.Second)))
			e.note("kill %d: SIGKILL replica %d at due+%s, down %s", k+1, i, time.Since(start).Round(100*time.Millisecond), down.Round(100*time.Millisecond))
			if err := e.restartReplica(ctx, i, down); err != nil {
				return err
			}
		}
		e.sim.ClearFaults(other)
		e.note("%d alerts due at once for one robot (19 a second), answering in 1s while they drained", cluster)
		return nil
	})
}

// withTopicCluster runs fn and, meanwhile, publishes a cluster of alerts that fall due
// at once for the topic target, so that its ratePerSecond binds: they drain at the
// rate, in batch sends of at most its burst (checkTopic).
//
// The cluster leaves at the target's rate (topicRate a second, shared by the replicas),
// and a replica killed while it leaves holds alerts that have already waited for the
// rate: they are late by that wait, the liveness period and their turn after it. The
// bound of the kills' alerts grows by the cluster's time at the rate (make test drew
// kill-one-topic's first kill 2.8s after the cluster fell due, seed 5316496117824385268:
// the killed replica still held cluster alerts waiting for the rate: 5.03s at p99, and 6
// of 11 more runs of that seed were past 5s too, at up to 6.55s).
func withTopicCluster(fn scenarioFunc) scenarioFunc {
	return func(ctx context.Context, e *env) error {
		e.rateBacklog = time.Duration(topicClusterSize(e.r.opts)) * time.Second / topicRate
		return concurrently(ctx, func(ctx context.Context) error { return fn(ctx, e) }, e.publishTopicCluster)
	}
}

// topicClusterSize is how many alerts publishTopicCluster publishes.
func topicClusterSize(o Options) int { return max(o.OtherAlerts/2, 100) }

// publishTopicCluster publishes topicClusterSize alerts for the topic target, all due
// halfway through the publishing plus 6s.
func (e *env) publishTopicCluster(ctx context.Context) error {
	o := e.r.opts
	n := topicClusterSize(o)
	due := time.Now().Add(o.PublishOver/2 + 6*time.Second).Truncate(time.Millisecond)
	for i := range n {
		id := fmt.Sprintf("%s-%05d", e.idPrefix, 90000+i)
		body := append([]byte("chaos "+id), 0xff)
		if err := e.publishOne(ctx, wire.Publication{Target: "orders", Raw: true, Tag: "chaos", At: due, ID: id, Body: body}); err != nil {
			return err
		}
	}
	e.note("%d alerts due at once for the topic target at +%s (ratePerSecond %d)", n, (o.PublishOver/2 + 6*time.Second).Round(100*time.Millisecond), topicRate)
	return nil
}

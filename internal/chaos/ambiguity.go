package chaos

import (
	"slices"
	"time"
)

// A duplicate is excused only by what happened to the request that carried an earlier
// copy of the same alert: the sender gave up on it after DingTalk had taken it (a
// timeout), or a fault struck while it was on its way (a crash). Each such copy excuses
// one later copy — the one sent again because its release was never recorded — and no
// more; every other extra copy is an unexplained duplicate, which fails the scenario. So
// the ambiguous counts of a row are bounded by what its faults can explain
// (Row.TimeoutBound, Row.CrashBound), alert by alert.

// releaseWindow is how long after DingTalk's answer (or the broker's store) a send may
// still lack its release in Redis: the sender reads the answer, then releases the alert,
// a Redis round trip on a loaded machine. A fault that strikes within it can have lost
// that release.
const releaseWindow = time.Second

// redisLostWrites is how much of what a SIGKILLed Redis acknowledged it may have lost:
// with appendfsync everysec, Redis's documentation says one second of writes, two when
// the fsync lags.
const redisLostWrites = 2 * time.Second

// acceptance is one copy of an alert that DingTalk (the simulator) accepted or, in a
// topic scenario, the broker stored.
type acceptance struct {
	at time.Time // by the simulator's clock, or the broker's store time
	// instance is the replica instance whose request carried it; "" unknown.
	instance string
	// sent and answered span its request at the simulator (both at, when unknown).
	sent, answered time.Time
	// abandoned: the client gave up on the request before reading its answer.
	abandoned bool
	// stored: at is the broker's store time, the only moment of the send it records.
	stored bool
}

// fault is a moment that can leave an accepted copy without its release although the
// replicas did what they could: a replica SIGKILLed or frozen with the request on the
// wire or its release not yet written, or the store that holds the release losing
// acknowledged writes (a SIGKILLed Redis, a failover), or the broker stopped while a send
// was in flight. Outages the replicas ride out knowing every outcome (Postgres restarts,
// Redis blips, DingTalk storms, clocks) record none.
type fault struct {
	what string
	// instance is the replica instance hit; "" a fault of every replica's sends.
	instance string
	// start is when it struck; end when it was over: a SIGKILLed replica reaped, a frozen
	// one resumed, a store or broker back. A request of the instance that reached the
	// simulator after end was sent after the fault.
	start, end time.Time
	// lost is how far before start acknowledged writes may have been lost.
	lost time.Duration
}

// explains reports whether a's release may have been lost to f: a's request was on its
// way before f was over, and answered no earlier than its release could have landed
// before f struck.
// A copy whose replica is unknown may be any replica's.
func (f fault) explains(a acceptance) bool {
	if a.answered.Before(f.start.Add(-f.lost - releaseWindow)) {
		return false
	}
	if f.instance != "" && a.instance != "" && f.instance != a.instance {
		return false
	}
	if a.stored {
		// Bytes already on the wire when their replica died are stored a moment later.
		return !a.at.After(f.end.Add(releaseWindow))
	}
	return !a.sent.After(f.end)
}

// ambiguity is what a scenario's duplicates come to.
type ambiguity struct {
	// timeout and crash count the extra copies excused by a timeout or a fault;
	// unexplained the others.
	timeout, crash, unexplained int
	// timeoutBound and crashBound count the copies a timeout or a fault can have left
	// without their release: each can excuse one extra copy.
	timeoutBound, crashBound int
	// unexplainedIDs lists the alerts with an unexplained extra copy.
	unexplainedIDs []string
}

// judge sorts the extra copies of every alert: copies holds each alert's acceptances.
func judge(copies map[string][]acceptance, faults []fault) ambiguity {
	var out ambiguity
	for id, cs := range copies {
		cs = slices.Clone(cs)
		slices.SortFunc(cs, func(a, b acceptance) int { return a.at.Compare(b.at) })
		var crashes, timeouts int // earlier copies that can still excuse one
		for k, c := range cs {
			if k > 0 {
				switch {
				case crashes > 0:
					crashes--
					out.crash++
				case timeouts > 0:
					timeouts--
					out.timeout++
				default:
					out.unexplained++
					if !slices.Contains(out.unexplainedIDs, id) {
						out.unexplainedIDs = append(out.unexplainedIDs, id)
					}
				}
			}
			switch {
			case slices.ContainsFunc(faults, func(f fault) bool { return f.explains(c) }):
				crashes++
				out.crashBound++
			case c.abandoned:
				timeouts++
				out.timeoutBound++
			}
		}
	}
	slices.Sort(out.unexplainedIDs)
	return out
}

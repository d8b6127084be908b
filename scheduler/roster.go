package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A replica never decides for a configuration it does not have. While a configuration
// is rolled out replica by replica, one replica knows a new target and another does not
// yet (or, for a removed target, the other way round). Every replica says in Redis which
// targets its configuration has (the roster: on start, then every rosterEvery), and an
// alert for a target this replica does not know, which another replica said it knows
// within UnknownTargetWait, is not rejected: it hops on as it would anyway, or, due within
// the threshold, is sent back to the topic at the first delay level, whose queues the
// group shares, until a replica that knows the target stores it. Only a target no replica
// has said it knows for UnknownTargetWait is rejected as unknown.

// TargetRoster is what the replicas of a deployment say their configurations have;
// *store.Roster implements it.
type TargetRoster interface {
	// Affirm records that this replica's configuration has targets.
	Affirm(ctx context.Context, targets []string) error
	// Known is how long ago a replica last said it has target; ok is false when none did.
	Known(ctx context.Context, target string) (ago time.Duration, ok bool, err error)
}

// rosterEvery is how often a replica says which targets it has: four times within the
// least UnknownTargetWait any replica may have, not within its own, as the replicas of a
// rollout may be configured differently and each judges the others by its own wait.
const rosterEvery = config.MinUnknownTargetWait / 4

// affirmTargets says once which targets this replica has.
func (s *Scheduler) affirmTargets(ctx context.Context) error {
	if s.opts.Roster == nil {
		return nil
	}
	names := slices.Clone(s.opts.Targets)
	for _, p := range s.opts.Policies {
		names = append(names, store.RosterPolicy(p))
	}
	if err := s.opts.Roster.Affirm(ctx, names); err != nil {
		return fmt.Errorf("scheduler: say which targets this replica has: %w", err)
	}
	return nil
}

// rosterLoop says which targets this replica has every rosterEvery.
func (s *Scheduler) rosterLoop(ctx context.Context) {
	defer s.life.loops.Done()
	t := time.NewTicker(rosterEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := s.affirmTargets(ctx); err != nil && ctx.Err() == nil {
			s.logger.Warn("cannot say which targets this replica has; trying again", "err", err)
		}
	}
}

// elsewhere routes msg, whose target this replica does not know (rej), when another
// replica of the deployment said it knows it within UnknownTargetWait: it hops on, or
// goes back to the topic at the first delay level for a replica that knows it. ok is
// false when no replica did: rej stands, its detail saying so.
func (s *Scheduler) elsewhere(ctx context.Context, msg *primitive.MessageExt, a store.Entry, rej *wire.Rejection, now time.Time) (ok bool, err error) {
	if s.opts.Roster == nil {
		return false, nil
	}
	ago, known, err := s.opts.Roster.Known(ctx, a.Target)
	if err != nil {
		return false, err
	}
	if !known || ago > s.opts.UnknownTargetWait {
		if known {
			rej.Detail += fmt.Sprintf("; the last replica that had it said so %s ago (scheduler.unknownTargetWait %s)",
				ago.Round(time.Second), s.opts.UnknownTargetWait)
		}
		return false, nil
	}
	at, due := deliverAt(msg)
	if due != nil {
		*rej = *due // the due time is wrong whatever the target
		return false, nil
	}
	a.DueAt = at
	hop, ok := s.broker.route.Next(at.Sub(now))
	if !ok {
		hop = Hop{Level: 1}
	}
	if err := s.publishHop(ctx, msg, a, hop, sendOn); err != nil {
		return false, err
	}
	s.metrics.elsewhere.Inc()
	s.unknown.note(s, a.Target, ago)
	return true, nil
}

// unknownTargets logs, at most once a minute per target, the alerts sent on for a
// target another replica knows.
type unknownTargets struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (u *unknownTargets) note(s *Scheduler, target string, ago time.Duration) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.last == nil {
		u.last = map[string]time.Time{}
	}
	if at, ok := u.last[target]; ok && time.Since(at) < time.Minute {
		return
	}
	u.last[target] = time.Now()
	s.logger.Warn("alerts for a target this replica's configuration does not have are sent on for a replica that has it "+
		"(a configuration rollout in progress?)", "target", target, "known_by_another", ago.Round(time.Millisecond).String()+" ago")
}

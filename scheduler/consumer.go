package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// consume is the push consumer's handler. A message is acknowledged only once its next
// home is durable; any error hands it back to RocketMQ for a later retry.
func (s *Scheduler) consume(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	s.broker.handling.RLock()
	defer s.broker.handling.RUnlock()
	if s.broker.closing {
		return consumer.ConsumeRetryLater, nil
	}
	for _, m := range msgs {
		if m.ReconsumeTimes > 0 {
			s.metrics.reconsumed.Inc()
			s.metrics.reconsumeTimes.Observe(float64(m.ReconsumeTimes))
		}
		if stage, err := s.handle(ctx, m); err != nil {
			s.metrics.retries.WithLabelValues(stage).Inc()
			level := s.retryLevel(int(m.ReconsumeTimes))
			if cc, ok := primitive.GetConcurrentlyCtx(ctx); ok {
				cc.DelayLevelWhenNextConsume = level
			}
			// Writes short of redis.durability are said once per change of state (the
			// wheel stage's OnDurability), not once per message.
			lvl := slog.LevelWarn
			if errors.Is(err, store.ErrNotReplicated) {
				lvl = slog.LevelDebug
			}
			s.logger.Log(ctx, lvl, "message handed back to RocketMQ for a retry", "stage", stage,
				"rd_id", messageID(m), "msg_id", m.MsgId, "reconsume", m.ReconsumeTimes,
				"retry_in", s.opts.Levels[level-1].String(), "err", err)
			return consumer.ConsumeRetryLater, nil
		}
	}
	return consumer.ConsumeSuccess, nil
}

// retryLevel is the delay level of the next delivery of a message handed back for the
// reconsume-th time: the largest level not above RetryDelay·2^reconsume capped at
// RetryMaxDelay, and at least the first level. Reconsumption is unbounded (the consumer's
// maximum reconsume times is the largest the protocol carries), so an outage of any
// length sends nothing to the dead-letter queue, and once it ends a message waits at
// most about RetryMaxDelay.
func (s *Scheduler) retryLevel(reconsume int) int {
	want := s.opts.retryDelay(reconsume)
	level := 1
	for i, l := range s.opts.Levels {
		if l <= want {
			level = i + 1
		}
	}
	return level
}

// handle routes one message; a non-nil error means "retry later", stage says where it
// failed.
func (s *Scheduler) handle(ctx context.Context, msg *primitive.MessageExt) (stage string, err error) {
	s.metrics.received.Inc()
	if msg.GetProperty(PropProbe) != "" && msg.GetProperty(wire.PropTarget) == "" { // a probe names no target; an alert that says it is one is not
		s.logger.Debug("start-up probe dropped", "probe", msg.GetProperty(PropProbe), "msg_id", msg.MsgId)
		return "probe", nil
	}
	now := s.now()
	a, rej := decode(msg, decodeRules{knownTarget: s.opts.KnownTarget, topics: s.opts.Topics, checkBody: s.opts.CheckBody,
		horizon: s.opts.Horizon, dedupe: s.opts.DedupeWindow}, now)
	a.Priority = a.Props[wire.PropPriority]
	if s.opts.Principal != nil {
		a.Principal = s.opts.Principal(a)
		// Before any other reason: a rejection for another is recorded under the id,
		// and an operator's retry of that row would deliver it under the service's id.
		if r := s.serviceIDProven(a); r != nil {
			rej = r
		}
	}
	if rej != nil && rej.Reason == wire.RejectUnknownTarget {
		if sent, err := s.elsewhere(ctx, msg, a, rej, now); err != nil || sent {
			return "elsewhere", err
		}
	}
	if rej != nil {
		key := msg.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex)
		if key == "" {
			key = msg.MsgId
		}
		err := s.delivery.Reject(ctx, delivery.Rejected{Alert: alertOf(a), Properties: msg.GetProperties(), MessageKey: key,
			Reason: string(rej.Reason), Detail: rej.Detail})
		if err != nil {
			return "reject", fmt.Errorf("record the rejection (%s): %w", rej.Reason, err)
		}
		if a.Hops > 0 && rej.Reason != wire.RejectBadID && a.Target != "" {
			// Its hops listed it among the pending alerts (best effort, as the notes are);
			// a message refused for its id is not the alert its id names.
			if err := s.store.Unlist(ctx, a.ID, a.Target); err != nil {
				s.metrics.tracesDropped.Inc()
				s.logger.Warn("rejected alert left in the list of pending alerts", "rd_id", a.ID, "err", err)
			}
		}
		s.metrics.rejected.WithLabelValues(string(rej.Reason)).Inc()
		s.logger.Error("message rejected: it can never be delivered", "rd_id", a.ID, "target", a.Target,
			"reason", string(rej.Reason), "detail", rej.Detail, "msg_id", msg.MsgId)
		return "reject", nil
	}
	// A reschedule is not read here: a hop never waits for Redis. An alert rescheduled
	// while it hops (to its carried due time or later), and every copy of a generation,
	// hops on by the due time it carries; the wheel stage's Put checks both records
	// atomically and routes it (PutMoved, PutUndecided) or drops it (PutStale).
	var res store.PutResult
	for moves := 0; ; moves++ {
		if hop, ok := s.broker.route.Next(a.DueAt.Sub(now)); ok {
			// An alert cancelled while hopping keeps hopping and is dropped by the wheel
			// stage's Put, which checks the cancel tombstone.
			return "hop", s.publishHop(ctx, msg, a, hop, nil)
		}
		var err error
		res, err = s.store.Put(ctx, a)
		if err != nil {
			return "wheel", err
		}
		if res != store.PutMoved && res != store.PutUndecided {
			break
		}
		if moves == maxMoves {
			return "wheel", fmt.Errorf("alert %s: rescheduled again and again while it is stored", a.ID)
		}
		if res == store.PutUndecided {
			// A copy sent back to the broker by a reschedule that has not settled it yet
			// (its copy came back first, or the rescheduler stopped between its publish
			// and its settle): settle it here.
			if live, err := s.settle(ctx, &a); err != nil {
				return "wheel", err
			} else if !live {
				s.dropStale(a)
				return "wheel", nil
			}
			now = s.now()
			continue
		}
		// Rescheduled while it hopped, to another time than it carries: route it by the
		// record's.
		due, ok, err := s.store.RescheduledDue(ctx, a.ID)
		if err != nil {
			return "wheel", err
		}
		if !ok {
			return "wheel", fmt.Errorf("alert %s: rescheduled, and its record is gone", a.ID)
		}
		s.logger.Debug("rescheduled alert routed by its new due time", "rd_id", a.ID, "due", due, "carried", a.DueAt)
		a.DueAt, now = due, s.now()
	}
	s.metrics.stored.WithLabelValues(res.String()).Inc()
	switch res {
	case store.PutStored, store.PutDuplicate:
		// A duplicate may be this very copy, stored by a Put whose answer was lost (a cut
		// reply, a WAIT short of its replicas) and handed back: then no wheel holds it.
		// Holding it here too costs one claim at most: the claim takes it only from
		// wherever it waits, and it is handed off only once due by Redis's clock.
		if err := s.wheel.Add(a.ID, s.opts.fireAt(a.DueAt)); err != nil {
			// Redis holds it; the sweeper claims it once it is overdue.
			s.logger.Warn("wheel refused a key; the sweeper will deliver it", "rd_id", a.ID, "err", err)
		}
		if res == store.PutDuplicate {
			s.logger.Debug("duplicate alert: held in the wheel in case it is this copy's", "rd_id", a.ID)
		}
	case store.PutCancelled:
		s.metrics.cancelled.Inc()
		s.logger.Info("cancelled alert dropped", "rd_id", a.ID, "hops", a.Hops)
	case store.PutStale:
		s.logger.Info("stale copy of a rescheduled alert dropped", "rd_id", a.ID, "gen", a.Gen, "hops", a.Hops)
	default:
		s.logger.Debug("duplicate alert ignored", "rd_id", a.ID, "result", res.String())
	}
	return "wheel", nil
}

// maxMoves bounds how often one arrival is routed again because its alert was
// rescheduled while it was being stored; past it the message is handed back to RocketMQ.
const maxMoves = 3

// settle settles a's generation, which no reschedule settled yet: it becomes the live
// one if its alert still waits in the wheel stage (which then lets go of it) or is not
// in Redis, and a takes the due time it was settled with; live is false when it was
// refused (the alert is in flight, delivered, cancelled, or another generation won).
func (s *Scheduler) settle(ctx context.Context, a *store.Entry) (live bool, err error) {
	res, err := s.store.SettleRequeue(ctx, a.ID, a.Gen, a.DueAt, true)
	if err != nil {
		return false, fmt.Errorf("settle generation %d: %w", a.Gen, err)
	}
	s.logger.Debug("requeued copy settled on arrival", "rd_id", a.ID, "gen", a.Gen, "result", res.Result.String())
	if res.Result != store.RescheduleRequeued {
		return false, nil
	}
	a.DueAt = res.DueAt
	return true, nil
}

// dropStale acknowledges a stale copy of a rescheduled alert: another copy is the alert.
func (s *Scheduler) dropStale(a store.Entry) {
	s.metrics.stored.WithLabelValues(store.PutStale.String()).Inc()
	s.logger.Info("stale copy of a rescheduled alert dropped", "rd_id", a.ID, "gen", a.Gen, "hops", a.Hops)
}

// publishHop re-publishes msg for hop h (a delay level, or a timer message), carrying
// its properties. queue is nil, or sendOn for a message sent on for another replica
// (hopSelector).
func (s *Scheduler) publishHop(ctx context.Context, orig *primitive.MessageExt, a store.Entry, h Hop, queue *primitive.MessageQueue) error {
	m := primitive.NewMessage(s.opts.Topic, orig.Body)
	m.Queue = queue
	for k, v := range orig.GetProperties() {
		if !wire.SystemProperty(k) {
			m.WithProperty(k, v)
		}
	}
	m.RemoveProperty(wire.PropDelay)
	m.WithProperty(wire.PropDeliverAt, strconv.FormatInt(a.DueAt.UnixMilli(), 10))
	m.WithProperty(wire.PropID, a.ID)
	m.WithProperty(wire.PropHops, strconv.Itoa(a.Hops+1))
	kind := fmt.Sprintf("level %d", h.Level)
	if h.Level > 0 {
		m.WithDelayTimeLevel(h.Level)
	} else {
		kind = "timer " + h.Delay.String()
		m.WithProperty(primitive.PropertyTimerDeliverMS, strconv.FormatInt(s.now().Add(h.Delay).UnixMilli(), 10))
	}
	sendCtx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
	defer cancel()
	res, err := s.broker.producer.SendSync(sendCtx, m)
	if err != nil {
		return fmt.Errorf("publish hop (%s): %w", kind, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("publish hop (%s): broker answered %s", kind, wire.SendStatus(res.Status))
	}
	s.metrics.hop(h.Level)
	s.logger.Debug("hop published", "rd_id", a.ID, "hop", kind, "remaining", a.DueAt.Sub(s.now()).String(), "hops", a.Hops+1)
	delay := h.Delay
	if h.Level > 0 {
		delay = s.opts.Levels[h.Level-1]
	}
	s.noteHop(store.HopNote{ID: a.ID, Target: a.Target, Due: a.DueAt, Hops: a.Hops + 1, Delay: delay,
		Priority: a.Priority, Principal: a.Principal, Msg: res.OffsetMsgID, Gen: a.Gen})
	return nil
}

// serviceIDProven refuses a, whose principal the service's signature proves (or not), when
// its id is one of the service's own (wire.ReservedID: an escalation's step, an
// Alertmanager notification) or a scoped one, and it is not proven to be the service's
// (for a scoped id, its principal's, through the ways in): a message
// published to the topic directly under such an id would take it, and the service's own
// alert, arriving later, would be dropped as its copy. A step of a release that signed
// its mark but not its principal (bede048) is proven by its mark. Refused with
// RejectBadID, which is recorded by the message's key, never under the id.
func (s *Scheduler) serviceIDProven(a store.Entry) *wire.Rejection {
	prefix, principal, ok := wire.ReservedID(a.ID)
	switch {
	case !ok:
		return nil
	case principal == "" && a.Principal != "", principal != "" && a.Principal == principal:
		return nil
	case prefix == wire.StepIDPrefix && s.opts.StepMarkProven != nil && s.opts.StepMarkProven(a):
		return nil
	}
	if prefix == wire.ScopePrefix {
		return wire.Reject(wire.RejectBadID, "id %q is a scoped id (@<principal>:<name>), and the message is not proven to be "+
			"its principal's, published through the ways in (published to the topic directly, or by another principal?)", a.ID)
	}
	return wire.Reject(wire.RejectBadID, "id %q begins with %q, the service's own ids (escalation steps, Alertmanager "+
		"notifications), and the message is not proven to be the service's (published to the topic directly?)", a.ID, prefix)
}

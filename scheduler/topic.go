package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/wire"
)

// topicQueues is the number of queues of a topic EnsureTopic creates: room for 8
// consumers of one group.
const topicQueues = 8

// ReachNameServers asks the name servers once for topic's route and returns nil when
// one of them answered, whether or not it knows the topic; otherwise the error, which
// says none could be reached. A replica starting while RocketMQ is away waits on it.
func ReachNameServers(ctx context.Context, nameServers []string, access wire.Access, topic string) error {
	adm, done, err := topicAdmin(nameServers, access, topic)
	if err != nil {
		return err
	}
	defer done()
	_, err = adm.FetchPublishMessageQueues(ctx, topic)
	var unreachable *primitive.RemotingErr
	if errors.As(err, &unreachable) {
		return fmt.Errorf("scheduler: no name server of %s answered: %w", strings.Join(nameServers, ","), err)
	}
	return nil
}

// topicAdmin is an admin client of the name servers for asking after topic, whose route
// the client's log does not report missing (it is what a first start finds); done
// closes it.
func topicAdmin(nameServers []string, access wire.Access, topic string) (adm admin.Admin, done func(), err error) {
	adm, err = admin.NewAdmin(append(access.AdminOptions(), admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))...)
	if err != nil {
		return nil, nil, fmt.Errorf("scheduler: admin client: %w", err)
	}
	probingTopics.Store(topic, true)
	return adm, func() { probingTopics.Delete(topic); _ = adm.Close() }, nil
}

// EnsureTopic checks that the name servers know topic; when they do not and brokers are
// given, it creates the topic on each broker and waits until the route appears.
func EnsureTopic(ctx context.Context, nameServers []string, access wire.Access, topic string, brokers []string, logger *slog.Logger) error {
	return ensureTopic(ctx, nameServers, access, topic, topicQueues, brokers, logger)
}

// ensureRetryTopic creates the consumer group's retry topic (%RETRY%group, one queue, as
// the broker would) before the consumer starts, when the brokers are known. RocketMQ
// keeps a group's retries in that topic and the broker creates it at the group's first
// heartbeat, after the consumer has looked for its route; the client looks again only
// every 30s, so the first retry of a new group came back up to 50s late. Without
// rocketmq.brokers nothing is created, and the first retry of a new group may wait so.
func (s *Scheduler) ensureRetryTopic(ctx context.Context) error {
	if len(s.opts.Brokers) == 0 {
		return nil
	}
	return ensureTopic(ctx, s.opts.NameServers, s.opts.Access, consumerRetryTopic(s.opts.Group), 1, s.opts.Brokers, s.logger)
}

// consumerRetryTopic is the topic RocketMQ keeps a consumer group's retries in.
func consumerRetryTopic(group string) string { return "%RETRY%" + group }

// ensureTopic is EnsureTopic with the number of queues a created topic gets: returns at
// once when the name servers know topic; otherwise creates it on each of brokers (an
// error naming the mqadmin command when none are listed) and waits up to 30s for its
// route to appear.
func ensureTopic(ctx context.Context, nameServers []string, access wire.Access, topic string, queues int, brokers []string, logger *slog.Logger) error {
	adm, done, err := topicAdmin(nameServers, access, topic)
	if err != nil {
		return err
	}
	defer done()
	if _, err := adm.FetchPublishMessageQueues(ctx, topic); err == nil {
		return nil
	}
	if len(brokers) == 0 {
		return fmt.Errorf("scheduler: topic %q is unknown to the name servers %s: create it "+
			"(mqadmin updateTopic -n %s -c CLUSTER -t %s) or list the brokers in rocketmq.brokers "+
			"(ROCKETDELAY_BROKERS) so that rocketdelay creates it",
			topic, strings.Join(nameServers, ","), nameServers[0], topic)
	}
	if access.Signed() {
		// The pinned admin client signs its requests to brokers only once a call that
		// registers the signer has run (GetAllSubscriptionGroup does; CreateTopic does
		// not, and reports no refusal either): one such call first.
		if _, err := adm.GetAllSubscriptionGroup(ctx, brokers[0], 5*time.Second); err != nil {
			return fmt.Errorf("scheduler: broker %s refused rocketdelay's credentials (rocketmq.accessKey): %w", brokers[0], err)
		}
	}
	for _, b := range brokers {
		err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(queues), admin.WithWriteQueueNums(queues))
		if err != nil {
			return fmt.Errorf("scheduler: broker %s refused to create topic %q: %w", b, topic, err)
		}
		logger.Info("created topic", "topic", topic, "broker", b)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := adm.FetchPublishMessageQueues(ctx, topic); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			// The client does not read the broker's answer to a creation: a refusal (an
			// authenticating broker and no credentials, a broker that forbids it) looks
			// like this too.
			return fmt.Errorf("scheduler: topic %q was asked of %s but its route did not appear on the name servers "+
				"(a broker that authenticates clients refuses an unsigned creation: set rocketmq.accessKey and secretKey, "+
				"or create it: mqadmin updateTopic -n %s -c CLUSTER -t %s): %w",
				topic, strings.Join(brokers, ","), nameServers[0], topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// learnRoute sends one probe message to the topic through the hop producer before the
// consumer starts, so that the producer knows the topic's route, brokers' addresses
// included, before the consumer's goroutines publish hops at once. rocketmq-client-go
// shows a topic's new route to its producers before it records the brokers' addresses,
// and a send in between fails at once with "route info not found": without this, the
// first hops of a new replica went back to RocketMQ for a retry. The consumer drops the
// probe. A failure is only logged: a hop that fails is retried by RocketMQ.
func (s *Scheduler) learnRoute(ctx context.Context) {
	m := primitive.NewMessage(s.opts.Topic, []byte("rocketdelay route probe"))
	m.WithProperty(PropProbe, "route")
	sctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
	defer cancel()
	if _, err := s.broker.producer.SendSync(sctx, m); err != nil {
		s.logger.Warn("the route probe failed; hops that fail at first are retried by RocketMQ",
			"topic", s.opts.Topic, "err", err)
	}
}

// CheckGroup asks each broker whether it knows the consumer group. Brokers create a group
// on first use when their autoCreateSubscriptionGroup is on (the default); when it is off
// the consumer gets no messages, so a missing group is logged as a warning that says how
// to create it. It returns the brokers that do not know the group.
func CheckGroup(ctx context.Context, nameServers []string, access wire.Access, group string, brokers []string, logger *slog.Logger) ([]string, error) {
	adm, err := admin.NewAdmin(append(access.AdminOptions(), admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))...)
	if err != nil {
		return nil, fmt.Errorf("scheduler: admin client: %w", err)
	}
	defer adm.Close()
	var missing []string
	for _, b := range brokers {
		groups, err := adm.GetAllSubscriptionGroup(ctx, b, 5*time.Second)
		if err != nil {
			return nil, fmt.Errorf("scheduler: ask broker %s for its consumer groups: %w", b, err)
		}
		if _, ok := groups.SubscriptionGroupTable[group]; !ok {
			missing = append(missing, b)
			logger.Warn("the consumer group does not exist on a broker yet; the broker creates it on first use "+
				"if autoCreateSubscriptionGroup is on, otherwise create it (mqadmin updateSubGroup -g GROUP)",
				"group", group, "broker", b)
		}
	}
	return missing, nil
}

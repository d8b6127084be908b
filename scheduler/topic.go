package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/primitive"
)

// EnsureTopic checks that the name servers know topic; when they do not and brokers are
// given, it creates the topic on each broker and waits until the route appears.
func EnsureTopic(ctx context.Context, nameServers []string, topic string, brokers []string, logger *slog.Logger) error {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
	if err != nil {
		return fmt.Errorf("scheduler: admin client: %w", err)
	}
	defer adm.Close()
	// The client logs a missing route as an error; here it is what a first start finds.
	probingTopics.Store(topic, true)
	defer probingTopics.Delete(topic)
	if _, err := adm.FetchPublishMessageQueues(ctx, topic); err == nil {
		return nil
	}
	if len(brokers) == 0 {
		return fmt.Errorf("scheduler: topic %q is unknown to the name servers %s: create it "+
			"(mqadmin updateTopic -n %s -c CLUSTER -t %s) or list the brokers in rocketmq.brokers "+
			"(ROCKETDELAY_BROKERS) so that rocketdelay creates it",
			topic, strings.Join(nameServers, ","), nameServers[0], topic)
	}
	for _, b := range brokers {
		err := adm.CreateTopic(ctx, admin.WithTopicCreate(topic), admin.WithBrokerAddrCreate(b),
			admin.WithReadQueueNums(8), admin.WithWriteQueueNums(8))
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
			return fmt.Errorf("scheduler: topic %q created but its route did not appear on the name servers: %w", topic, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// CheckGroup asks each broker whether it knows the consumer group. Brokers create a group
// on first use when their autoCreateSubscriptionGroup is on (the default); when it is off
// the consumer gets no messages, so a missing group is logged as a warning that says how
// to create it. It returns the brokers that do not know the group.
func CheckGroup(ctx context.Context, nameServers []string, group string, brokers []string, logger *slog.Logger) ([]string, error) {
	adm, err := admin.NewAdmin(admin.WithResolver(primitive.NewPassthroughResolver(nameServers)))
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

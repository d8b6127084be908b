package topic_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/topic"
)

func TestResolve(t *testing.T) {
	open := topic.Target{Target: "orders", TopicTarget: config.TopicTarget{Name: "order-events", Tag: "delayed",
		AllowOverride: true, AllowTopics: []string{"order-audit"}}}
	strict := topic.Target{Target: "strict", TopicTarget: config.TopicTarget{Name: "order-events"}}
	published := map[string]string{
		"TAGS": "close", "KEYS": "order-1 shop-9", "shop": "eu-1", "UNIQ_KEY": "AC11000100002A9F0000000000000001",
		"RD_TARGET": "orders", "RD_DELIVER_AT_MS": "1772366400000", "RD_HOPS": "3", "DELAY": "4", "REAL_TOPIC": "guava",
	}
	for _, c := range []struct {
		name   string
		target topic.Target
		props  map[string]string
		want   topic.Destination
		err    string
	}{
		{name: "the producer's tag, keys and properties pass through; RD_ID is added as property and key", target: strict,
			props: published, want: topic.Destination{Topic: "order-events", Tag: "close", Keys: []string{"order-1", "shop-9", "id-1"},
				Properties: map[string]string{"shop": "eu-1", "RD_ID": "id-1"}}},
		{name: "the target's tag when the message has none", target: open, props: map[string]string{"KEYS": "id-1"},
			want: topic.Destination{Topic: "order-events", Tag: "delayed", Keys: []string{"id-1"}, Properties: map[string]string{"RD_ID": "id-1"}}},
		{name: "overrides win", target: open,
			props: map[string]string{"TAGS": "close", "KEYS": "a", "RD_TOPIC": "order-audit", "RD_TAG": "audit", "RD_KEYS": "x y"},
			want:  topic.Destination{Topic: "order-audit", Tag: "audit", Keys: []string{"x", "y", "id-1"}, Properties: map[string]string{"RD_ID": "id-1"}}},
		{name: "the target's own topic may be named", target: open, props: map[string]string{"RD_TOPIC": "order-events"},
			want: topic.Destination{Topic: "order-events", Tag: "delayed", Keys: []string{"id-1"}, Properties: map[string]string{"RD_ID": "id-1"}}},
		{name: "a topic outside the allowlist", target: open, props: map[string]string{"RD_TOPIC": "payments"},
			err: `RD_TOPIC="payments" is not a topic target "orders" may deliver to (allowed: order-events, order-audit)`},
		{name: "no overrides without allowOverride", target: strict, props: map[string]string{"RD_TAG": "x"},
			err: `target "strict" does not let a message choose its destination (RD_TAG is set`},
		{name: "a tag with a separator", target: open, props: map[string]string{"RD_TAG": "a||b"}, err: `RD_TAG="a||b" is not a valid tag`},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.target.Resolve("id-1", c.props)
			if c.err != "" {
				require.ErrorContains(t, err, c.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestTargetsOfAConfig(t *testing.T) {
	c := config.Config{Targets: map[string]config.Target{
		"ops":    {Robots: []config.Robot{{Name: "r1"}}},
		"orders": {Topic: &config.TopicTarget{Name: "order-events"}},
	}}
	got := topic.Targets(c)
	require.Equal(t, map[string]topic.Target{"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: "order-events"}}}, got)
	require.Equal(t, "topic order-events, tag x", topic.Destination{Topic: "order-events", Tag: "x"}.String())
}

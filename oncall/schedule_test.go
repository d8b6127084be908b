package oncall

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

func TestSchedule(t *testing.T) {
	step := func(after time.Duration, target string) config.EscalationStep {
		return config.EscalationStep{After: after, Target: target}
	}
	three := []config.EscalationStep{step(0, "ding"), step(10*time.Minute, "fei"), step(30*time.Minute, "wecom")}
	type entry struct {
		offset time.Duration
		target string
	}
	for _, tc := range []struct {
		name   string
		policy config.Policy
		want   []entry // every entry, in order; the one after the last is not ok
	}{
		{"steps only", config.Policy{Steps: three},
			[]entry{{0, "ding"}, {10 * time.Minute, "fei"}, {30 * time.Minute, "wecom"}}},
		{"repeats growing twofold", config.Policy{Steps: three, Repeat: &config.Repeat{Every: 15 * time.Minute, Growth: 2, Limit: 3}},
			[]entry{{0, "ding"}, {10 * time.Minute, "fei"}, {30 * time.Minute, "wecom"},
				{45 * time.Minute, "wecom"}, {75 * time.Minute, "wecom"}, {135 * time.Minute, "wecom"}}},
		{"repeats growing by half", config.Policy{Steps: three[:1], Repeat: &config.Repeat{Every: 10 * time.Minute, Growth: 1.5, Limit: 3}},
			[]entry{{0, "ding"}, {10 * time.Minute, "ding"}, {25 * time.Minute, "ding"}, {47*time.Minute + 30*time.Second, "ding"}}},
		{"even repeats by default, three of them", config.Policy{Steps: []config.EscalationStep{step(5*time.Minute, "ding")},
			Repeat: &config.Repeat{Every: 10 * time.Minute}},
			[]entry{{5 * time.Minute, "ding"}, {15 * time.Minute, "ding"}, {25 * time.Minute, "ding"}, {35 * time.Minute, "ding"}}},
		{"a repeat without steps repeats nothing", config.Policy{Repeat: &config.Repeat{Every: time.Minute}}, nil},
		{"offsets saturate rather than overflow", config.Policy{Steps: []config.EscalationStep{step(time.Hour, "ding")},
			Repeat: &config.Repeat{Every: math.MaxInt64 / 2, Limit: 2}},
			[]entry{{time.Hour, "ding"}, {time.Hour + math.MaxInt64/2, "ding"}, {math.MaxInt64, "ding"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := NewSchedule(tc.policy)
			require.Equal(t, len(tc.want), s.Len())
			for k, want := range tc.want {
				offset, st, ok := s.At(k)
				require.True(t, ok, "entry %d", k)
				require.Equal(t, want.offset, offset, "entry %d", k)
				require.Equal(t, want.target, st.Target, "entry %d", k)
			}
			_, _, ok := s.At(len(tc.want))
			require.False(t, ok, "no entry past the last")
			_, _, ok = s.At(-1)
			require.False(t, ok)
		})
	}
}

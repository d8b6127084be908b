package chaos

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestJudgeDuplicates: an extra copy of an alert is excused only by an earlier copy whose
// own request a fault or a timeout can have left without its release, one extra per such
// copy. The rule before it (every extra copy of an alert whose first acceptance fell
// within 2s of any fault, on any replica) excused three of the unexplained cases below:
// the copy answered 1.5s before the kill, the other replica's, and the second extra.
func TestJudgeDuplicates(t *testing.T) {
	k := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC) // the fault strikes
	ms := func(d int) time.Time { return k.Add(time.Duration(d) * time.Millisecond) }
	kill := fault{what: "sigkill", instance: "r0-1", start: k, end: ms(20)}
	freeze := fault{what: "sigstop", instance: "r0-1", start: k, end: ms(9000)} // resumed at +9s
	redis := fault{what: "redis sigkill", start: k, end: ms(3000), lost: redisLostWrites}
	by := func(instance string, sent, answered int) acceptance {
		return acceptance{at: ms(answered), instance: instance, sent: ms(sent), answered: ms(answered)}
	}
	stored := func(instance string, at int) acceptance {
		return acceptance{at: ms(at), instance: instance, sent: ms(at), answered: ms(at), stored: true}
	}
	later := by("r1-2", 6000, 6010) // the copy sent again by the other replica

	for _, c := range []struct {
		name   string
		faults []fault
		copies []acceptance
		want   ambiguity
	}{
		{"answered 300ms before its replica was killed", []fault{kill}, []acceptance{by("r0-1", -310, -300), later},
			ambiguity{crash: 1, crashBound: 1}},
		{"on the wire when its replica was killed", []fault{kill}, []acceptance{by("r0-1", -10, 5), later},
			ambiguity{crash: 1, crashBound: 1}},
		{"answered 1.5s before the kill: its release had landed", []fault{kill}, []acceptance{by("r0-1", -1510, -1500), later},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"on the wire when the other replica was killed", []fault{kill}, []acceptance{by("r1-2", -10, 5), later},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"one ambiguous copy excuses one extra, not two", []fault{kill}, []acceptance{by("r0-1", -10, 5), later, by("r1-2", 7000, 7010)},
			ambiguity{crash: 1, unexplained: 1, crashBound: 1, unexplainedIDs: []string{"a"}}},
		{"accepted in a request the sender gave up on", nil,
			[]acceptance{{at: ms(0), instance: "r1-2", sent: ms(-3000), answered: ms(1), abandoned: true}, later},
			ambiguity{timeout: 1, timeoutBound: 1}},
		{"one abandoned request excuses one extra, not two", nil,
			[]acceptance{{at: ms(0), instance: "r1-2", sent: ms(-3000), answered: ms(1), abandoned: true}, later, by("r1-2", 7000, 7010)},
			ambiguity{timeout: 1, unexplained: 1, timeoutBound: 1, unexplainedIDs: []string{"a"}}},
		{"on the wire when its replica froze", []fault{freeze}, []acceptance{by("r0-1", -5, 700), later},
			ambiguity{crash: 1, crashBound: 1}},
		{"sent by the frozen replica after it woke", []fault{freeze}, []acceptance{by("r1-2", 6000, 6010), by("r0-1", 9100, 9110)},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"released 2.5s before Redis was killed: in its lost writes", []fault{redis}, []acceptance{by("r1-2", -2510, -2500), later},
			ambiguity{crash: 1, crashBound: 1}},
		{"released 3.5s before Redis was killed: kept", []fault{redis}, []acceptance{by("r1-2", -3510, -3500), later},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"stored by the broker 500ms before its replica was killed", []fault{kill}, []acceptance{stored("r0-1", -500), stored("r1-2", 6000)},
			ambiguity{crash: 1, crashBound: 1}},
		{"stored by the broker just after its replica was reaped", []fault{kill}, []acceptance{stored("r0-1", 300), stored("r1-2", 6000)},
			ambiguity{crash: 1, crashBound: 1}},
		{"stored by the broker from an unknown replica at the kill", []fault{kill}, []acceptance{stored("", -500), stored("r1-2", 6000)},
			ambiguity{crash: 1, crashBound: 1}},
		{"stored by the broker from the other replica at the kill", []fault{kill}, []acceptance{stored("r1-2", -500), stored("r1-2", 6000)},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"stored by the broker 3s before its replica was killed", []fault{kill}, []acceptance{stored("r0-1", -3000), stored("r1-2", 6000)},
			ambiguity{unexplained: 1, unexplainedIDs: []string{"a"}}},
		{"no fault: a single copy", nil, []acceptance{by("r0-1", -10, 5)}, ambiguity{}},
		{"a fault without a duplicate still counts in the bound", []fault{kill}, []acceptance{by("r0-1", -10, 5)},
			ambiguity{crashBound: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, judge(map[string][]acceptance{"a": c.copies}, c.faults))
		})
	}
}

// TestRateOf: a run of stored messages is over the rate when it holds more than the
// burst plus the rate over its span and the slack.
func TestRateOf(t *testing.T) {
	at := func(ms ...int) []time.Time {
		var out []time.Time
		for _, m := range ms {
			out = append(out, time.UnixMilli(int64(m)))
		}
		return out
	}
	var even []int // exactly the rate: one every 25ms for 4s
	for i := range 4 * topicRate {
		even = append(even, i*1000/topicRate)
	}
	peak, worst := rateOf(at(even...))
	require.Equal(t, topicRate, peak)
	require.Zero(t, worst.n)

	var twice []int // twice the rate for 4s: past burst + rate × (span + slack) after about 1.1s
	for i := range 8 * topicRate {
		twice = append(twice, i*1000/(2*topicRate))
	}
	peak, worst = rateOf(at(twice...))
	require.Equal(t, 2*topicRate, peak)
	require.Equal(t, 8*topicRate, worst.n, "the whole run is the furthest past the rate")

	burst := make([]int, topicBurst+topicRate) // one burst plus a slack's worth at once: within
	peak, worst = rateOf(at(burst...))
	require.Equal(t, len(burst), peak)
	require.Zero(t, worst.n)
	peak, worst = rateOf(at(append(burst, 0)...)) // one more
	require.Equal(t, len(burst)+1, peak)
	require.Equal(t, len(burst)+1, worst.n)
}

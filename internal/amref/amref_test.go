package amref

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The cases of Alertmanager's contract the service is held to, each a timeline of the
// group's alerts flushed after every event: what a single healthy Alertmanager sends.
func TestModel(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	type event struct {
		at      int
		fire    string // a fingerprint that fires (starting then, unless it fires already)
		resolve string // a fingerprint that resolves
	}
	for _, c := range []struct {
		name         string
		sendResolved bool
		events       []event
		want         []string // each notification: its reason
	}{
		{"flapping", true, []event{{at: 0, fire: "a"}, {at: 10, resolve: "a"}, {at: 22, fire: "a"}},
			[]string{"first", "all resolved", "new firing"}},
		{"flapping without send_resolved", false, []event{{at: 0, fire: "a"}, {at: 10, resolve: "a"}, {at: 22, fire: "a"}},
			[]string{"first", "new firing"}},
		{"grows and shrinks", true, []event{{at: 0, fire: "a"}, {at: 5, fire: "b"}, {at: 10, resolve: "b"}, {at: 15, fire: "b"}},
			[]string{"first", "new firing", "new resolved", "new firing"}},
		{"shrinks without send_resolved", false, []event{{at: 0, fire: "a"}, {at: 5, fire: "b"}, {at: 10, resolve: "b"}, {at: 15, fire: "b"}},
			[]string{"first", "new firing"}}, // b's second start is in the set last logged
		{"repeat", true, []event{{at: 0, fire: "a"}, {at: 30}, {at: 61}, {at: 90}, {at: 122}},
			[]string{"first", "repeat", "repeat"}},
		{"a re-sent firing keeps its start", true, []event{{at: 0, fire: "a"}, {at: 5, fire: "a"}},
			[]string{"first"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := New(c.sendResolved, time.Minute)
			var got []string
			for _, e := range c.events {
				now := at(e.at)
				if e.fire != "" {
					m.Fire(e.fire, now, now)
				}
				if e.resolve != "" {
					m.Resolve(e.resolve, now)
				}
				if n, ok := m.Flush(now); ok {
					got = append(got, n.Reason)
				}
			}
			require.Equal(t, c.want, got)
		})
	}
	m := New(true, time.Hour)
	m.Fire("a", at(0), at(0))
	m.Fire("a", at(5), at(5))
	require.Equal(t, []Alert{{Fingerprint: "a", StartsAt: at(0)}}, m.Firing(at(5)), "a re-sent firing keeps its start")
}

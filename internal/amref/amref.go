// Package amref is a reference model of when Alertmanager notifies a receiver about one
// aggregation group: the dispatcher's flush of the group and the DedupStage's
// needsUpdate over the notification log, as Alertmanager's dispatch and notify packages
// define them. Tests hold what rocketdelay delivers against what this model says a single
// healthy Alertmanager sends: each of its notifications once, nothing else.
//
// It is a model, not a client: no I/O, no clock of its own (every call takes the time),
// and the service never links it.
package amref

import (
	"maps"
	"slices"
	"time"
)

// Alert is one alert of the group: its fingerprint (its labels) and its episode, which
// starts at StartsAt (Prometheus's) and has ended when EndsAt is set.
type Alert struct {
	Fingerprint string
	StartsAt    time.Time
	EndsAt      time.Time
}

// Resolved reports whether the alert had ended at now.
func (a Alert) Resolved(now time.Time) bool { return !a.EndsAt.IsZero() && !a.EndsAt.After(now) }

// Notification is what the receiver is sent: the group's firing alerts and, with
// send_resolved, its resolved ones, sorted by fingerprint.
type Notification struct {
	At       time.Time
	Firing   []Alert
	Resolved []Alert
	// Reason is needsUpdate's: "first", "new firing", "all resolved", "new resolved" or
	// "repeat".
	Reason string
}

// Status is the notification's status as Alertmanager's webhook sends it: "firing" while
// an alert fires, else "resolved".
func (n Notification) Status() string {
	if len(n.Firing) > 0 {
		return "firing"
	}
	return "resolved"
}

// Model is one aggregation group at one receiver. The zero value is not ready: use New.
type Model struct {
	sendResolved bool
	repeat       time.Duration
	group        map[string]Alert // the aggregation group's alerts, by fingerprint
	log          *entry           // the notification log's last entry; nil before any
}

// entry is a notification log entry: the sets the last notification was decided on.
type entry struct {
	firing, resolved map[string]bool
	at               time.Time
}

// New returns an empty group whose receiver has send_resolved sendResolved and whose
// route has repeat_interval repeat.
func New(sendResolved bool, repeat time.Duration) *Model {
	return &Model{sendResolved: sendResolved, repeat: repeat, group: map[string]Alert{}}
}

// Fire is the alert fp received as firing, started at startsAt: a new alert, or a new
// episode of one that has resolved; an alert that fires keeps its start (Alertmanager
// merges a re-sent alert into the one it holds).
func (m *Model) Fire(fp string, startsAt, now time.Time) {
	if a, ok := m.group[fp]; ok && !a.Resolved(now) {
		a.EndsAt = time.Time{}
		m.group[fp] = a
		return
	}
	m.group[fp] = Alert{Fingerprint: fp, StartsAt: startsAt}
}

// Resolve is the alert fp received as resolved at at (or resolved by Alertmanager's own
// resolve_timeout at at); an alert not in the group is ignored.
func (m *Model) Resolve(fp string, at time.Time) {
	if a, ok := m.group[fp]; ok && a.EndsAt.IsZero() {
		a.EndsAt = at
		m.group[fp] = a
	}
}

// Firing returns the alerts firing at now, sorted by fingerprint.
func (m *Model) Firing(now time.Time) []Alert {
	var out []Alert
	for _, a := range m.sorted() {
		if !a.Resolved(now) {
			out = append(out, a)
		}
	}
	return out
}

// Flush is the group's flush at now (every group_interval): the notification the
// receiver is sent, if any. As Alertmanager does, the decision is logged even when
// nothing is sent (resolved alerts only, without send_resolved), and the resolved
// alerts leave the group after the flush.
func (m *Model) Flush(now time.Time) (Notification, bool) {
	if len(m.group) == 0 {
		return Notification{}, false // an empty group is gone: no flush
	}
	n := Notification{At: now}
	firing, resolved := map[string]bool{}, map[string]bool{}
	var ended []string
	for _, a := range m.sorted() {
		if a.Resolved(now) {
			resolved[a.Fingerprint] = true
			ended = append(ended, a.Fingerprint)
			if m.sendResolved {
				n.Resolved = append(n.Resolved, a)
			}
			continue
		}
		firing[a.Fingerprint] = true
		n.Firing = append(n.Firing, a)
	}
	n.Reason = m.needsUpdate(firing, resolved, now)
	sent := false
	if n.Reason != "" {
		m.log = &entry{firing: firing, resolved: resolved, at: now}
		sent = len(n.Firing) > 0 || m.sendResolved
	}
	for _, fp := range ended {
		delete(m.group, fp)
	}
	return n, sent
}

// needsUpdate is Alertmanager's DedupStage.needsUpdate: the reason to notify, "" for
// none.
func (m *Model) needsUpdate(firing, resolved map[string]bool, now time.Time) string {
	switch {
	case m.log == nil:
		if len(firing) > 0 {
			return "first"
		}
		return ""
	case !subset(firing, m.log.firing):
		return "new firing"
	case len(firing) == 0:
		if len(m.log.firing) > 0 {
			return "all resolved"
		}
		return ""
	case m.sendResolved && !subset(resolved, m.log.resolved):
		return "new resolved"
	case m.log.at.Before(now.Add(-m.repeat)):
		return "repeat"
	}
	return ""
}

// subset reports whether every member of a is in b.
func subset(a, b map[string]bool) bool {
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

func (m *Model) sorted() []Alert {
	out := make([]Alert, 0, len(m.group))
	for _, fp := range slices.Sorted(maps.Keys(m.group)) {
		out = append(out, m.group[fp])
	}
	return out
}

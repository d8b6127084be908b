package escalation

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/rocketdelay/rocketdelay/oncall"
	"github.com/rocketdelay/rocketdelay/store"
)

// Status is an episode as the API, the commands and the console show it.
type Status struct {
	store.Episode
	// Content is what its steps say.
	Content Content `json:"content"`
	// Steps is the length of its policy's schedule (steps and repeats).
	Steps int `json:"steps"`
	// Next is the number (from 1) of the next step while the episode runs, 0 when none
	// is left; NextTarget is its target and NextDue when it falls due.
	Next       int       `json:"next,omitempty"`
	NextTarget string    `json:"nextTarget,omitempty"`
	NextDue    time.Time `json:"nextDue,omitzero"`
}

// Status returns the episode of key; store.ErrNoEpisode when there is none.
func (e *Escalator) Status(ctx context.Context, key string) (Status, error) {
	ep, err := e.episodes.Get(ctx, key)
	if err != nil {
		return Status{}, err
	}
	s := Status{Episode: ep}
	_ = json.Unmarshal(ep.Content, &s.Content)
	if p, ok := e.policyOf(ep); ok {
		sched := oncall.NewSchedule(p)
		s.Steps = sched.Len()
		if offset, step, ok := sched.At(ep.Step); ok && ep.State == store.EpisodePending {
			s.Next, s.NextTarget, s.NextDue = ep.Step+1, step.Target, ep.Started.Add(offset)
		}
	}
	return s, nil
}

// Live returns the episodes not resolved (running or acknowledged), the oldest first, at
// most limit.
func (e *Escalator) Live(ctx context.Context, limit int) ([]Status, error) {
	keys, err := e.episodes.Live(ctx, limit)
	if err != nil {
		return nil, err
	}
	out := make([]Status, 0, len(keys))
	for _, key := range keys {
		s, err := e.Status(ctx, key)
		if errors.Is(err, store.ErrNoEpisode) {
			continue // ended and gone between the two reads
		}
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

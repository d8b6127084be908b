package sender

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// RobotStatus is one configured robot's state in the shared pool, for operators
// (`rocketdelay robots`).
type RobotStatus struct {
	Target string `json:"target"`
	// Kind is the target's platform (dingtalk, wecom, feishu).
	Kind  string `json:"kind"`
	Robot string `json:"robot"`
	// Limit is its configured limit per window; LearnedLimit the lower one learned from
	// the platform's throttles (0 when none).
	Limit        int `json:"limit"`
	LearnedLimit int `json:"learnedLimit,omitempty"`
	// InWindow counts its sends in the current window.
	InWindow      int        `json:"inWindow"`
	CoolingUntil  *time.Time `json:"coolingUntil,omitempty"`
	Disabled      bool       `json:"disabled"`
	DisabledUntil *time.Time `json:"disabledUntil,omitempty"`
	// InDoubt reports that it was throttled and has not answered since.
	InDoubt bool `json:"inDoubt"`
	// Proven reports that it took its configured limit in one window lately; a robot
	// neither proven nor learned is approached one at a time (a scout).
	Proven bool `json:"proven"`
}

// RobotStatuses returns the state of every robot of targets (by target name, then in
// configuration order) in pool; a robot's Limit of 0 stands for limit.
func RobotStatuses(ctx context.Context, pool *store.RobotPool, targets map[string]Target, limit int) ([]RobotStatus, error) {
	var out []RobotStatus
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range targets {
			if !yield(n) {
				return
			}
		}
	}) {
		robots := targets[name].Robots
		names := make([]string, len(robots))
		for i, r := range robots {
			names[i] = r.Name
		}
		states, err := pool.State(ctx, name, names)
		if err != nil {
			return nil, err
		}
		for i, st := range states {
			row := RobotStatus{Target: name, Kind: targets[name].Protocol.Kind(), Robot: st.Name, Limit: robots[i].Limit, LearnedLimit: st.LearnedLimit,
				InWindow: st.InWindow, Disabled: st.Disabled, InDoubt: st.InDoubt, Proven: st.Proven}
			if row.Limit == 0 {
				row.Limit = limit
			}
			if !st.CoolingUntil.IsZero() {
				row.CoolingUntil = &st.CoolingUntil
			}
			if !st.DisabledUntil.IsZero() {
				row.DisabledUntil = &st.DisabledUntil
			}
			out = append(out, row)
		}
	}
	return out, nil
}

// WriteRobotStatuses prints rows as a table: target, robot, configured and learned limit,
// sends in the window, cool-down, disable, doubt, proven.
func WriteRobotStatuses(w io.Writer, rows []RobotStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TARGET\tKIND\tROBOT\tLIMIT\tLEARNED\tIN WINDOW\tCOOLING UNTIL\tDISABLED\tIN DOUBT\tPROVEN")
	for _, r := range rows {
		learned, cooling, disabled := "-", "-", "no"
		if r.LearnedLimit > 0 {
			learned = fmt.Sprint(r.LearnedLimit)
		}
		if r.CoolingUntil != nil {
			cooling = r.CoolingUntil.UTC().Format(time.RFC3339)
		}
		switch {
		case r.DisabledUntil != nil:
			disabled = "until " + r.DisabledUntil.UTC().Format(time.RFC3339)
		case r.Disabled:
			disabled = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\t%t\t%t\n", r.Target, r.Kind, r.Robot, r.Limit, learned, r.InWindow, cooling, disabled, r.InDoubt, r.Proven)
	}
	return tw.Flush()
}

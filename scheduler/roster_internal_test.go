package scheduler

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// affirms counts a roster's affirmations.
type affirms struct{ n atomic.Int32 }

func (a *affirms) Affirm(context.Context, []string) error { a.n.Add(1); return nil }
func (a *affirms) Known(context.Context, string) (time.Duration, bool, error) {
	return 0, false, nil
}

// A replica says which targets it has four times within the least unknownTargetWait any
// replica may have, whatever its own: a replica of a rollout configured with the least
// judges the others by it, and one that said so only every quarter of its own (longer)
// wait was taken for gone between two of its sayings, its alerts rejected as unknown.
func TestTheRosterIsAffirmedWithinTheLeastWaitOfAnyReplica(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		roster := &affirms{}
		s := &Scheduler{opts: Options{Roster: roster, Targets: []string{"ops"}, UnknownTargetWait: 2 * time.Minute},
			logger: discardLogger()}
		ctx, cancel := context.WithCancel(t.Context())
		s.life.loops.Add(1)
		go s.rosterLoop(ctx)
		time.Sleep(config.MinUnknownTargetWait)
		synctest.Wait()
		require.GreaterOrEqual(t, roster.n.Load(), int32(4), "affirmed within %s", config.MinUnknownTargetWait)
		cancel()
		s.life.loops.Wait()
	})
}

package app

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestRetryJobUsesSchedulerRid: the retry job claims its rows as its replica, under the
// id the scheduler beats with, so that a survivor can release them once that replica
// departs: while the retry job of the only replica sends a row (its robot answers
// slowly), the row's claim names the replica that is live in the wheel stage.
func TestRetryJobUsesSchedulerRid(t *testing.T) {
	const token = "tok-rid-7d1e"
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: token}}})
	require.NoError(t, sim.Inject(token, chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 3 * time.Second}))
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: token}}}}
	cfg.Sender.BaseURL = simURL
	ctx := context.Background()
	pool, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pool.Close()
	res, err := store.NewFailedSends(pool, store.FailedSendsOptions{}).Record(ctx, store.NewFailedSend{MessageID: "rid-1",
		Target: "ops", Payload: []byte("retried"), ErrorClass: "transient", NextAttemptAt: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	require.Equal(t, store.RecordInserted, res)

	startReplica(t, cfg)
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	live, err := rdb.ZRange(ctx, "{"+cfg.Redis.KeyPrefix+"}:live", 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, live, 1)
	var claimedBy, replica *string
	require.Eventually(t, func() bool {
		err := pool.QueryRow(ctx, `SELECT claimed_by, claimed_replica FROM failed_sends WHERE message_id = 'rid-1'`).
			Scan(&claimedBy, &replica)
		require.NoError(t, err)
		return claimedBy != nil
	}, 30*time.Second, 20*time.Millisecond, "the retry job never claimed the row")
	require.True(t, strings.HasPrefix(*claimedBy, live[0]+"/"), "claim %s is not the replica %s's", *claimedBy, live[0])
	require.Equal(t, live[0], *replica)
	require.Eventually(t, func() bool { return len(sim.Accepted()) == 1 }, 30*time.Second, 20*time.Millisecond)
}

package bench

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
)

// commandCallsByName reads the calls and the time of every cmdstat line and nothing else.
func TestCommandCallsByName(t *testing.T) {
	calls, err := commandCallsByName("# Commandstats\r\n" +
		"cmdstat_evalsha:calls=12,usec=340,usec_per_call=28.33,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_zadd:calls=30,usec=60,usec_per_call=2.00,rejected_calls=0,failed_calls=0\r\n" +
		"errorstat_ERR:count=3\r\n")
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"evalsha": 12, "evalsha" + usecSuffix: 340, "zadd": 30, "zadd" + usecSuffix: 60}, calls)
	require.EqualValues(t, 42, sumCalls(calls))
	_, err = commandCallsByName("cmdstat_get:calls=x,usec=1\r\n")
	require.ErrorContains(t, err, "cmdstat_get:calls=x")
}

// stageMemory counts the keys of every shard's tag and not the robot pools'; the command
// counts grow by at least what was sent (ROCKETDELAY_TEST_REDIS=cluster runs it on the
// local Redis Cluster, whose primaries are counted apart).
func TestStageMemoryAndCommandCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	before, err := commandCounts(ctx, rdb)
	require.NoError(t, err)
	require.NotEmpty(t, before)

	stage := []string{"{" + prefix + "}:done:a", "{" + prefix + "/1}:done:b", "{" + prefix + "/2}:trace:c"}
	for _, k := range stage {
		require.NoError(t, rdb.Set(ctx, k, "1", 0).Err())
	}
	require.NoError(t, rdb.Set(ctx, "{"+prefix+":ops}:cool", "not the stage's", 0).Err())
	var want int64
	for _, k := range stage {
		n, err := rdb.MemoryUsage(ctx, k, 0).Result()
		require.NoError(t, err)
		want += n
	}
	mem, err := stageMemory(ctx, rdb, prefix)
	require.NoError(t, err)
	var got int64
	var shards int
	for _, m := range mem {
		got += m.memory
		shards += m.shards
	}
	require.Equal(t, want, got)
	require.Equal(t, 3, shards, "{p}, {p/1} and {p/2}")

	after, err := commandCounts(ctx, rdb)
	require.NoError(t, err)
	loads := primaryLoads(before, after, mem)
	require.Len(t, loads, len(after))
	var served int64
	for _, l := range loads {
		served += l.commands
	}
	require.GreaterOrEqual(t, served, int64(2*len(stage)+1), "the SETs and MEMORY USAGEs at least")
}

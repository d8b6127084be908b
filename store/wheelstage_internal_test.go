package store

import (
	"errors"
	"hash/fnv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// The entry record survives every value, and a damaged record is an error, never a panic.
func TestWheelEntryRecord(t *testing.T) {
	e := Entry{
		ID:     "x",
		Target: "t",
		DueAt:  time.UnixMilli(1_733_131_234_567),
		Body:   []byte("\x00body\xff"),
		Props:  map[string]string{"b": "2", "a": "1", "": ""},
		Hops:   300,
	}
	rec := encodeWheelEntry(e)
	got, err := decodeWheelEntry("x", rec)
	require.NoError(t, err)
	require.Equal(t, e.Props, got.Props)
	require.Equal(t, e.Body, got.Body)
	require.True(t, e.DueAt.Equal(got.DueAt))
	require.Equal(t, e.Hops, got.Hops)
	require.Equal(t, e.Target, got.Target)
	require.Equal(t, rec, encodeWheelEntry(e), "deterministic")

	for n := range len(rec) - len(e.Body) {
		_, err := decodeWheelEntry("x", rec[:n])
		require.True(t, errors.Is(err, errWheelEntryCorrupt), "cut at %d: %v", n, err)
	}
	_, err = decodeWheelEntry("x", append([]byte{9}, rec[1:]...))
	require.ErrorIs(t, err, errWheelEntryCorrupt)
}

func FuzzDecodeWheelEntry(f *testing.F) {
	f.Add(encodeWheelEntry(Entry{Target: "t", Body: []byte("b"), Props: map[string]string{"k": "v"}}))
	f.Add([]byte{1, 0, 0, 0, 200, 1})
	f.Fuzz(func(t *testing.T, rec []byte) {
		e, err := decodeWheelEntry("id", rec)
		if err != nil {
			return
		}
		again, err := decodeWheelEntry("id", encodeWheelEntry(e))
		require.NoError(t, err)
		require.Equal(t, e.Target, again.Target)
		require.Equal(t, e.Props, again.Props)
	})
}

func TestWheelStageOptionsFromConfigShards(t *testing.T) {
	c := config.Config{Redis: config.Redis{Durability: config.DurabilityWrite, Shards: 4}}
	require.Equal(t, 4, WheelStageOptionsFromConfig(c).Shards)
	require.Equal(t, 1, WheelStageOptions{}.withDefaults().Shards)
	require.Equal(t, 1, WheelStageOptions{Shards: -3}.withDefaults().Shards)
}

func TestShardIndexIsStable(t *testing.T) {
	for _, id := range []string{"", "a", "alert-1", "日本", "{p}"} {
		h := fnv.New32a()
		h.Write([]byte(id))
		for _, n := range []int{2, 3, 7, 1024} {
			require.Equal(t, int(h.Sum32()%uint32(n)), shardIndex(id, n), "%q of %d", id, n)
		}
		require.Zero(t, shardIndex(id, 1))
	}
}

package store

import (
	"errors"
	"hash/fnv"
	"strconv"
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

// slot is Redis Cluster's: CRC16-XMODEM mod 16384 (Redis's cluster spec gives
// "123456789" → 0x31C3), of the hash tag.
func TestSlot(t *testing.T) {
	require.Equal(t, 0x31C3, slot("123456789"))
	require.Equal(t, 0x31C3%clusterSlots, slot("123456789"))
	require.Equal(t, 0, slot(""))
}

// ShardTag places shard i of n about i/n of the way round the slot ring from shard 0's
// slot, so that a cluster whose primaries own three equal ranges gets one of three shards
// each, whatever the prefix; shard 0's tag is the prefix, and the tags are the same at
// every call.
func TestShardTagsSpreadOverTheSlots(t *testing.T) {
	ranges := []int{0, 5461, 10923, clusterSlots} // redis-cli --cluster create with three primaries
	primary := func(s int) int {
		for p := range 3 {
			if s < ranges[p+1] {
				return p
			}
		}
		return -1
	}
	apart := 0
	for k := range 200 {
		prefix := "rd" + strconv.Itoa(k)
		require.Equal(t, prefix, ShardTag(prefix, 0, 3))
		seen := map[int]bool{}
		for i := range 3 {
			tag := ShardTag(prefix, i, 3)
			require.Equal(t, tag, ShardTag(prefix, i, 3))
			off := (slot(tag) - slot(prefix) + clusterSlots) % clusterSlots
			require.GreaterOrEqual(t, off, i*clusterSlots/3, "%s shard %d", prefix, i)
			require.Less(t, off, i*clusterSlots/3+clusterSlots/3/32+1, "%s shard %d", prefix, i)
			seen[primary(slot(tag))] = true
		}
		if len(seen) == 3 {
			apart++
		}
	}
	// By chance, three tags land on three primaries 2 times in 9; spread, but for a shard
	// 0 within a 32nd of a range's end, always.
	require.GreaterOrEqual(t, apart, 180, "prefixes whose 3 shards sit on 3 primaries, of 200")
	for _, n := range []int{2, 16, 1024} {
		for i := 1; i < n; i += max(n/16, 1) {
			off := (slot(ShardTag("rd", i, n)) - slot("rd") + clusterSlots) % clusterSlots
			require.Less(t, off-i*clusterSlots/n, max(clusterSlots/n/32, 4), "shard %d of %d", i, n)
		}
	}
}

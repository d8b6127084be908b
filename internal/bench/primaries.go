package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// primaryLoad is what one Redis primary did for a run of the scale benchmark.
type primaryLoad struct {
	addr string
	// commands is the commands it served during the run: the growth of the calls of its
	// INFO commandstats, which count every command a script runs besides the script
	// itself (and whatever other clients sent meanwhile).
	commands int64
	// memory is the MEMORY USAGE of the run's wheel-stage keys on it at the end of the run,
	// in bytes.
	memory int64
	// shards is how many of the stage's shards have keys on it (the hash tags seen).
	shards int
}

// forEachPrimary calls fn, at once for every primary, with each primary of rdb and its
// address: every master of a Redis Cluster, or rdb itself, whose address is the one its
// connection reached (CLIENT INFO's laddr; through Sentinel, the primary of the moment).
func forEachPrimary(ctx context.Context, rdb redis.UniversalClient, fn func(ctx context.Context, addr string, c redis.Cmdable) error) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return fn(ctx, node.Options().Addr, node)
		})
	}
	addr := "primary"
	if info, err := rdb.ClientInfo(ctx).Result(); err == nil && info.LAddr != "" {
		addr = info.LAddr
	}
	return fn(ctx, addr, rdb)
}

// commandCounts returns the commands each primary of rdb has served since it started
// (or since CONFIG RESETSTAT): the sum of the calls of its INFO commandstats.
func commandCounts(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	stats, err := commandStats(ctx, rdb)
	counts := map[string]int64{}
	for addr, byName := range stats {
		counts[addr] = sumCalls(byName)
	}
	return counts, err
}

// commandsByName returns the calls of each command (and their time, commandCallsByName)
// summed over every primary of rdb.
func commandsByName(ctx context.Context, rdb redis.UniversalClient) (map[string]int64, error) {
	stats, err := commandStats(ctx, rdb)
	calls := map[string]int64{}
	for _, byName := range stats {
		for name, n := range byName {
			calls[name] += n
		}
	}
	return calls, err
}

// commandStats returns each primary's INFO commandstats by address, as
// commandCallsByName reads them.
func commandStats(ctx context.Context, rdb redis.UniversalClient) (map[string]map[string]int64, error) {
	var mu sync.Mutex
	stats := map[string]map[string]int64{}
	err := forEachPrimary(ctx, rdb, func(ctx context.Context, addr string, c redis.Cmdable) error {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			return fmt.Errorf("bench: INFO commandstats of %s: %w", addr, err)
		}
		byName, err := commandCallsByName(info)
		if err != nil {
			return fmt.Errorf("bench: INFO commandstats of %s: %w", addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		stats[addr] = byName
		return nil
	})
	return stats, err
}

// commandCallsByName returns the calls of each command of INFO commandstats, by name,
// and under name+usecSuffix the microseconds Redis spent in them.
func commandCallsByName(info string) (map[string]int64, error) {
	calls := map[string]int64{}
	for line := range strings.Lines(info) {
		line = strings.TrimSpace(line)
		name, stats, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(line, "cmdstat_") {
			continue
		}
		name = strings.TrimPrefix(name, "cmdstat_")
		for field := range strings.SplitSeq(stats, ",") {
			key, v, _ := strings.Cut(field, "=")
			if key != "calls" && key != "usec" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %q: %w", line, err)
			}
			if key == "usec" {
				calls[name+usecSuffix] += n
			} else {
				calls[name] += n
			}
		}
	}
	return calls, nil
}

// usecSuffix marks the entries of commandCallsByName that are times, not calls.
const usecSuffix = "/usec"

// commandGrowth is after less before, command by command, without the commands that did
// not grow.
func commandGrowth(before, after map[string]int64) map[string]int64 {
	grown := map[string]int64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 {
			grown[name] = d
		}
	}
	return grown
}

// stageKeys is what the wheel-stage keys of a prefix hold on one primary.
type stageKeys struct {
	memory int64 // the sum of their MEMORY USAGE, bytes
	shards int   // the number of shards (hash tags) they belong to
}

// stageMemory returns, per primary of rdb, the memory the wheel-stage keys of prefix hold
// on it (every shard's, {prefix}:… and {prefix/i}:…; the robot pools' {prefix:g} are not
// the stage's) and how many shards they belong to.
func stageMemory(ctx context.Context, rdb redis.UniversalClient, prefix string) (map[string]stageKeys, error) {
	var mu sync.Mutex
	mem := map[string]stageKeys{}
	err := forEachPrimary(ctx, rdb, func(ctx context.Context, addr string, c redis.Cmdable) error {
		var sum int64
		tags := map[string]bool{}
		for _, pattern := range []string{"{" + prefix + "}:*", "{" + prefix + "/*"} {
			var cursor uint64
			for {
				keys, next, err := c.Scan(ctx, cursor, pattern, 1000).Result()
				if err != nil {
					return fmt.Errorf("bench: scan %s of %s: %w", pattern, addr, err)
				}
				n, err := memoryUsage(ctx, c, keys)
				if err != nil {
					return fmt.Errorf("bench: memory of %s on %s: %w", pattern, addr, err)
				}
				sum += n
				for _, k := range keys {
					tag, _, _ := strings.Cut(k, "}")
					tags[tag] = true
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
		mu.Lock()
		mem[addr] = stageKeys{memory: sum, shards: len(tags)}
		mu.Unlock()
		return nil
	})
	return mem, err
}

// memoryUsage sums MEMORY USAGE … SAMPLES 0 (every element counted) of keys, in one
// pipeline; a key gone meanwhile counts 0.
func memoryUsage(ctx context.Context, c redis.Cmdable, keys []string) (int64, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	cmds := make([]*redis.IntCmd, len(keys))
	_, _ = c.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.MemoryUsage(ctx, k, 0)
		}
		return nil
	})
	var sum int64
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return 0, err
		}
		sum += cmd.Val()
	}
	return sum, nil
}

// primaryLoads joins the command counts before and after a run and the memory at its end
// into one primaryLoad per primary, ordered by address.
func primaryLoads(before, after map[string]int64, mem map[string]stageKeys) []primaryLoad {
	var loads []primaryLoad
	for addr, n := range after {
		loads = append(loads, primaryLoad{addr: addr, commands: n - before[addr], memory: mem[addr].memory, shards: mem[addr].shards})
	}
	slices.SortFunc(loads, func(a, b primaryLoad) int { return strings.Compare(a.addr, b.addr) })
	return loads
}

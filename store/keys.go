package store

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Every Redis key rocketdelay writes is built here. p is the configured key prefix
// (config redis.keyPrefix), g a target's name. Keys of one component share a hash tag, so
// every script's keys sit in one Redis Cluster slot.
//
// The wheel stage is split into shards (config redis.shards, WheelStageOptions.Shards): an
// alert id belongs to shard FNV-1a-32(id) mod shards, and every key of the table below
// that names an id, or holds ids, exists once per shard under the shard's tag: {p} for
// shard 0, {p/i} or {p/i.k} for shard i > 0 (ShardTag: tags spread over a cluster's
// slots), so one shard is today's single-tag layout, and "/" keeps the tags apart from
// the robot pools' {p:g}. A script only ever touches one
// shard's keys, so each shard's slot may sit on another Redis Cluster primary. The
// liveness keys (live, live-meta, guard, gone, departed) are kept in every shard, as the
// scripts check them in their own slot. The escalation episodes (ep…, episodes.go) and the
// at-once dedupe (once:, dedupe.go) are not sharded: they stay under shard 0's tag {p}.
// Changing the number of shards of a running deployment moves ids to other shards: the
// stage then scans both counts' shards until every id is in its new one (moving.go).
//
//	wheel stage, tag {p} (shard 0) or {p/i} (shard i), shown as {p}:
//	  {p}:due          sorted set  id → next due time, Unix ms
//	  {p}:inflight     sorted set  id → lease expiry, Unix ms by the Redis clock
//	  {p}:entries      hash        id → encoded Entry
//	  {p}:owner        hash        id → token of the claim holding it (in flight only)
//	  {p}:by           hash        id → the replica responsible for it: the one whose claim
//	                               holds it, or that parked it (lua/lib_holding.lua)
//	  {p}:held         sorted set  "<replica>/<id>" of each id in by, all scores 0: one
//	                               replica's holdings are a lexicographic range
//	  {p}:tries        hash        id → hand-offs given back so far
//	  {p}:failed       hash        id → the failure of its send, once decided
//	  {p}:parts        hash        id → leading parts of a split alert delivered so far
//	  {p}:sweep:<tok>  set         ids one sweeper claim took (lives an hour, or a lease if longer)
//	  {p}:done:<id>    string      delivered marker
//	  {p}:cancel:<id>  string      cancel tombstone
//	  {p}:resched:<id> string      reschedule record: the due time, Unix ms, that every later
//	                               arrival of the alert is routed by (wheel_reschedule.lua)
//	  {p}:gen:<id>     hash        generation record of an alert a reschedule sent back to the
//	                               broker: live, decided, next (wheel_requeue.lua)
//	  {p}:fwd:<id>     string      while the stage moves to another shard count, in the id's
//	                               shard of the old count: the id moved to its new shard
//	                               (moving.go, lua/lib_route.lua)
//	  {p}:fence        string      the shard count a move away from reached phase 2: a
//	                               replica settled in it writes no id here (moving.go)
//	  {p}:trace:<id>   hash        an alert's trace for operators (trace.go)
//	  {p}:pending      sorted set  id → due time, Unix ms: every alert accepted and not yet
//	                               handed off or cancelled, hopping or waiting (pending.go)
//	  {p}:pending-by   hash        target → how many ids of pending are its
//	  {p}:park:<g>     sorted set  id → its turn: target g's parked alerts (park.go)
//	  {p}:turn:<g>     hash        share → the next turn of target g's park (wheel_park.lua)
//	  {p}:adopt:<tok>  sorted set  id → its turn: the ids one adopt took (lives an hour, or a lease if longer)
//	  {p}:live         sorted set  replica → end of its liveness, Unix ms by the Redis clock
//	                               (liveness.go)
//	  {p}:live-meta    hash        last: the last beat of any replica; quiet: take-overs wait
//	                               until then, Unix ms
//	  {p}:guard        sorted set  id → until when a confirmed send of it may still be on the
//	                               wire, Unix ms (liveness on only)
//	  {p}:gone         sorted set  replica → when the take-over of its holdings finished, Unix ms
//	  {p}:departed     sorted set  gone replica → when a survivor took it, Unix ms
//	escalation episodes and dedupe, tag {p} only (shard 0's):
//	  {p}:once:<key>   string      "<id>|<until>": the id the first copy of a notification picked, and when its window ends (dedupe.go)
//	  {p}:signing-key  string      the deployment's generated signing key (signingkey.go)
//	  {p}:deployment   string      "<topic>/<group>" the prefix belongs to (deployment.go)
//	  {p}:shards       string      the wheel stage's layout: its shard count, or the move
//	                               from one to another (moving.go)
//	  {p}:shards-acks  hash        replica → "<layout>|<Unix ms>": the layout it acts in
//	  {p}:shards-clear string      "<move>|<Unix ms>": since when the old count holds no
//	                               alert of the move that is still to be handed off
//	  {p}:fence-lift   string      the count whose shards' fences a settled move left
//	  {p}:shards-settling string   held by the replica that looks whether a move settles
//	  {p}:targets      hash        target → when a replica last said it knows it, Unix ms
//	                               (deployment.go)
//	  {p}:console:…    strings     console sessions and failed-login counters (console.go)
//	  {p}:principal:…  strings     the principal that owns an alert id or an episode key;
//	                               {p}:rate:principal:<name>, a principal's rate;
//	                               {p}:principal:eps:<name>, a set of its open episodes, and
//	                               {p}:principal:eps-at:<name>, when each was recorded (producers.go)
//	  {p}:ep:<key>     hash        an escalation episode (episodes.go); {p}:ep-seq, the episode
//	                               counter; {p}:ep-live and {p}:ep-outbox, sorted sets of keys;
//	                               {p}:ep-alerts:<key>, the set of alerts it saw firing;
//	                               {p}:ep-alerts-prev:<key>, its previous episode's
//	robot pool, tag {p:g}, one per target:
//	  {p:g}:win:<robot>  sorted set  one member per send, score = send time, Unix ms
//	  {p:g}:cool         sorted set  robot → end of its cool-down, Unix ms
//	  {p:g}:disabled     sorted set  robot → end of its disable, Unix ms (+inf: until Enable)
//	topic rate, tag {p:g}, one per topic target with a ratePerSecond:
//	  {p:g}:rate         string      theoretical arrival time of its next token, Unix µs
//
// A keys value builds the keys of one wheel-stage shard (shard 0's, from newKeys), and
// those of the episodes, the dedupe and the robot pools.
type keys struct {
	prefix string
	tag    string // "{p}:" or "{p/i}:", the start of every key of the shard
}

func newKeys(prefix string) keys {
	if prefix == "" {
		panic("store: empty key prefix")
	}
	return keys{prefix: prefix, tag: "{" + prefix + "}:"}
}

// shard returns the keys of wheel-stage shard i of n, under the tag ShardTag names.
func (k keys) shard(i, n int) keys {
	if i == 0 {
		return newKeys(k.prefix)
	}
	return keys{prefix: k.prefix, tag: "{" + ShardTag(k.prefix, i, n) + "}:"}
}

// clusterSlots is the number of a Redis Cluster's hash slots.
const clusterSlots = 16384

// ShardTag is the hash tag (without braces) of shard i of a wheel stage of n shards whose
// key prefix is prefix: prefix itself for shard 0 (the layout of a stage that was never
// sharded), and for shard i > 0 prefix/i, or prefix/i.k with the smallest k that places
// it, in a Redis Cluster, at about i/n of the way round the slot ring from shard 0's
// slot (within the first 32nd of that part of the ring, at least 4 slots). A cluster whose primaries own
// equal ranges of slots, as redis-cli --cluster create makes them, then carries about
// n/primaries shards each, where tags placed by chance often put two of three shards on
// one primary. The tags depend on n: a change of n moves the stage (moving.go).
func ShardTag(prefix string, i, n int) string {
	base := prefix + "/" + strconv.Itoa(i)
	if i <= 0 || n <= 1 {
		return prefix
	}
	part := clusterSlots / n
	from := (slot(prefix) + i*clusterSlots/n) % clusterSlots
	width := max(part/32, 4)
	for k := 0; k < 1<<16; k++ {
		tag := base
		if k > 0 {
			tag += "." + strconv.Itoa(k)
		}
		if (slot(tag)-from+clusterSlots)%clusterSlots < width {
			return tag
		}
	}
	return base // not met within 65536 tries (never for n up to 1024): placed by chance
}

// slot is the Redis Cluster hash slot of a key whose hash tag is tag: CRC16 (XMODEM, as
// Redis computes it) mod 16384.
func slot(tag string) int {
	var crc uint16
	for i := 0; i < len(tag); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^tag[i]]
	}
	return int(crc) % clusterSlots
}

// crc16Table is CRC16-XMODEM's table (polynomial 0x1021) by the top byte.
var crc16Table = func() (t [256]uint16) {
	for b := range t {
		crc := uint16(b) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[b] = crc
	}
	return t
}()

func (k keys) stage() string                  { return k.tag }
func (k keys) due() string                    { return k.stage() + "due" }
func (k keys) inflight() string               { return k.stage() + "inflight" }
func (k keys) entries() string                { return k.stage() + "entries" }
func (k keys) owner() string                  { return k.stage() + "owner" }
func (k keys) by() string                     { return k.stage() + "by" }
func (k keys) held() string                   { return k.stage() + "held" }
func (k keys) tries() string                  { return k.stage() + "tries" }
func (k keys) failed() string                 { return k.stage() + "failed" }
func (k keys) parts() string                  { return k.stage() + "parts" }
func (k keys) sweep(token string) string      { return k.stage() + "sweep:" + token }
func (k keys) done(id string) string          { return k.stage() + "done:" + id }
func (k keys) cancel(id string) string        { return k.stage() + "cancel:" + id }
func (k keys) resched(id string) string       { return k.stage() + "resched:" + id }
func (k keys) gen(id string) string           { return k.stage() + "gen:" + id }
func (k keys) fwd(id string) string           { return k.stage() + "fwd:" + id }
func (k keys) fence() string                  { return k.stage() + "fence" }
func (k keys) moveClear() string              { return k.stage() + "shards-clear" }
func (k keys) fenceLift() string              { return k.stage() + "fence-lift" }
func (k keys) settleTurn() string             { return k.stage() + "shards-settling" }
func (k keys) once(key string) string         { return k.stage() + "once:" + key }
func (k keys) signingKey() string             { return k.stage() + "signing-key" }
func (k keys) deployment() string             { return k.stage() + "deployment" }
func (k keys) shardCount() string             { return k.stage() + "shards" }
func (k keys) layoutAcks() string             { return k.stage() + "shards-acks" }
func (k keys) roster() string                 { return k.stage() + "targets" }
func (k keys) consoleSession(h string) string { return k.stage() + "console:session:" + h }
func (k keys) ownerOf(kind, id string) string { return k.stage() + "principal:" + kind + ":" + id }
func (k keys) principalEpisodes(name string) string {
	return k.stage() + "principal:eps:" + name
}
func (k keys) principalEpisodesAt(name string) string {
	return k.stage() + "principal:eps-at:" + name
}
func (k keys) principalRate(name string) string {
	return k.stage() + "rate:principal:" + name
}

// consoleFails is the counter of failed console logins from client, or from anyone
// when client is "".
func (k keys) consoleFails(client string) string {
	if client == "" {
		return k.stage() + "console:fails"
	}
	return k.stage() + "console:fails:" + client
}
func (k keys) episode(key string) string  { return k.stage() + "ep:" + key }
func (k keys) episodeSeq() string         { return k.stage() + "ep-seq" }
func (k keys) episodesLive() string       { return k.stage() + "ep-live" }
func (k keys) episodeOutbox() string      { return k.stage() + "ep-outbox" }
func (k keys) epAlerts(key string) string { return k.stage() + "ep-alerts:" + key }
func (k keys) epAlertsPrev(key string) string {
	return k.stage() + "ep-alerts-prev:" + key
}
func (k keys) trace(id string) string        { return k.stage() + "trace:" + id }
func (k keys) pending() string               { return k.stage() + "pending" }
func (k keys) pendingBy() string             { return k.stage() + "pending-by" }
func (k keys) live() string                  { return k.stage() + "live" }
func (k keys) liveMeta() string              { return k.stage() + "live-meta" }
func (k keys) guard() string                 { return k.stage() + "guard" }
func (k keys) gone() string                  { return k.stage() + "gone" }
func (k keys) departed() string              { return k.stage() + "departed" }
func (k keys) pool(target string) string     { return "{" + k.prefix + ":" + target + "}:" }
func (k keys) cool(target string) string     { return k.pool(target) + "cool" }
func (k keys) disabled(target string) string { return k.pool(target) + "disabled" }
func (k keys) pace(target string) string     { return k.pool(target) + "pace" }
func (k keys) learn(target string) string    { return k.pool(target) + "learn" }
func (k keys) rate(target string) string     { return k.pool(target) + "rate" }
func (k keys) window(target, robot string) string {
	return k.pool(target) + "win:" + robot
}

// DeleteKeys deletes every key of the deployment whose key prefix is prefix (the wheel
// stage's shards and every target's robot pool) and returns how many it deleted. Tests and
// benchmarks clean up with it; a production deployment never needs it.
func DeleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return deleteKeys(ctx, rdb, prefix)
	}
	// SCAN sees one node: scan every primary.
	var mu sync.Mutex
	n := 0
	err := c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		m, err := deleteKeys(ctx, node, prefix)
		mu.Lock()
		n += m
		mu.Unlock()
		return err
	})
	return n, err
}

func deleteKeys(ctx context.Context, rdb redis.Cmdable, prefix string) (int, error) {
	n := 0
	for _, pattern := range []string{"{" + prefix + "}:*", "{" + prefix + ":*", "{" + prefix + "/*"} {
		iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := rdb.Del(ctx, iter.Val()).Err(); err != nil {
				return n, fmt.Errorf("store: delete keys of %q: %w", prefix, err)
			}
			n++
		}
		if err := iter.Err(); err != nil {
			return n, fmt.Errorf("store: delete keys of %q: %w", prefix, err)
		}
	}
	return n, nil
}

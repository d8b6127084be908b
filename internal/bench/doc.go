// Package bench holds the benchmark engines behind `rocketdelay bench …`: the pipeline
// benchmark (a bare RocketMQ client vs the scheduler's hop and wheel stage, on the
// configured broker and Redis), the sender benchmark (the DingTalk sender vs naive rate
// limiting, and a burst per chat platform, against in-process simulators) and the modes
// benchmark (delay levels vs timer messages vs the broker's timer alone). They are tools, not product: nothing in
// the service depends on them.
package bench

// The long help of the `rocketdelay bench` commands, kept with the engines they describe.
const (
	// PipelineDoc describes Pipeline.
	PipelineDoc = `pipeline measures, in one run on the configured broker and Redis, on fresh topics:
  raw    a bare rocketmq-client-go consumer that re-publishes every message (the cost of a hop)
  hop    the scheduler taking one hop per message (decode, cancel check, re-publish)
  wheel  the scheduler storing each message in the Redis wheel stage, then claiming and
         handing it off at its due time
and prints throughput, the hop/raw ratio, Redis round trips per wheel-stage message and
the lateness from due time to hand-off.`
	// SenderDoc describes Sender, Shared, Pacing and Replicas.
	SenderDoc = `sender sends one burst of alerts, in turn, through four ways of respecting DingTalk's
per-robot limit, against one in-process DingTalk simulator (reset between runs) whose
robots accept 20 messages per --window and are throttled for 10 windows past that:

  rocketdelay, coalesce off   --senders Sender instances sharing the Redis robot pool
  rocketdelay, coalesce auto  the same, merging waiting alerts into markdown messages
  naive sleep                 one worker per robot, a fixed sleep after each send: sleep(3s)
                              against a 60s window, i.e. window/20, scaled to --window
  naive ZCOUNT+ZADD           four workers, each checking a robot's Redis sorted-set window
                              with ZCOUNT and then recording its send with ZADD, with
                              DingTalk's documented 20 per window (--naive-limit)

and prints, side by side, the pool's capacity per window (robots × limit), the messages
sent per window, the simulator's over-limit answers, and the alerts delivered per window.

Then (unless --kinds is empty) it sends the same burst, all due at one instant, into one
target of each kind (--kinds dingtalk,wecom,feishu) of --kinds-robots robots, through one
Sender against that platform's simulator (20 per window for DingTalk and WeCom, 100 per
window and 5 per second window for Feishu; the second window is a sixtieth of
--kinds-window), and prints per kind: alerts per merged message by the platform's size
rule, the fewest messages the burst needs, messages, alerts delivered, the peak per robot
per window (and per second window) against the platform's limit, over-limit answers,
lateness p50/p99 (due → accepted), the physical limit (those fewest messages at the
platform's sustained rate, one robot gap each) with p99/physical, and the limit of
sender.pacing auto's bucket.

Then (unless --shared=false) it compares sender.robotLimits learn and fixed on 8 robots
configured at 19 per window that really accept 5 (shared with someone else), against a
sender told the real limit, printing 130101 answers and redirects, alerts delivered,
messages and p99 lateness.

The first run of learn starts from nothing (the robots' real limits unknown), the second
from what the first learned.

Then (unless --pacing=false) it compares sender.pacing auto and burst: for pools of 5 and
3 robots, alerts falling due (Poisson) at 0.5x, 2x and 10x the pool's capacity for
--pacing-windows windows, handed to one Sender, it prints alerts delivered, messages,
over-limit answers and lateness (due → DingTalk accepted) p50, p99 and max, also scaled
to a 60s window, and last the line "pacing: p99 lateness … at 10x capacity, 3 robots, …".

Then (unless --replicas=false) it measures the whole due path with 1, 2 and 4 replicas
(in-process schedulers in one consumer group on a topic of their own, each with its own
sender, sharing a busy target through the wheel stage's park) at 0.5x, 2x and 10x the
capacity of 3 robots, alerts published 2s before they fall due: lateness due → DingTalk
accepted p50/p99/max (also scaled to a minute), messages, alerts per message, over-limit
answers, alerts parked and adopted, Redis round trips per alert, and the physical limit
(one robot gap, window / (robots × limit)); then, as baselines in the same run, the most
replicas without sharing at the lowest and the highest load, and the lines
"replicas: p99 lateness …" and "calm path …".

--only burst|kinds|shared|pacing|replicas runs one part. The configuration (-f, or the
ROCKETDELAY_* variables deploy/local/env prints) gives Redis, and for the replicas part
the broker and Postgres.`
	// ScaleDoc describes Scale.
	ScaleDoc = `scale runs -n alerts, falling due at one instant, through 1, 2, 4… in-process
schedulers (--replicas) in one consumer group on a topic of 8 queues, once per Redis
(--redis: config, and the local stack's sentinel and cluster) and shard count of the
wheel stage (--shards, redis.shards), and prints hand-off throughput and its ratio to the
first replica count, lateness p50/p99/max, and the claims lost to another replica and the
sweeper's recoveries per alert (a claim storm shows there). The replicas share this
machine's cores, so one run's lateness moves by tens of percent: --repeat N measures each
row N times and shows the run whose max lateness is the median, with the spread over the
N runs; --goal judges that run.

A second table shows each run's Redis primaries (every master of a cluster): the
commands each served from the publishing to the last confirmed hand-off (INFO
commandstats, which count the commands a script runs, and any other client's), and the
memory the stage's keys hold on it once every alert is delivered (MEMORY USAGE: the done
markers and traces), each with its share of the run's total, and how many of the stage's
shards have keys on it: a shard's hash tag decides its slot, so with few shards two may
share a primary.`
	// ModesDoc describes Modes.
	ModesDoc = `modes delivers one delay mix, in one run on the configured broker and Redis, through an
in-process scheduler in levels mode, then in timer mode, then as plain timer messages
consumed directly (the broker's own precision, no wheel stage), and prints broker
messages per alert (the publish and every hop, overall and for delays within one timer
maximum) and lateness p50/p99/max with early deliveries. The broker must accept timer
messages (RocketMQ 5, timerWheelEnable=true).`
)

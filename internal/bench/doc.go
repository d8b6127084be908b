// Package bench holds the benchmark engines behind `rocketdelay bench …`: the pipeline
// benchmark (a bare RocketMQ client vs the scheduler's hop and wheel stage, on the
// configured broker and Redis) and the sender benchmark (the DingTalk sender vs naive
// rate limiting, against an in-process simulator). They are tools, not product: nothing
// in the service depends on them.
package bench

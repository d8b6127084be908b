// Package wire is rocketdelay's wire contract and its Go producer: what a message on the
// guava topic carries (the RD_* properties, the id rules, the priorities, the reasons a
// message is rejected) and Producer, which publishes alerts by it. Producers compile
// against this package alone: it links the RocketMQ client and the standard library,
// nothing of rocketdelay's service (no Redis, Postgres or chat client).
//
// The scheduler reads messages by this contract (decode, on every receipt), and the HTTP
// ways in and `rocketdelay publish` check a publication with Publication.Check before
// they publish, so every way in refuses what the consumer would, in its words.
package wire

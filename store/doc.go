// Package store is rocketdelay's access to Redis and Postgres: connections, the wheel
// stage's payloads and due index, claims and leases, the robots' rate-limit windows (all
// Redis mutations are Lua scripts), and the failed_sends table.
//
// It must not know about RocketMQ or DingTalk, and it never puts a DSN, a password or a
// token in an error or a log line.
package store

// Package chaos is rocketdelay's fault-injection suite: it runs two real
// `rocketdelay serve` processes against a private local stack (RocketMQ name server and
// broker, Redis with AOF, Postgres — started with deploy/local/up under a state
// directory and ports of its own) and a chat simulator that serves DingTalk, WeCom and
// Feishu robots, injects faults (SIGKILLed replicas, restarted Redis and broker, a
// stopped Postgres, storms of each chat platform's answers, malformed inputs; and the
// routine changes: a rolling update, the previous release beside this one, a new
// configuration beside the old one, a second deployment on the same key prefix, a
// replica started while Redis is out of reach), and counts
// at the simulator what was delivered, lost, duplicated and late, and how close each
// robot came to its limits.
//
// Run runs selected scenarios and returns one Row per scenario; WriteTable prints them.
// `go run ./internal/cmd/chaos` is the full run (`make chaos`); TestChaosShort is a
// shortened form that runs under `go test` (not under -short).
//
// Every loop is bounded, every wait has a timeout, and everything listens on and talks
// to loopback only. The shared stack other tests use is never touched: the scenarios
// that restart Redis, Postgres or the broker do so on the private stack.
package chaos

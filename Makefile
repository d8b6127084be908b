# rocketdelay — the two quickstart commands are `make run` and `make test`.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/rocketdelay/rocketdelay/app.Version=$(VERSION)
BIN := bin/rocketdelay
LOCAL_CONFIG := deploy/local/rocketdelay.yaml
GO_TEST_TIMEOUT ?= 15m
# Every go command of these targets (and the scripts and tests they start) builds with the
# Go of go.mod's toolchain line, which the go command fetches from the module proxy once.
export GOTOOLCHAIN := $(shell sed -n 's/^toolchain //p' go.mod)
# govulncheck and the Go vulnerability database it reads offline: the OSV entries of the
# golang.org/x/vulndb module (vuln.go.dev itself is not reached).
GOVULNCHECK := golang.org/x/vuln/cmd/govulncheck@v1.9.0
VULNDB := golang.org/x/vulndb@v0.0.0-20261105234957-e22db6528018
CHAOS_TEST_TIMEOUT ?= 30m
# The packages whose tests take longest, started first: go test runs two packages at a
# time (its -p, the cores here), so the long ones run side by side instead of last.
SLOW_PKGS := ./app ./scheduler ./sender ./store

.PHONY: help build run test test-topologies test-short bench bench-timewheel bench-pipeline bench-sender bench-modes bench-scale bench-burst bench-topic bench-alertmanager bench-api mutants gremlins chaos down status fmt vet vulncheck
FUZZ_TIME ?= 20s
BURST_PROFILE ?= /tmp/rocketdelay-burst-profile

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

build: ## build bin/rocketdelay
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/rocketdelay

run: build ## start the local stack (default delay levels) and the chat simulator (DingTalk, WeCom, Feishu), migrate, and serve in the foreground
	deploy/local/up --profile default >/dev/null
	eval "$$(deploy/local/env)"; \
	$(BIN) migrate up -f $(LOCAL_CONFIG); \
	$(BIN) chat-sim -f deploy/local/chat-sim.yaml 2>"$$ROCKETDELAY_LOCAL_LOGS/chat-sim.log" & sim=$$!; \
	trap 'kill $$sim 2>/dev/null' EXIT; \
	echo "chat simulator (DingTalk, WeCom, Feishu) on 127.0.0.1:18090 (log: $$ROCKETDELAY_LOCAL_LOGS/chat-sim.log)"; \
	$(BIN) serve -f $(LOCAL_CONFIG)

test: ## check no built artifact is tracked, start the local stack (test delay levels), then gofmt, go vet, go test -race, the fault suite, deploy/k8s, govulncheck and the store on Sentinel and Cluster
	deploy/check-tree
	deploy/local/up --profile test >/dev/null
	@unformatted="$$(gofmt -l .)"; \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed on:"; echo "$$unformatted"; exit 1; fi
	eval "$$(deploy/local/env)"; \
	go vet ./...; \
	slow="$$(go list $(SLOW_PKGS))"; \
	go test -race -count=1 -timeout $(GO_TEST_TIMEOUT) $$slow $$(go list ./... | grep -v /internal/chaos | grep -vxF "$$slow"); \
	go test -count=1 -timeout $(CHAOS_TEST_TIMEOUT) ./internal/chaos/
	$(MAKE) vulncheck > /tmp/rocketdelay-vulncheck.log 2>&1 & vuln=$$!; \
	k8s=0; (cd deploy/k8s && go vet ./... && go test -count=1 ./...) || k8s=$$?; \
	wait $$vuln && vuln=0 || vuln=$$?; \
	echo "--- make vulncheck:"; tail -n 25 /tmp/rocketdelay-vulncheck.log; \
	if [[ $$k8s -ne 0 || $$vuln -ne 0 ]]; then echo "failed (deploy/k8s: $$k8s, vulncheck: $$vuln)"; exit 1; fi
	$(MAKE) test-topologies

test-topologies: ## the store's tests (every Lua script) on a real Redis Sentinel deployment and a real Redis Cluster, at once
	deploy/local/up sentinel redis-cluster >/dev/null
	eval "$$(deploy/local/env)"; \
	go test -c -race -o /tmp/rocketdelay-store-topologies.test ./store/; \
	(cd store && ROCKETDELAY_TEST_REDIS=sentinel /tmp/rocketdelay-store-topologies.test -test.count=1 > /tmp/rocketdelay-store-sentinel.log 2>&1) & sentinel=$$!; \
	cluster=0; (cd store && ROCKETDELAY_TEST_REDIS=cluster /tmp/rocketdelay-store-topologies.test -test.count=1) || cluster=$$?; \
	wait $$sentinel && sentinel=0 || sentinel=$$?; \
	echo "--- store on Redis Sentinel:"; tail -n 40 /tmp/rocketdelay-store-sentinel.log; \
	if [[ $$sentinel -ne 0 || $$cluster -ne 0 ]]; then echo "store tests failed (sentinel: $$sentinel, cluster: $$cluster)"; exit 1; fi

vulncheck: ## govulncheck over the module and the toolchain, offline (the OSV entries of golang.org/x/vulndb): fails on any reachable finding
	db="$$(go mod download -json $(VULNDB) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1/p')"; \
	echo "govulncheck with $$(go version | cut -d' ' -f3), database $(VULNDB)"; \
	go run $(GOVULNCHECK) -db "file://$$db/data/osv" ./...

test-short: ## only the tests that need no server (go test -short)
	go test -short -race -count=1 ./...

bench: ## the Go benchmarks of every package, the timing wheel table, the pipeline benchmark
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; go test -run '^$$' -bench . -benchmem ./store/ ./sender/
	go test -short -run '^$$' -bench . -benchtime 1x ./timewheel/
	$(MAKE) bench-timewheel bench-pipeline bench-sender bench-modes bench-topic bench-alertmanager bench-api

bench-api: ## the publish API under scoped ids, claimed ids and the single token (and the single token again, the noise), interleaved: p50, p99, ratios
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; go test -run '^$$' -bench PublishAPIPrincipals -benchtime 30000x -timeout 30m ./ingress/

bench-timewheel: ## timewheel vs time.AfterFunc vs go-zero's TimingWheel, one table
	cd timewheel/bench && go run .

bench-pipeline: build ## raw RocketMQ vs scheduler hop and wheel-stage throughput, Redis round trips, lateness
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; ROCKETDELAY_THRESHOLD=5s $(BIN) bench pipeline

bench-modes: build ## scheduler.mode levels vs timer vs the broker's timer alone: broker messages per alert, lateness
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; ROCKETDELAY_THRESHOLD=5s $(BIN) bench modes

bench-scale: build ## 1, 2, 4 replicas in one group on the single node, the Sentinel deployment and the Cluster: throughput, lateness, lost claims
	deploy/local/up --profile test >/dev/null
	deploy/local/up sentinel redis-cluster >/dev/null
	eval "$$(deploy/local/env)"; ROCKETDELAY_THRESHOLD=5s $(BIN) bench scale --redis config,sentinel,cluster

bench-burst: build ## 4000 alerts due at one instant, 1 and 2 replicas, 1 and 3 shards, each row the median of 3 runs: lateness against the 50 ms goal (PASS/FAIL), Redis commands per alert; profiles in $(BURST_PROFILE)
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; ROCKETDELAY_THRESHOLD=5s $(BIN) bench scale --replicas 1,2 --shards 1,3 -n 4000 --repeat 3 --goal 50ms --profile $(BURST_PROFILE)

bench-topic: build ## a topic target at its business consumer: lateness next to the broker's timer alone, and throughput of a burst
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; ROCKETDELAY_THRESHOLD=10s $(BIN) bench topic

bench-alertmanager: build ## a real Alertmanager's flood through rocketdelay into a robot of each platform (DingTalk, WeCom, Feishu), then through rocketdelay and a naive forwarder into DingTalk
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; $(BIN) bench alertmanager

bench-sender: build ## the sender vs naive rate limiting, a burst per platform (DingTalk, WeCom, Feishu), learned limits on shared robots, pacing auto vs burst; against the chat simulator
	deploy/local/up redis >/dev/null
	eval "$$(deploy/local/env)"; $(BIN) bench sender -n 1000

mutants: ## apply each curated mutant (internal/mutants) in turn and run the tests it names: every one must be killed
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; go run ./internal/cmd/mutants $(if $(ONLY),-only '$(ONLY)')

# The pure Go packages (tests that need no server), for make gremlins.
GREMLINS_PKGS ?= timewheel wire oncall internal/quantile sender/dingtalk sender/wecom sender/feishu

gremlins: ## tool-driven mutation report (gremlins) over the pure Go packages: a report of what survives, not a gate
	@for p in $(GREMLINS_PKGS); do echo "== $$p"; go run github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0 unleash --workers 1 ./$$p || exit 1; done

chaos: build ## fault suite on a private stack (2 serve replicas; kills, Redis/Postgres/broker restarts, DingTalk storms, malformed inputs), then bounded fuzzing
	go run ./internal/cmd/chaos $(if $(SEED),-seed $(SEED))
	deploy/local/up --profile test >/dev/null
	eval "$$(deploy/local/env)"; \
	for t in FuzzAlertBody FuzzDecomposition FuzzDelayLevels FuzzConfigDecode FuzzConfigLoad FuzzAdminParams FuzzAdminAPI; do \
	  go test -run '^$$' -fuzz "^$$t\$$" -fuzztime $(FUZZ_TIME) -parallel 2 ./internal/chaos/ || exit 1; done
	go test -run '^$$' -fuzz '^FuzzParseBody$$' -fuzztime $(FUZZ_TIME) -parallel 2 ./sender/dingtalk/
	go test -run '^$$' -fuzz '^FuzzDecodeWheelEntry$$' -fuzztime $(FUZZ_TIME) -parallel 2 ./store/
	go test -run '^$$' -fuzz '^FuzzModel$$' -fuzztime $(FUZZ_TIME) -parallel 2 ./timewheel/

down: ## stop the local stack
	deploy/local/down

status: ## show the local stack's processes, ports and logs
	deploy/local/status

fmt: ## gofmt the tree
	gofmt -w .

vet: ## go vet
	go vet ./...

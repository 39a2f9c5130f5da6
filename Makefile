# Parley — make targets. `make run` starts the whole system on embedded
# defaults; `make test` runs the unit and integration tests (real redis-server
# and an embedded Kafka-protocol broker; install redis-server first).
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
DATA_DIR ?= var
ADDR ?= 127.0.0.1:8080
FUZZTIME ?= 10s
FUZZMINTIME ?= 2s
BENCH_DIR ?= bench/results

.PHONY: all build run test test-short test-long test-security test-faults test-loop loop-promote loop-replay test-race experiment user-agent lint fuzz bench bench-reference soak schemas deploy-check clean

all: build

build:
	$(GO) build -o bin/parley ./cmd/parley

run: build
	bin/parley dev --data-dir $(DATA_DIR) --addr $(ADDR) $(ARGS)

test:
	$(GO) test -count=1 -timeout 30m ./...

# The quick subset: skips the slower training and browser tests.
test-short:
	$(GO) test -short -count=1 ./...

# Long training runs (the tiny and small experiment profiles, convergence checks).
test-long:
	$(GO) test -tags long -count=1 -timeout 120m ./...

# The security suite against one real gateway process (also part of `make test`).
test-security:
	$(GO) test -count=1 -v ./internal/securitytest/

# Fault injection: broker and Redis killed under load, learner and gateway
# SIGKILLed mid-work, corrupt checkpoints, a full spool and a full disk.
test-faults:
	$(GO) test -tags faults -count=1 -timeout 30m -v ./internal/faulttest/

# The closed loop: bots → Kafka → user-agent refresh → AT-GRPO candidate →
# canary at 50 % → A/B report → promote or roll back (under a minute).
test-loop:
	$(GO) test -tags loop -count=1 -timeout 30m -v ./internal/looptest/

# The loop in earnest (issue 15): the shipped user agent and a first NPC of
# mixed quality, one window of bot sessions, a refresh, the cycle's referee
# gate and a twenty-step AT-GRPO cycle, a 50 % canary and the watchdog
# promoting on the player-level A/B (twenty minutes to half an hour on 2
# cores; LOOP_DIR keeps the bootstrap between runs).
LOOP_DIR ?= $(DATA_DIR)/loop-promote
loop-promote:
	mkdir -p $(LOOP_DIR)
	PARLEY_LOOP_DIR=$(abspath $(LOOP_DIR)) $(GO) test -tags loop,long -count=1 -timeout 90m -v -run TestLoopPromotes ./internal/looptest/

# Replays a kept loop run's A/B on a fresh stack: its npc/v1 stable, its
# candidate npc/v2 canaried at 50 %, new players in rounds, the watchdog at
# its production thresholds (five to ten minutes; REPLAY_SEED offsets the
# players' seeds). REPLAY_RUN is a run directory under LOOP_DIR.
loop-replay:
	@test -n "$(REPLAY_RUN)" || { echo "make loop-replay REPLAY_RUN=<a loop run's directory, such as $(LOOP_DIR)/run-…>"; exit 2; }
	PARLEY_REPLAY_REGISTRY=$(abspath $(REPLAY_RUN))/registry PARLEY_REPLAY_SEED=$(REPLAY_SEED) $(GO) test -tags loop,long -count=1 -timeout 40m -v -run TestLoopReplaysAB ./internal/looptest/

# The race detector over every package, on the quick subset (-short).
test-race:
	$(GO) test -race -short -count=1 -timeout 60m ./...

# Issue 15's acceptance run at this machine's scale (Tables 3 and 6, Figure 5,
# the acceptance object): the medium profile, three seeds, within 90 minutes
# on 2 quiet cores; resumes row by row. The small profile with its ablations:
# bin/parley experiment --profile small --seeds 3 --out DIR.
EXPERIMENT_DIR ?= $(DATA_DIR)/experiment
experiment: build
	bin/parley experiment --profile medium --seeds 3 --out $(EXPERIMENT_DIR)

# Retrain the user agent shipped in the binary (internal/devstack/useragent)
# with the default bootstrap recipe: its corpus, 1,000 SFT steps of 16 and its
# calibration (about 10 minutes on 2 cores). Commit the result.
user-agent: build
	bin/parley dev user-agent --data-dir $(DATA_DIR) --out internal/devstack/useragent

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags long,xla,faults,loop ./...
	$(GO) run $(STATICCHECK) ./...

# Runs every fuzz target for FUZZTIME each (go test -fuzz takes one target at a time).
# FUZZTIME and FUZZMINTIME take a duration (10s) or a count of runs (2000x); CI
# uses counts, since a duration can end Go 1.26's fuzzing in a spurious
# "context deadline exceeded" on a loaded machine (golang/go#75804).
fuzz:
	@set -e; for f in $$(grep -rl --include='*_test.go' '^func Fuzz' .); do \
	  dir=$$(dirname $$f); \
	  for t in $$(grep -o '^func Fuzz[A-Za-z0-9_]*' $$f | cut -d' ' -f2); do \
	    echo "fuzz $$dir $$t"; \
	    $(GO) test $$dir -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime $(FUZZMINTIME); \
	  done; \
	done

# Benchmarks: each writes JSON under $(BENCH_DIR) and prints its table.
# scripts/with-redis.sh gives the gateway, rollout and soak benches a
# throwaway redis-server.
bench: build
	mkdir -p $(BENCH_DIR)
	bin/parley bench inference --out $(BENCH_DIR)/inference.json
	bin/parley bench turns --out $(BENCH_DIR)/turns.json
	bin/parley bench train --out $(BENCH_DIR)/train.json
	bin/parley bench ab --out $(BENCH_DIR)/ab.json
	scripts/with-redis.sh sh -c 'bin/parley bench gateway --redis-addr $$REDIS_ADDR --out $(BENCH_DIR)/gateway.json && \
	  bin/parley bench rollout --redis-addr $$REDIS_ADDR --out $(BENCH_DIR)/rollout.json'
	$(GO) test -run '^$$' -bench . -benchtime 1x ./... | tee $(BENCH_DIR)/go-bench.txt
	bin/parley bench summary $(BENCH_DIR)

# PyTorch reference of `parley bench train` (same architecture, sizes, batch and
# optimiser), to set beside train.json; not part of CI. Needs Debian's
# python3-torch and libopenblas-dev (without it torch uses the reference BLAS).
bench-reference:
	mkdir -p $(BENCH_DIR)
	OPENBLAS_NUM_THREADS=1 /usr/bin/python3 internal/bench/reference/train_reference.py --out $(BENCH_DIR)/train-reference.json

# Ten minutes of steady load on a whole gateway: latency percentiles and memory over time.
soak: build
	mkdir -p $(BENCH_DIR)
	scripts/with-redis.sh sh -c 'bin/parley bench soak --redis-addr $$REDIS_ADDR --duration 10m --out $(BENCH_DIR)/soak.json'
	bin/parley bench summary $(BENCH_DIR)

# Regenerate the JSON Schema files of the wire types and the OpenAPI description
# (gateway/openapi.json) after changing schema/ or a route.
schemas:
	$(GO) test ./schema -run TestJSONSchemaFilesAreFresh -update
	$(GO) test ./gateway/openapi -run TestDocumentIsFresh -update

# Validates deploy/ offline (compose, Kubernetes schemas, Prometheus, Dockerfile).
deploy-check: build
	deploy/validate.sh --binary bin/parley

clean:
	rm -rf bin

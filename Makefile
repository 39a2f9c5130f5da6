# Parley — make targets. `make run` starts the whole system on embedded
# defaults; `make test` runs the unit and integration tests (real redis-server
# and an embedded Kafka-protocol broker; install redis-server first).
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
DATA_DIR ?= var
ADDR ?= 127.0.0.1:8080

.PHONY: all build run test lint bench schemas clean

all: build

build:
	$(GO) build -o bin/parley ./cmd/parley

run:
	$(GO) run ./cmd/parley dev --data-dir $(DATA_DIR) --addr $(ADDR)

test:
	$(GO) test -count=1 -timeout 30m ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

bench:
	mkdir -p bench/results
	$(GO) test -run '^$$' -bench . -benchtime 1x ./... | tee bench/results/go-bench.txt

# Regenerate the JSON Schema files of the wire types after changing schema/.
schemas:
	$(GO) test ./schema -run TestJSONSchemaFilesAreFresh -update

clean:
	rm -rf bin

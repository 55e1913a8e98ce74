# Sluice: `make demo` shows it working, `make test` proves it. Both install what they need.
GO ?= go
BIN := bin/sluice

.PHONY: all build deps generate check-generated test unit e2e demo lint clean

all: build

deps:
	./scripts/deps.sh

build:
	$(GO) build -o $(BIN) ./cmd/sluice

# The BPF objects and their Go bindings are committed; this rebuilds them from bpf/ with clang.
generate:
	$(GO) generate ./internal/datapath/ebpf/

check-generated:
	./scripts/check-generated.sh

lint: check-generated
	test -z "$$(gofmt -l cmd internal test)" || (gofmt -l cmd internal test; exit 1)
	$(GO) vet ./...

# Unit tests need no root; the lab tests (internal/lab, test/e2e) skip themselves without root.
test: deps lint build
	$(GO) test -count=1 -timeout 25m -p 1 ./...
	$(GO) test -count=1 -run '^$$' -fuzz FuzzBuild -fuzztime 10s ./internal/maglev/
	$(GO) test -count=1 -run '^$$' -fuzz FuzzPutConfig -fuzztime 10s ./internal/api/

unit:
	$(GO) test -count=1 -short ./internal/config/ ./internal/maglev/ ./internal/plan/ ./internal/datapath/... ./internal/health/ ./internal/engine/ ./internal/api/ ./internal/metrics/

demo: deps build
	./scripts/demo.sh

clean:
	rm -rf bin

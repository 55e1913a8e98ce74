# Sluice: `make demo` shows it working, `make test` proves it. Both install what they need:
# make deps the Debian packages and Go modules, make lint (part of make test) the pinned linter.
GO ?= go
# Every go command make runs uses Go 1.27.3, fetched once through the module proxy like a module:
# its fuzzing no longer reports its own -fuzztime deadline as a target's failure (golang/go#75804).
# The module needs only go 1.25: make GOTOOLCHAIN=local builds with the Go installed.
export GOTOOLCHAIN := go1.27.3
BIN ?= bin/sluice
# sluice-lab, the lab and the benchmarks, is built beside sluice (it runs the sluice next to it)
# and stays out of make install and the .deb: an operator's balancer needs none of it.
LAB_BIN ?= $(dir $(BIN))sluice-lab

# The build stamps the version (git describe), commit and date into the binary; a plain go build
# says "dev". SOURCE_DATE_EPOCH, when set, fixes the date for reproducible builds. -s -w strip the
# symbol table and DWARF: the binary is 28 MB, not 40, the .deb 10.4 MB, not 19.6; a panic still
# prints file:line (the runtime keeps its own line table).
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
BUILD_DATE ?= $(shell date -u -d @$${SOURCE_DATE_EPOCH:-$$(date +%s)} +%Y-%m-%dT%H:%M:%SZ)
CLI := github.com/sluicelb/sluice/internal/cli
LDFLAGS := -s -w -X $(CLI).Version=$(VERSION) -X $(CLI).Commit=$(COMMIT) -X $(CLI).BuildDate=$(BUILD_DATE)

# make install puts the binary, unit, defaults, man pages, completions and docs under these.
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
MANDIR ?= $(PREFIX)/share/man
DOCDIR ?= $(PREFIX)/share/doc/sluice
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/site-functions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d

.PHONY: all build version install deb deps generate check-generated test fuzz unit e2e demo lint clean

all: build

# The packages and modules the build, the lab and the demo need; no linter (make lint installs it).
deps:
	./scripts/deps.sh

# A static binary: no cgo, so it runs on any Linux of the architecture without its libc.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sluice
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(LAB_BIN) ./cmd/sluice-lab

version:
	@echo $(VERSION)

# Files under SYSCONFDIR are installed only when absent: an operator's edits stay.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/sluice
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man1 $(DESTDIR)$(DOCDIR)/examples \
		$(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR)
	sed -e 's|/usr/local/bin/sluice|$(BINDIR)/sluice|g' -e 's|/usr/share/doc/sluice|$(DOCDIR)|g' \
		packaging/sluice.service > $(DESTDIR)$(UNITDIR)/sluice.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/sluice.service
	test -e $(DESTDIR)$(SYSCONFDIR)/default/sluice || install -D -m 0644 packaging/sluice.default $(DESTDIR)$(SYSCONFDIR)/default/sluice
	test -e $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.yaml || install -D -m 0644 packaging/sluice.yaml $(DESTDIR)$(SYSCONFDIR)/sluice/sluice.yaml
	$(GO) run -ldflags '$(LDFLAGS)' ./packaging/gendocs $(DESTDIR)$(MANDIR)/man1
	$(BIN) completion bash > $(DESTDIR)$(BASHCOMPDIR)/sluice
	$(BIN) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_sluice
	$(BIN) completion fish > $(DESTDIR)$(FISHCOMPDIR)/sluice.fish
	install -m 0644 README.md docs/*.md $(DESTDIR)$(DOCDIR)/
	install -m 0644 examples/*.yaml $(DESTDIR)$(DOCDIR)/examples/

# DEBDIR/sluice_VERSION_ARCH.deb, built with dpkg-deb from a make install into a scratch tree.
DEBDIR ?= bin
deb:
	MAKE='$(MAKE)' BIN='$(BIN)' ./packaging/deb.sh $(DEBDIR)

# The BPF objects and their Go bindings are committed; this rebuilds them from bpf/ with clang.
generate:
	$(GO) generate ./internal/datapath/ebpf/

check-generated:
	./scripts/check-generated.sh

# golangci-lint is pinned and installed into bin/tools by scripts/tools.sh; .golangci.yml says what it checks.
# The BPF C is clang-format-14's (.clang-format), from scripts/deps.sh.
lint: check-generated
	./scripts/check-format.sh
	test -z "$$(gofmt -l cmd internal test packaging)" || (gofmt -l cmd internal test packaging; exit 1)
	$(GO) vet ./...
	./scripts/tools.sh
	bin/tools/golangci-lint run ./...

# Unit tests need no root; the lab tests (internal/lab, test/e2e) skip themselves without root.
test: deps lint build
	$(GO) test -count=1 -timeout 25m -p 1 ./...
	$(MAKE) fuzz

# Each fuzz target for FUZZTIME (go test -fuzz runs one at a time); FUZZTIME=10m make fuzz for a
# longer run. FuzzProgram and FuzzRender need root and skip themselves without. A new input is
# minimized for at most FUZZMINIMIZETIME (go's default is 60s, most of a short run).
FUZZTIME ?= 10s
FUZZMINIMIZETIME ?= 1s
FUZZ_TARGETS = \
	./internal/maglev/:FuzzBuild \
	./internal/api/:FuzzPutConfig \
	./internal/api/:FuzzDecodeJSON \
	./internal/importer/:FuzzKeepalived \
	./internal/importer/:FuzzNftlb \
	./internal/importer/:FuzzIpvsadm \
	./internal/importer/:FuzzFwmarkRules \
	./internal/flowsync/:FuzzDecode \
	./internal/conntrackd/:FuzzParseStats \
	./internal/datapath/ebpf/:FuzzProgram \
	./internal/datapath/nft/:FuzzRender \
	./internal/config/:FuzzValidServiceName \
	./internal/config/:FuzzParse
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) FUZZMINIMIZETIME=$(FUZZMINIMIZETIME) ./scripts/fuzz.sh $(FUZZ_TARGETS)

# Every package, no root needed: what needs root or a tool skips itself (-short skips the slow ones).
unit:
	$(GO) test -count=1 -short ./...

demo: deps build
	./scripts/demo.sh

clean:
	rm -rf bin

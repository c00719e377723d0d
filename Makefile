# sluice build. `make run` and `make test` each do all of their own set-up on
# a fresh Debian machine (as root): `deps` installs what is missing and skips
# what is there.
#
# Each area of the tree adds its packages, dependency steps, checks and
# benchmarks in mk/<area>.mk through the variables below.

SHELL := /bin/bash
GO ?= go
export CGO_ENABLED := 1
export GOFLAGS ?= -buildvcs=false

ROOT := $(abspath .)
BIN := $(ROOT)/bin
# Third-party files fetched by `make deps` (npm tarballs, unpacked debs).
THIRD := $(ROOT)/third_party

# Debian packages the project needs.
APT_PACKAGES := build-essential pkg-config iproute2 libdpdk-dev libpcap-dev \
	libzmq3-dev libonnx-testdata
# Extra dependency steps (targets) added by mk/*.mk.
DEPS_EXTRA :=
# Extra checks run by `make test` before go test (targets).
TEST_EXTRA :=
# Benchmark targets run by `make bench`.
BENCH_TARGETS :=
# Binaries: name=package.
BINARIES := sluice=./appliance/cmd/sluice

GO_TEST_FLAGS ?= -count=1 -timeout 25m -p 2

# The version stamped into every binary (sluice -version, ifctl status,
# sluice_build_info): git describe of the checkout, "devel" outside one.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
GO_LDFLAGS := -X sluice/appliance/buildinfo.version=$(VERSION)

# `make fuzz` fuzzes every Fuzz* target in the repository, one after the
# other, each for FUZZ_TIME (a go test -fuzztime value: 30s, 5m, 10000x).
# FUZZ narrows it to the targets whose name matches a grep -E pattern
# (FUZZ=ParseRequest). `make test` only replays the committed corpora
# (testdata/fuzz/<FuzzName>/ files, run by plain go test).
FUZZ_TIME ?= 30s
FUZZ ?= .

include $(sort $(wildcard mk/*.mk))

.PHONY: all deps deps-apt deps-go build test test-go vet fmt-check fuzz bench run clean

all: build

deps: deps-apt deps-go $(DEPS_EXTRA)

deps-apt:
	@missing=""; for p in $(APT_PACKAGES); do \
	  dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q 'ok installed' || missing="$$missing $$p"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install$$missing"; \
	  [ "$$(id -u)" = 0 ] || { echo "deps: need root to install:$$missing" >&2; exit 1; }; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing; \
	fi

deps-go:
	@$(GO) mod download

build: deps
	@mkdir -p $(BIN)
	@for b in $(BINARIES); do name=$${b%%=*}; pkg=$${b#*=}; \
	  if [ -d "$$pkg" ]; then echo "go build -o bin/$$name $$pkg"; $(GO) build -ldflags "$(GO_LDFLAGS)" -o $(BIN)/$$name $$pkg || exit 1; fi; \
	done

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: deps
	$(GO) vet ./...

# Tests that need root (DPDK, network namespaces) fail instead of skipping
# when SLUICE_REQUIRE_ROOT=1, so CI cannot pass by skipping them.
test: deps build fmt-check vet $(TEST_EXTRA)
	SLUICE_REQUIRE_ROOT=$$( [ "$$(id -u)" = 0 ] && echo 1 || echo 0 ) \
	  $(GO) test $(GO_TEST_FLAGS) ./...
	@rm -rf /var/run/dpdk/sluice-* 2>/dev/null || true

# Random fuzzing is not part of `make test`: what it finds depends on the
# machine and the time it is given. A finding is written to the package's
# testdata/fuzz/<FuzzName>/; commit it with the fix so every go test
# replays it. Every target runs even when one fails; the exit status says
# whether any did.
fuzz: deps
	@failed=""; \
	for dir in $$(grep -rlE --include='*_test.go' --exclude-dir=third_party --exclude-dir=.git '^func Fuzz[A-Za-z0-9_]*\(' . | xargs -r -n1 dirname | sort -u); do \
	  for name in $$(sed -nE 's/^func (Fuzz[A-Za-z0-9_]*)\(.*/\1/p' $$dir/*_test.go | grep -E -- '$(FUZZ)' | sort -u); do \
	    echo "go test -run '^\$$' -fuzz '^$$name\$$' -fuzztime $(FUZZ_TIME) $$dir/"; \
	    $(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZ_TIME) $$dir/ || failed="$$failed $$dir:$$name"; \
	  done; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failures in:$$failed (inputs under each package's testdata/fuzz/)" >&2; exit 1; fi

bench: build $(BENCH_TARGETS)

clean:
	rm -rf $(BIN)

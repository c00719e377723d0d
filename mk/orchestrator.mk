# orchestrator: the ZeroMQ control plane (orchestrator/) and its CLI
# (tools/ifctl). libzmq comes from APT_PACKAGES (libzmq3-dev) in the top
# Makefile. See docs/commands.md.

BINARIES += ifctl=./tools/ifctl
TEST_EXTRA += test-orchestrator-race fuzz-orchestrator
BENCH_TARGETS += bench-orchestrator

FUZZ_TIME ?= 15s

.PHONY: test-orchestrator-race fuzz-orchestrator bench-orchestrator

# The control server is all goroutines and sockets: run its tests under
# the race detector too (a few seconds).
test-orchestrator-race: deps
	$(GO) test -race -count=1 ./orchestrator/... ./tools/ifctl/

# Request validation against arbitrary frames (the seed corpus runs in
# every `go test`).
fuzz-orchestrator: deps
	$(GO) test -run '^$$' -fuzz '^FuzzParseRequest$$' -fuzztime $(FUZZ_TIME) ./orchestrator/

# Command round trip (client -> server -> handler -> client) over ipc,
# tcp and CURVE tcp, and request validation alone.
bench-orchestrator: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./orchestrator/

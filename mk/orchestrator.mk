# orchestrator: the ZeroMQ control plane (orchestrator/) and its CLI
# (tools/ifctl). libzmq comes from APT_PACKAGES (libzmq3-dev) in the top
# Makefile. See docs/commands.md.

BINARIES += ifctl=./tools/ifctl
TEST_EXTRA += test-orchestrator-race
BENCH_TARGETS += bench-orchestrator

.PHONY: test-orchestrator-race bench-orchestrator

# The control server is all goroutines and sockets: run its tests under
# the race detector too (a few seconds).
test-orchestrator-race: deps
	$(GO) test -race -count=1 ./orchestrator/... ./tools/ifctl/

# FuzzParseRequest (request validation against arbitrary frames) runs
# under `make fuzz FUZZ=ParseRequest`; `go test` replays its seeds and
# orchestrator/testdata/fuzz/FuzzParseRequest/.

# Command round trip (client -> server -> handler -> client) over ipc,
# tcp and CURVE tcp, and request validation alone.
bench-orchestrator: deps
	$(GO) test -run '^$$' -bench . -benchtime 2s -count 1 ./orchestrator/

# dataplane: reassembly fuzz smoke run in `make test`, and the dataplane
# benchmark report.

TEST_EXTRA += fuzz-reasm
BENCH_TARGETS += bench-dataplane
BINARIES += dpbench=./tools/dpbench

FUZZ_TIME ?= 15s
DPBENCH_FLAGS ?= -duration 1s -rounds 11

.PHONY: fuzz-reasm bench-dataplane

# The seed corpus runs in every `go test`; this also fuzzes for FUZZ_TIME.
fuzz-reasm: deps
	$(GO) test -run '^$$' -fuzz '^FuzzReassembly$$' -fuzztime $(FUZZ_TIME) ./dataplane/reasm/

# Receive + reassembly + gather on one core against the raw rx_burst
# ceiling, net_pcap infinite replay (root).
bench-dataplane: build
	$(BIN)/dpbench $(DPBENCH_FLAGS)
	@rm -rf /var/run/dpdk/sluice-* 2>/dev/null || true

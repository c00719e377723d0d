# dataplane: the dataplane benchmark report. FuzzReassembly runs under
# `make fuzz FUZZ=Reassembly`; `go test` replays its seeds and
# dataplane/reasm/testdata/fuzz/FuzzReassembly/.

BENCH_TARGETS += bench-dataplane
BINARIES += dpbench=./tools/dpbench

DPBENCH_FLAGS ?= -duration 1s -rounds 11

.PHONY: bench-dataplane

# Receive + reassembly + gather on one core against the raw rx_burst
# ceiling, net_pcap infinite replay (root).
bench-dataplane: build
	$(BIN)/dpbench $(DPBENCH_FLAGS)
	@rm -rf /var/run/dpdk/sluice-* 2>/dev/null || true

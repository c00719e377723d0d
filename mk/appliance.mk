# The appliance end to end: latency per class at several loads and the
# appliance's own overhead (end to end minus model compute), ResNet-18 at
# batch 1 over kernel UDP on loopback.

BENCH_TARGETS += bench-appliance
BINARIES += appbench=./tools/appbench
APPBENCH_FLAGS ?= -duration 6s

.PHONY: bench-appliance
bench-appliance: build
	$(BIN)/appbench $(APPBENCH_FLAGS)

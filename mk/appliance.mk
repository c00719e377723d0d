# The appliance end to end: latency per class at several loads and the
# appliance's own overhead (end to end minus model compute), ResNet-18 at
# batch 1 over kernel UDP on loopback, under appliance.policy "none" (unit
# shares) and "reef" (the scheduler) at the same request rates.

BENCH_TARGETS += bench-appliance
BINARIES += appbench=./tools/appbench
APPBENCH_FLAGS ?= -duration 6s

.PHONY: bench-appliance
bench-appliance: build
	$(BIN)/appbench $(APPBENCH_FLAGS)

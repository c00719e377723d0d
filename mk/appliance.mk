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

# Overload: one ResNet-18 IF (slo_ms 100, max_batch 8) at 1, 2 and 4 times
# its capacity, RT and BE requests mixed, under timeout_action "reject"
# and "serve_late": share answered ok, ok latency against the SLO, time to
# a refusal, goodput (ok within the SLO per second).
BENCH_TARGETS += bench-overload
OVERLOAD_FLAGS ?= -duration 6s

.PHONY: bench-overload
bench-overload: build
	$(BIN)/appbench -overload $(OVERLOAD_FLAGS)

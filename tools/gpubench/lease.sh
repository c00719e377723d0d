#!/usr/bin/env bash
# lease.sh: run-gpu.sh's steps inside one short device lease. Each step
# runs under its own time limit (a step cut by its limit leaves its log),
# and after each step everything run-gpu.sh wrote is packed into
# $OUT/gpu-results.tgz: a device tool that brings back only a few files
# from $OUT still gets every log, also when a later step is cut.
#
#   cd bin/gpu && ./lease.sh                     # the default plan below
#   ./lease.sh tests:110 disb:240                # STEP:SECONDS ...
#
# DISB_FLAGS (default: workloads A, D and E, short), KERNEL_BENCH, APPBENCH_FLAGS
# (default: 2 s a load, 10 swaps) and the other variables of run-gpu.sh
# apply. The plan's limits add up to 490 s, for a 10-minute command.
set -u
PACK=${OUT:-$PWD/out}
mkdir -p "$PACK"
export OUT=${LEASE_WORK:-${TMPDIR:-/tmp}/sluice-gpu-out}
mkdir -p "$OUT"
cd "$(dirname "$0")" || exit 1
# the default plan measures what the H200 runs up to 2026-11-30 left
# open (docs/benchmarks.md, "Fourth H200 run"): the GPU tests, the
# appliance's zero-copy DPDK path on the GPU, DISB A, D and E under reef
# against RT-only (preemption p50 and p99: why D and E take 1.7x A's),
# the backend benchmarks (one BE loop's preemption, the shadow's ready
# time) and the appliance under reef
PLAN=${*:-info:10 tests:120 zerocopy:40 disb:150 bench:100 appliance:70}
export DISB_FLAGS=${DISB_FLAGS:--workloads A,D,E -policies rt-only,reef -duration 4s -rounds 3 -restore-jobs 0 -calibrate 100ms}
export KERNEL_BENCH=${KERNEL_BENCH:-GPUPadOverhead}
export APPBENCH_FLAGS=${APPBENCH_FLAGS:--duration 2s -swaps 10}
t0=$(date +%s)
for item in $PLAN; do
	step=${item%%:*} limit=${item#*:}
	case $limit in '' | *[!0-9]*)
		echo "lease.sh: $item: want STEP:SECONDS" >&2
		exit 2
		;;
	esac
	echo "## t=$(($(date +%s) - t0)) s: $step (limit $limit s)"
	timeout -k 3 "$limit" ./run-gpu.sh "$step"
	rc=$?
	[ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "$step cut at $limit s" >>"$OUT/status.txt"
	tar czf "$PACK/gpu-results.tgz" -C "$OUT" . 2>/dev/null
done
echo "## t=$(($(date +%s) - t0)) s: done"
cat "$OUT/status.txt"

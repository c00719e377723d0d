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
# apply. The plan's limits add up to 520 s, for a 10-minute command.
set -u
PACK=${OUT:-$PWD/out}
mkdir -p "$PACK"
export OUT=${LEASE_WORK:-${TMPDIR:-/tmp}/sluice-gpu-out}
mkdir -p "$OUT"
cd "$(dirname "$0")" || exit 1
# the default plan measures what the H200 runs of 2026-11-26/27 left
# open (docs/benchmarks.md, "Second H200 run"): the GPU tests (the kernel
# tests and the int8 models on the GPU too), the kernel profile (which RT
# kernels a padded launch slows too much to pad: kprof.md's last column),
# DISB with padding under the scheduler (A, D and E, the policies padding
# is judged by, three rounds interleaved), InSS's profiles and latency
# model on SM shares, int8 against float32 latency, the 3-D U-Net, the
# appliance under reef
PLAN=${*:-info:10 tests:135 kprof:35 disb:155 inss:70 int8:25 volumes:20 appliance:70}
export DISB_FLAGS=${DISB_FLAGS:--workloads A,D,E -policies rt-only,reef,reef-nopad,seq -duration 4.5s -rounds 3 -restore-jobs 0 -calibrate 100ms}
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

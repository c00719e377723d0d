#!/usr/bin/env bash
# run-gpu.sh: the CUDA backend's GPU measurements, on a machine with an
# NVIDIA GPU and driver, python3 (numpy; torch and onnxruntime for the
# comparisons) and no Go. `make gpu-bundle` puts it in bin/gpu with
# everything it runs:
#
#   cuda.test    go test -c ./libml/cuda (the GPU tests and benchmarks)
#   gpubench     tools/gpubench (kernel profiles, ONNX export, latency)
#   disb         tools/disb (DISB through the appliance's scheduler, -device cuda)
#   appbench     tools/appbench (the whole appliance over UDP, -backend cuda)
#   inssprof     tools/inssprof (InSS's profiles and latency model, -device cuda)
#   appliance.test  go test -c ./appliance (the zero-copy DPDK path on the GPU)
#   models/      the classifier appliance.test serves
#   iproute/     ip (iproute2) with its libraries, for appliance.test's veth pair
#   lib/         the shared libraries appbench and appliance.test load first
#                (DPDK's, libzmq's and theirs; the appliance and zerocopy steps),
#                lib/pmds the DPDK driver plugins appliance.test's port loads
#   torchref.py  our outputs vs ONNX Runtime, our latency vs PyTorch
#
# The binaries come gzipped (the bundle's size limit); the script unpacks
# them once.
#
#   cd bin/gpu && ./run-gpu.sh [STEP...]      (default: every step)
#
# Steps, in order; each writes $OUT/<step>.log (OUT defaults to ./out):
#   info       nvidia-smi, driver, python modules
#   tests      SLUICE_GPU=1 cuda.test -test.run 'GPU|Kernel' (GPU kernel and backend
#              tests; the kernel tests run each kernel on the emulator and the GPU)
#   bench      GPUBackend benchmarks (-test.benchtime 50x) and the kernel ones
#   kernels    the kernel benchmarks alone (KERNEL_BENCH: a -test.bench pattern)
#   kprof      gpubench kprof: the DISB models' kernel profile -> kprof.md, kprof.json
#   disb       disb -device cuda: DISB A-E x rt-only/reef/reef-nopad/seq/conc/srpt/split
#              through libml/sched on the GPU, full-size models -> disb.md, disb.json
#   appliance  appbench -backend cuda: the appliance end to end (UDP on loopback, the IF
#              manager, the cuda backend) with ResNet-50 IFs under policy none and reef:
#              latency per class and load, overhead over compute -> appliance.json
#   zerocopy   SLUICE_GPU=1 appliance.test -test.run TestCUDAServesZeroCopyGPU: the appliance
#              with a DPDK port (net_af_packet on a veth pair; root and iproute2) and a UDP
#              port, a cuda IF under policy none and reef: zero host copies per DPDK
#              request, answers bit-identical to the GPU's own output
#   export     gpubench export: zoo models as ONNX + inputs + our outputs ($EXPORT_DIR)
#   check      torchref.py check: our outputs vs ONNX Runtime, tolerance 1e-3 -> check.json
#   latency    gpubench latency: ResNet-50, BERT-base at batch 1 and 8 -> latency.json
#   int8       gpubench latency: ResNet-18 and MobileNetV2, float32 beside int8 -> int8.json
#   volumes    gpubench latency: the 3-D U-Net (32x64x64 volumes) at batch 1 and 2 -> volumes.json
#   inss       inssprof -device cuda: InSS's profiles over batch and SM share, the latency
#              model against measurement alone and co-located -> inss.md, inss.json
#   speed      torchref.py speed: PyTorch eager next to latency.json -> speed.json
#   selftest   torchref.py selftest
# $OUT/status.txt gets "<step> <exit status>" per step; the script exits 1
# when a step failed. The export (about 1 GB) goes to EXPORT_DIR (default
# ${TMPDIR:-/tmp}/sluice-gpu-export, outside $OUT so that it is not
# shipped back with the reports) and is removed after a run that included
# speed, unless KEEP_EXPORT=1. speed reads $OUT/latency.json: run latency
# and speed in the same call. DISB_FLAGS adds disb flags (e.g. "-duration 8s
# -workloads A,C"), APPBENCH_FLAGS appbench flags (e.g. "-duration 2s"). A machine that limits one command to 10 minutes runs
# the steps in several calls, e.g. `./run-gpu.sh info tests`, then
# `./run-gpu.sh bench`, `./run-gpu.sh kprof disb`, `./run-gpu.sh export check
# latency speed selftest`.
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$HERE/out}
PY=${PYTHON:-python3}
DISB_FLAGS=${DISB_FLAGS:-}
APPBENCH_FLAGS=${APPBENCH_FLAGS:-}
EXPORT_DIR=${EXPORT_DIR:-${TMPDIR:-/tmp}/sluice-gpu-export}
ALL="info tests bench kprof disb appliance zerocopy int8 volumes inss export check latency speed selftest"
STEPS=${*:-$ALL}
mkdir -p "$OUT"
cd "$HERE" || exit 1
for z in *.gz; do
	[ -e "$z" ] || continue
	[ -e "${z%.gz}" ] || { gunzip -k "$z" && chmod +x "${z%.gz}"; } || exit 1
done

status=0

# world_writable DIR: whether DIR or a folder above it is writable by
# all, where DPDK refuses to load plugins ("world-writable and insecure").
world_writable() {
	local d=$1
	while [ -n "$d" ] && [ "$d" != / ]; do
		[ "$(stat -c %A "$d" 2>/dev/null | cut -c9)" = w ] && return 0
		d=$(dirname "$d")
	done
	return 1
}

# private_pmds: the folder of DPDK driver plugins to load, lib/pmds or,
# where the bundle lies under a world-writable folder (/tmp), a private
# copy of it under $HOME.
private_pmds() {
	local d
	if ! world_writable "$HERE/lib/pmds"; then
		echo "$HERE/lib/pmds"
		return
	fi
	d=$(mktemp -d "${HOME:-/root}/.sluice-pmds.XXXXXX") && cp "$HERE"/lib/pmds/*.so "$d"/ && echo "$d"
}

# run_step NAME CMD...: runs CMD with its output in $OUT/NAME.log.
run_step() {
	local name=$1
	shift
	local t0 rc
	t0=$(date +%s)
	echo "== $name: $*"
	"$@" >"$OUT/$name.log" 2>&1
	rc=$?
	echo "== $name: exit $rc after $(($(date +%s) - t0)) s ($OUT/$name.log)"
	echo "$name $rc" >>"$OUT/status.txt"
	[ "$rc" = 0 ] || status=1
	tail -n 5 "$OUT/$name.log"
}

step_info() {
	nvidia-smi || echo "nvidia-smi: not found"
	ls -l /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null || true
	"$PY" -c 'import sys, numpy; print("python", sys.version.split()[0], "numpy", numpy.__version__)'
	"$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.is_available())' || true
	"$PY" -c 'import onnxruntime as o; print("onnxruntime", o.__version__, o.get_available_providers())' || true
	uname -a
	nproc
}

for s in $STEPS; do
	case $s in
	info) run_step info step_info ;;
	tests) run_step tests env SLUICE_GPU=1 ./cuda.test -test.run 'GPU|Kernel' -test.v -test.timeout 30m ;;
	bench)
		run_step bench-backend env SLUICE_GPU=1 ./cuda.test -test.run - -test.bench GPUBackend \
			-test.benchtime 50x -test.timeout 30m
		run_step bench-kernels env SLUICE_GPU=1 ./cuda.test -test.run - -test.bench 'GPU[^B]' \
			-test.benchtime 50x -test.timeout 30m
		;;
	kernels)
		# the kernel benchmarks alone (bench without the backend's), KERNEL_BENCH
		# picks them, e.g. 'GPU(Conv|Unary|BatchGather)'
		run_step bench-kernels env SLUICE_GPU=1 ./cuda.test -test.run - \
			-test.bench "${KERNEL_BENCH:-GPU[^B]}" -test.benchtime 50x -test.timeout 30m
		;;
	kprof) run_step kprof ./gpubench kprof -md "$OUT/kprof.md" -json "$OUT/kprof.json" ;;
	disb)
		# shellcheck disable=SC2086 # DISB_FLAGS is a list of flags
		run_step disb ./disb -device cuda -full -workloads A,B,C,D,E -duration 6s -rounds 2 \
			-restore-jobs 20 -md "$OUT/disb.md" -json "$OUT/disb.json" -svg "$OUT/disb.svg" $DISB_FLAGS
		;;
	appliance)
		# lib/ for appbench alone: python and torch keep the machine's libraries
		# shellcheck disable=SC2086 # APPBENCH_FLAGS is a list of flags
		run_step appliance env LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			./appbench -backend cuda -model resnet50 -policies none,reef -duration 4s \
			-swaps 20 -json "$OUT/appliance.json" $APPBENCH_FLAGS
		;;
	zerocopy)
		# lib/pmds: DPDK's driver plugins (EAL -d); iproute/: ip, for the veth pair
		pmds=$(private_pmds)
		run_step zerocopy env SLUICE_GPU=1 SLUICE_REQUIRE_ROOT=1 SLUICE_MODELS_DIR="$HERE/models" \
			SLUICE_DPDK_PLUGINS="$pmds" PATH="$HERE/iproute:$PATH" \
			LD_LIBRARY_PATH="$HERE/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
			./appliance.test -test.run 'TestCUDAServesZeroCopyGPU' -test.v -test.timeout 5m
		[ "$pmds" = "$HERE/lib/pmds" ] || rm -rf "$pmds"
		;;
	export) run_step export ./gpubench export -dir "$EXPORT_DIR" ;;
	check) run_step check "$PY" torchref.py check --dir "$EXPORT_DIR" --json "$OUT/check.json" ;;
	latency)
		run_step latency ./gpubench latency -models resnet50,bert -batch 1,8 -n 100 -json "$OUT/latency.json"
		;;
	volumes)
		run_step volumes ./gpubench latency -models unet3d -batch 1,2 -n 20 -json "$OUT/volumes.json"
		;;
	inss)
		run_step inss ./inssprof -device cuda -models mlp,squeezenet11,mobilenetv2,resnet18 -size 224 \
			-batches 1,2,4,8 -holdout 3,6 -reps 7 -json "$OUT/inss.json" -md "$OUT/inss.md"
		;;
	int8)
		run_step int8 ./gpubench latency -models resnet18,resnet18-int8,mobilenetv2,mobilenetv2-int8 \
			-batch 1,8 -n 50 -json "$OUT/int8.json"
		;;
	speed)
		run_step speed "$PY" torchref.py speed --dir "$EXPORT_DIR" --models resnet50,bert --batch 1,8 \
			--runs 100 --ours "$OUT/latency.json" --json "$OUT/speed.json"
		;;
	selftest) run_step selftest "$PY" torchref.py selftest --tmp "$OUT" ;;
	*)
		echo "run-gpu.sh: unknown step $s (have: $ALL)" >&2
		exit 2
		;;
	esac
done

# the export's last reader is speed
if [ "${KEEP_EXPORT:-0}" != 1 ] && [ -d "$EXPORT_DIR" ]; then
	case " $STEPS " in
	*" speed "*) rm -rf "$EXPORT_DIR" ;;
	esac
fi
rm -f "$OUT"/selftest_*.onnx
exit $status

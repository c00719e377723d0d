# mk/gpu.mk: the CUDA backend's GPU measurements, built here and run on a
# GPU machine (which has no Go).
#
#   make gpu-bundle   bin/gpu/: cuda.test (go test -c ./libml/cuda),
#                     gpubench (tools/gpubench), disb (tools/disb), appbench
#                     (tools/appbench), inssprof (tools/inssprof) with the shared libraries the
#                     appliance links beyond glibc and the C++ runtime
#                     (lib/: DPDK's, libzmq's and theirs), torchref.py,
#                     run-gpu.sh and lease.sh (the steps under time limits,
#                     for a short device lease). The other binaries need no shared
#                     library beyond glibc (the cpu reference backend has
#                     its own GEMM since OpenBLAS was dropped). Binaries are
#                     stripped; the bundle must stay under 60 MiB (a device
#                     machine carries 64 MiB). The ONNX exports are not in
#                     it: run-gpu.sh makes them there with gpubench export.
#
# On the GPU machine: `cd bin/gpu && ./run-gpu.sh` (steps and outputs: the
# comment at the top of tools/gpubench/run-gpu.sh). Not part of `make
# test`; the tests of tools/gpubench check the script with bash -n.

BINARIES += gpubench=./tools/gpubench
# torchref.py's self-test and numpy check run in go test ./tools/gpubench
# (skipped without numpy).
APT_PACKAGES += python3-numpy

GPU_BUNDLE := $(BIN)/gpu
GPU_BUNDLE_MAX_MIB ?= 60

.PHONY: gpu-bundle

gpu-bundle: deps
	@rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)
	$(GO) test -c -ldflags='-s -w' -o $(GPU_BUNDLE)/cuda.test ./libml/cuda/
	$(GO) build -ldflags='-s -w' -o $(GPU_BUNDLE)/gpubench ./tools/gpubench/
	$(GO) build -ldflags='-s -w' -o $(GPU_BUNDLE)/disb ./tools/disb/
	$(GO) build -ldflags='-s -w' -o $(GPU_BUNDLE)/appbench ./tools/appbench/
	$(GO) build -ldflags='-s -w' -o $(GPU_BUNDLE)/inssprof ./tools/inssprof/
	@# appbench runs the appliance, which links DPDK and libzmq: their
	@# shared libraries travel in lib/ (glibc's and the C++ runtime stay
	@# the machine's)
	@mkdir -p $(GPU_BUNDLE)/lib
	ldd $(GPU_BUNDLE)/appbench | awk '$$3 ~ /^\// {print $$3}' | \
	  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | \
	  xargs -r -I{} cp -L {} $(GPU_BUNDLE)/lib/
	cp tools/gpubench/torchref.py tools/gpubench/run-gpu.sh tools/gpubench/lease.sh $(GPU_BUNDLE)/
	@chmod +x $(GPU_BUNDLE)/run-gpu.sh $(GPU_BUNDLE)/lease.sh $(GPU_BUNDLE)/torchref.py
	@bytes=$$(du -sb $(GPU_BUNDLE) | cut -f1); mib=$$((bytes >> 20)); \
	  echo "gpu-bundle: $(GPU_BUNDLE), $$mib MiB:"; ls -l $(GPU_BUNDLE) | sed 's/^/  /'; \
	  if [ $$bytes -gt $$(($(GPU_BUNDLE_MAX_MIB) << 20)) ]; then \
	    echo "gpu-bundle: $$mib MiB is over $(GPU_BUNDLE_MAX_MIB) MiB" >&2; exit 1; fi

# mk/gpu.mk: the CUDA backend's GPU measurements, built here and run on a
# GPU machine (which has no Go).
#
#   make gpu-bundle   bin/gpu/: cuda.test (go test -c ./libml/cuda),
#                     gpubench (tools/gpubench), disb (tools/disb), appbench
#                     (tools/appbench), inssprof (tools/inssprof) with the shared libraries the
#                     appliance links beyond glibc and the C++ runtime
#                     (lib/: DPDK's, libzmq's and theirs), appliance.test
#                     (go test -c ./appliance: the zero-copy DPDK path on the
#                     GPU) with models/ (the classifier it serves),
#                     torchref.py, run-gpu.sh and lease.sh (the steps under
#                     time limits, for a short device lease). The other
#                     binaries need no shared library beyond glibc (the cpu
#                     reference backend has its own GEMM since OpenBLAS was
#                     dropped). Binaries are stripped and gzipped (run-gpu.sh
#                     unpacks them); the bundle must stay under 60 MiB (a
#                     device machine carries 64 MiB). The ONNX exports are
#                     not in it: run-gpu.sh makes them there with gpubench
#                     export.
#
# On the GPU machine: `cd bin/gpu && ./run-gpu.sh` (steps and outputs: the
# comment at the top of tools/gpubench/run-gpu.sh). Not part of `make
# test`; the tests of tools/gpubench check the script with bash -n.

BINARIES += gpubench=./tools/gpubench
# torchref.py's self-test and numpy check run in go test ./tools/gpubench
# (skipped without numpy).
APT_PACKAGES += python3-numpy

GPU_BUNDLE := $(BIN)/gpu
# the DPDK driver plugins appliance.test's port loads (EAL -d lib/pmds; the
# GPU machine has no DPDK), and the libraries they need, into lib/.
# Recursive: DPDK is installed by deps, after the Makefile was read.
DPDK_PMDS_DIR = $(firstword $(wildcard $(shell pkg-config --variable=libdir libdpdk 2>/dev/null)/dpdk/pmds-*))
GPU_DPDK_PLUGINS := librte_net_af_packet librte_mempool_ring
GPU_BUNDLE_MAX_MIB ?= 60
# bundle_libs BINARY,DIR: copies the shared libraries BINARY loads into
# DIR, but for glibc's and the C++ runtime's (the GPU machine has those)
bundle_libs = ldd $(1) | awk '$$3 ~ /^\// {print $$3}' | \
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libresolv|libstdc\+\+|libgcc_s|ld-linux[^/]*)\.so' | \
  xargs -r -I{} cp -L {} $(2)/

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
	$(call bundle_libs,$(GPU_BUNDLE)/appbench,$(GPU_BUNDLE)/lib)
	$(GO) test -c -ldflags='-s -w' -o $(GPU_BUNDLE)/appliance.test ./appliance/
	@# its DPDK port's driver plugins (-d lib/pmds) and their libraries;
	@# the vdev bus only as a library, so that it is loaded once
	@test -d "$(DPDK_PMDS_DIR)" || { echo "gpu-bundle: no DPDK plugin folder" >&2; exit 1; }
	@mkdir -p $(GPU_BUNDLE)/lib/pmds
	for p in $(GPU_DPDK_PLUGINS); do cp -L $(DPDK_PMDS_DIR)/$$p.so $(GPU_BUNDLE)/lib/pmds/; done
	$(call bundle_libs,$(GPU_BUNDLE)/lib/pmds/*.so,$(GPU_BUNDLE)/lib)
	@# iproute2, which the GPU machine lacks: ip with its libraries
	@# behind a wrapper (the test makes its veth pair and namespace with it)
	@mkdir -p $(GPU_BUNDLE)/iproute/libs
	cp -L $$(command -v ip) $(GPU_BUNDLE)/iproute/ip.bin
	$(call bundle_libs,$(GPU_BUNDLE)/iproute/ip.bin,$(GPU_BUNDLE)/iproute/libs)
	printf '#!/bin/sh\nd=$$(dirname "$$0")\nLD_LIBRARY_PATH="$$d/libs" exec "$$d/ip.bin" "$$@"\n' >$(GPU_BUNDLE)/iproute/ip
	@chmod +x $(GPU_BUNDLE)/iproute/ip
	@mkdir -p $(GPU_BUNDLE)/models
	cp $(MODELS_DIR)/ch_ppocr_mobile_v2.0_cls_infer.onnx $(GPU_BUNDLE)/models/
	gzip -9 -n $(addprefix $(GPU_BUNDLE)/,cuda.test gpubench disb appbench inssprof appliance.test)
	cp tools/gpubench/torchref.py tools/gpubench/run-gpu.sh tools/gpubench/lease.sh $(GPU_BUNDLE)/
	@chmod +x $(GPU_BUNDLE)/run-gpu.sh $(GPU_BUNDLE)/lease.sh $(GPU_BUNDLE)/torchref.py
	@bytes=$$(du -sb $(GPU_BUNDLE) | cut -f1); mib=$$((bytes >> 20)); \
	  echo "gpu-bundle: $(GPU_BUNDLE), $$mib MiB:"; ls -l $(GPU_BUNDLE) | sed 's/^/  /'; \
	  if [ $$bytes -gt $$(($(GPU_BUNDLE_MAX_MIB) << 20)) ]; then \
	    echo "gpu-bundle: $$mib MiB is over $(GPU_BUNDLE_MAX_MIB) MiB" >&2; exit 1; fi

# mk/gpu.mk: the CUDA backend's GPU measurements, built here and run on a
# GPU machine (which has no Go).
#
#   make gpu-bundle   bin/gpu/: cuda.test (go test -c ./libml/cuda),
#                     gpubench (tools/gpubench), lib/ (the OpenBLAS
#                     libraries the cpu reference backend links, found
#                     with ldd), torchref.py and run-gpu.sh. Binaries are
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
GPU_LIBS := libopenblas.so.0 libgfortran.so.5 libquadmath.so.0

.PHONY: gpu-bundle

gpu-bundle: deps
	@rm -rf $(GPU_BUNDLE) && mkdir -p $(GPU_BUNDLE)/lib
	$(GO) test -c -ldflags='-s -w' -o $(GPU_BUNDLE)/cuda.test ./libml/cuda/
	$(GO) build -ldflags='-s -w' -o $(GPU_BUNDLE)/gpubench ./tools/gpubench/
	@for l in $(GPU_LIBS); do \
	  p=$$(ldd $(GPU_BUNDLE)/cuda.test | awk -v l=$$l '$$1 == l { print $$3 }'); \
	  [ -n "$$p" ] && [ -e "$$p" ] || { echo "gpu-bundle: $$l not found by ldd" >&2; exit 1; }; \
	  cp -L $$p $(GPU_BUNDLE)/lib/; \
	done
	cp tools/gpubench/torchref.py tools/gpubench/run-gpu.sh $(GPU_BUNDLE)/
	@chmod +x $(GPU_BUNDLE)/run-gpu.sh $(GPU_BUNDLE)/torchref.py
	@bytes=$$(du -sb $(GPU_BUNDLE) | cut -f1); mib=$$((bytes >> 20)); \
	  echo "gpu-bundle: $(GPU_BUNDLE), $$mib MiB:"; ls -l $(GPU_BUNDLE) $(GPU_BUNDLE)/lib | sed 's/^/  /'; \
	  if [ $$bytes -gt $$(($(GPU_BUNDLE_MAX_MIB) << 20)) ]; then \
	    echo "gpu-bundle: $$mib MiB is over $(GPU_BUNDLE_MAX_MIB) MiB" >&2; exit 1; fi

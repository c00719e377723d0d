# mk/cuda.mk: the CUDA backend's kernels (native/cuda/*.cu) compiled to PTX
# and checked by ptxas; the PTX is embedded by libml/cuda (go:embed).
#
# `make cuda-ptx` (part of `make test`):
#   1. cuda-deps: clang-19 from apt when missing; ptxas, when missing, from
#      Debian's nvidia-cuda-toolkit .deb (bookworm non-free, CUDA 11.8):
#      `apt-get download` through a private apt configuration under
#      third_party/cuda/apt (the machine's own sources and lists are not
#      touched), then `dpkg-deb -x` of /usr/bin/ptxas alone into
#      third_party/cuda. ptxas needs only glibc.
#   2. every native/cuda/*.cu -> PTX (sm_80, PTX ISA 7.0) with clang-19,
#      -Wall -Wextra -Werror;
#   3. `ptxas -arch=sm_80 -v` on each PTX: a table of registers, shared
#      memory, stack, spills and blocks per SM per kernel; the target fails
#      on any ptxas error and on spills above the allowance (below);
#   4. the PTX goes to libml/cuda/ptx/ (only files whose text changed are
#      rewritten) and must match what is committed there, so `go build`
#      works on a clean clone without clang; the check is skipped while
#      native/cuda itself has uncommitted changes (work in progress).
#
# Spills: none allowed, except sg_pad (the padding kernel inlines every
# operator behind one switch and holds their parameters in registers, not
# in the constant bank): up to 64 bytes, which ptxas spends on the
# dispatcher's loop state once per padded block, not in operator loops.
# A spill anywhere else means a kernel outgrew its registers: fix it.

APT_PACKAGES += clang-19
TEST_EXTRA += cuda-ptx

CUDA_CLANG ?= clang-19
CUDA_ARCH ?= sm_80
CUDA_DIR := $(THIRD)/cuda
PTXAS := $(CUDA_DIR)/usr/bin/ptxas
CUDA_PTX_DIR := libml/cuda/ptx
CUDA_BUILD := $(CUDA_DIR)/build
CUDA_SRCS := $(sort $(wildcard native/cuda/*.cu))
CUDA_CFLAGS := -x cuda --cuda-device-only -nocudainc -nocudalib \
	--cuda-gpu-arch=$(CUDA_ARCH) -Xclang -target-feature -Xclang +ptx70 \
	-O3 -S -Wall -Wextra -Werror
CUDA_SPILL_MAX ?= 0
CUDA_SPILL_ALLOW ?= sg_pad=64

# Where ptxas comes from (Debian bookworm non-free).
CUDA_DEB_MIRROR ?= http://deb.debian.org/debian
CUDA_DEB_PACKAGE ?= nvidia-cuda-toolkit
CUDA_APT := $(CUDA_DIR)/apt
CUDA_APT_OPTS = -o Dir::Etc::SourceList=$(CUDA_APT)/sources.list \
	-o Dir::Etc::SourceParts=/dev/null \
	-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null \
	-o Dir::State::Lists=$(CUDA_APT)/lists -o Dir::State::status=/dev/null \
	-o Dir::Cache=$(CUDA_APT)/cache -o Dir::Cache::pkgcache= \
	-o Dir::Cache::srcpkgcache= -o APT::Sandbox::User=root \
	-o Debug::NoLocking=1

.PHONY: cuda-ptx cuda-deps

cuda-deps:
	@command -v $(CUDA_CLANG) >/dev/null || { \
	  [ "$$(id -u)" = 0 ] || { echo "cuda-deps: need root to install clang-19" >&2; exit 1; }; \
	  echo "apt-get install clang-19"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends clang-19 >/dev/null; }
	@if [ ! -x $(PTXAS) ]; then \
	  echo "fetching ptxas: apt-get download $(CUDA_DEB_PACKAGE) (bookworm non-free)"; \
	  rm -rf $(CUDA_APT) && mkdir -p $(CUDA_APT)/lists/partial $(CUDA_APT)/cache/archives/partial $(CUDA_APT)/deb && \
	  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $(CUDA_DEB_MIRROR) bookworm non-free" \
	    > $(CUDA_APT)/sources.list && \
	  apt-get $(CUDA_APT_OPTS) update -qq && \
	  ( cd $(CUDA_APT)/deb && apt-get $(CUDA_APT_OPTS) download -qq $(CUDA_DEB_PACKAGE) ) && \
	  deb=$$(ls $(CUDA_APT)/deb/*.deb) && \
	  dpkg-deb --fsys-tarfile $$deb | tar -x -C $(CUDA_DIR) ./usr/bin/ptxas && \
	  echo "ptxas from $$(basename $$deb)" > $(CUDA_DIR)/ptxas.source && \
	  rm -rf $(CUDA_APT) || { rm -rf $(CUDA_APT); echo "cuda-deps: could not fetch ptxas" >&2; exit 1; }; \
	  $(PTXAS) --version | grep release; \
	fi

cuda-ptx: cuda-deps
	@rm -rf $(CUDA_BUILD) && mkdir -p $(CUDA_BUILD) $(CUDA_PTX_DIR)
	@printf '%s\n' $(CUDA_SRCS) | xargs -P $$(nproc) -I{} sh -c \
	  'f={}; n=$$(basename $$f .cu); $(CUDA_CLANG) $(CUDA_CFLAGS) -o $(CUDA_BUILD)/$$n.ptx $$f' \
	  || { echo "cuda-ptx: clang failed" >&2; exit 1; }
	@for f in $(CUDA_BUILD)/*.ptx; do \
	  echo "== $$(basename $$f)"; \
	  $(PTXAS) -arch=$(CUDA_ARCH) -v -o /dev/null $$f 2>&1 || echo "== PTXAS-FAILED $$f"; \
	done > $(CUDA_BUILD)/ptxas.log
	@if grep -q "PTXAS-FAILED\|error" $(CUDA_BUILD)/ptxas.log; then \
	  cat $(CUDA_BUILD)/ptxas.log >&2; echo "cuda-ptx: ptxas failed" >&2; exit 1; fi
	@awk -v spill_max=$(CUDA_SPILL_MAX) -v allow="$(CUDA_SPILL_ALLOW)" \
	  -f native/cuda/ptxas-report.awk $(CUDA_BUILD)/ptxas.log
	@for f in $(CUDA_BUILD)/*.ptx; do \
	  cmp -s $$f $(CUDA_PTX_DIR)/$$(basename $$f) || cp $$f $(CUDA_PTX_DIR)/; \
	done; \
	for f in $(CUDA_PTX_DIR)/*.ptx; do \
	  [ -e $(CUDA_BUILD)/$$(basename $$f) ] || { echo "rm $$f (no source)"; rm -f $$f; }; \
	done
	@if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then \
	  if [ -n "$$(git status --porcelain -- native/cuda)" ]; then \
	    echo "cuda-ptx: native/cuda has uncommitted changes: $(CUDA_PTX_DIR) regenerated, not checked"; \
	  elif [ -n "$$(git status --porcelain -- $(CUDA_PTX_DIR))" ]; then \
	    git status --short -- $(CUDA_PTX_DIR) >&2; \
	    echo "cuda-ptx: $(CUDA_PTX_DIR) does not match native/cuda: commit the regenerated PTX" >&2; \
	    exit 1; \
	  fi; \
	fi
	@echo "cuda-ptx: $(words $(CUDA_SRCS)) files, PTX in $(CUDA_PTX_DIR)"

# `make cuda-gpu-bin`: the libml/cuda test binary, to carry to a GPU
# machine (it needs nothing else: the PTX is embedded). There:
#   SLUICE_GPU=1 ./cuda.test -test.v
#   SLUICE_GPU=1 ./cuda.test -test.run - -test.bench GPU
.PHONY: cuda-gpu-bin
cuda-gpu-bin:
	@mkdir -p $(BIN)
	$(GO) test -c -o $(BIN)/cuda.test ./libml/cuda/

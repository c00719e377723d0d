# mk/engine.mk: libml's CPU inference engine (native/cpu kernels and worker
# pool, libml/engine compiler, libml/cpu backend, libml/zoo models).
#
#   make bench-engine    latency of #15's models on the cpu backend and
#                        ONNX Runtime (when libml/ort finds its library):
#                        ENGINEBENCH_MODELS, by default ResNet-18/50,
#                        MobileNetV2, the BERT-shaped encoder, the tiny MLP,
#                        PaddleOCR's classifier and detector and an int8
#                        ResNet-18; preemption-check overhead, RSS, load
#                        times; prints a markdown report. ENGINEBENCH_FLAGS
#                        adds flags (e.g. -models resnet18 -time 5s -units 2).
#   make check-native-cpu  the C kernels compile -Wall -Wextra clean, with
#                        and without the preemption checks, and the padding
#                        selector's header (part of make test).

BINARIES += quantize=./tools/quantize

ENGINEBENCH_MODELS ?= resnet18,resnet50,mobilenetv2,bert,mlp,ppocr-cls,ppocr-det,resnet18-int8
ENGINEBENCH_FLAGS ?=

BENCH_TARGETS += bench-engine
TEST_EXTRA += check-native-cpu

.PHONY: bench-engine check-native-cpu

check-native-cpu:
	@for chk in 1 0; do for f in native/cpu/*.c; do \
	  gcc -std=gnu11 -O2 -Wall -Wextra -Werror -DSK_CHECKS=$$chk \
	    -fsyntax-only $$f || exit 1; \
	done; done; echo "native/cpu: C kernels compile -Wall -Wextra clean"
	@gcc -std=gnu11 -O2 -Wall -Wextra -Werror -fsyntax-only -x c native/padsel/padsel.h && \
	  echo "native/padsel: padsel.h compiles -Wall -Wextra clean"

bench-engine: deps
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/enginebench ./tools/enginebench
	$(GO) build -tags sluice_nopreempt -o $(BIN)/enginebench-nochk ./tools/enginebench
	$(BIN)/enginebench -nochk $(BIN)/enginebench-nochk -models $(ENGINEBENCH_MODELS) $(ENGINEBENCH_FLAGS)

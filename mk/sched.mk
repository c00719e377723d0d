# mk/sched.mk: the GPU-style scheduler (libml/sched: reset-based
# preemption, dynamic kernel padding, reef/seq/conc/srpt/split policies)
# and its tools.
#
#   make bench-sched     kprof profiles of the DISB models, then the DISB
#                        benchmark (tools/disb): workloads A-E and a trace,
#                        every policy plus RT-only, a markdown report
#                        (bin/disb-report.md), JSON and an SVG plot.
#                        DISB_FLAGS adds flags (e.g. -duration 12s
#                        -rounds 4 -workloads A,C). DISB_NICE is the nice
#                        adjustment the benchmark runs at (default -10: the
#                        machine is shared; as non-root nice refuses and it
#                        runs at the normal priority).
#   make test-sched-race the scheduler and the runtime's scheduler support
#                        under the race detector (part of make test).

BINARIES += disb=./tools/disb kprof=./tools/kprof idemcheck=./tools/idemcheck splitter=./tools/splitter
BENCH_TARGETS += bench-sched
TEST_EXTRA += test-sched-race

DISB_FLAGS ?=
DISB_NICE ?= -10
SCHED_PROFILES := $(BIN)/sched-profiles

.PHONY: bench-sched test-sched-race

test-sched-race: deps
	$(GO) test -race -count=1 -timeout 10m ./libml/sched
	$(GO) test -race -count=1 -timeout 10m -run 'LaunchRange|HostQueue|Flag|Pad|DrainNotify|Priority|Checks|Hold' ./native/cpu

bench-sched: deps
	@mkdir -p $(BIN) $(SCHED_PROFILES)
	$(GO) build -o $(BIN)/kprof ./tools/kprof
	$(GO) build -o $(BIN)/disb ./tools/disb
	$(BIN)/kprof -q -name RNET -model resnet50 -h 32 -w 32 -classes 10 -o $(SCHED_PROFILES)/RNET.json
	$(BIN)/kprof -q -name VGG -model vgg16 -h 32 -w 32 -classes 10 -o $(SCHED_PROFILES)/VGG.json
	$(BIN)/kprof -q -name YOLO -model resnet18 -h 32 -w 32 -classes 10 -o $(SCHED_PROFILES)/YOLO.json
	$(BIN)/kprof -q -name BERT -model bert -layers 4 -seq 32 -hidden 128 -heads 4 -ff 512 -o $(SCHED_PROFILES)/BERT.json
	$(BIN)/kprof -q -name GPT2 -model mobilenetv2 -h 48 -w 48 -classes 10 -o $(SCHED_PROFILES)/GPT2.json
	nice -n $(DISB_NICE) $(BIN)/disb -profiles $(SCHED_PROFILES) -trace tools/disb/testdata/perception.trace \
	  -md $(BIN)/disb-report.md -json $(BIN)/disb-report.json -svg $(BIN)/disb.svg $(DISB_FLAGS)

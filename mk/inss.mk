# inss: InSS's interference-aware latency model (orchestrator/inss) and
# its profiler on the cpu device (tools/inssprof): observed against
# predicted computing times, alone at held-out batch sizes and
# co-located (docs/benchmarks.md, "InSS latency model").

BINARIES += inssprof=./tools/inssprof
BENCH_TARGETS += bench-inss

INSSPROF_FLAGS ?=

.PHONY: bench-inss

bench-inss: build
	$(BIN)/inssprof $(INSSPROF_FLAGS)

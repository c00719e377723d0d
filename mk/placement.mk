# placement: InSS's placement policies compared on its latency model
# (orchestrator/inss) in a simulated cluster (tools/placementsim), driven
# by recorded profiles (tools/inssprof -json; the cpu device's are in
# tools/placementsim/testdata). See docs/benchmarks.md, "Placement".

BINARIES += placementsim=./tools/placementsim
BENCH_TARGETS += bench-placement

PLACEMENTSIM_FLAGS ?= -md $(BIN)/placement.md -svg $(BIN)/placement.svg

.PHONY: bench-placement

bench-placement: build
	$(BIN)/placementsim $(PLACEMENTSIM_FLAGS)

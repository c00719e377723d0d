# dpdk port driver: dataplane/dpdk (Go, cgo) over native/dpdk (C).
#
# The C sources live in native/dpdk; dataplane/dpdk holds symlinks to them
# (sl_*.c, sl_*.h) so that cgo compiles them and the Go build cache notices
# when they change.

APT_PACKAGES += libdpdk-dev libpcap-dev pkg-config iproute2
TEST_EXTRA += dpdk-cwarn
BENCH_TARGETS += bench-dpdk

DPDK_CFLAGS = $(shell pkg-config --cflags libdpdk 2>/dev/null) -DALLOW_EXPERIMENTAL_API
DPDK_BENCH_FLAGS ?= -run '^$$' -bench . -benchtime 2s -count 1

.PHONY: dpdk-cwarn bench-dpdk

# Every C file of the binding compiles without a warning under -Wall -Wextra.
dpdk-cwarn: deps
	@for f in native/dpdk/*.c; do \
	  gcc -fsyntax-only -O2 -Wall -Wextra -Werror $(DPDK_CFLAGS) $$f || exit 1; \
	done; echo "dpdk-cwarn: native/dpdk/*.c clean under -Wall -Wextra"

# Raw rx ceiling (net_pcap infinite replay) and the full rx path; needs root.
bench-dpdk: deps
	$(GO) test $(DPDK_BENCH_FLAGS) ./dataplane/dpdk/
	@rm -rf /var/run/dpdk/sluice-* 2>/dev/null || true

# `make run`: the appliance end to end on this machine (root): a veth pair
# in a network namespace, sluice on DPDK net_af_packet with
# profiles/demo.toml, framecast for DURATION, a report, and a clean-up.

APT_PACKAGES += ethtool iputils-ping
BINARIES += framecast=./tools/framecast
DURATION ?= 20s

.PHONY: run
run: build
	DURATION=$(DURATION) tools/demo/run.sh

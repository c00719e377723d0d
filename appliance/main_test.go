package appliance

import (
	"fmt"
	"os"
	"testing"

	"sluice/dataplane/dpdk"
)

// TestMain starts the DPDK EAL once for the whole test binary when the
// tests run as root: the EAL lives once per process and cannot start
// again after its cleanup, and several tests open DPDK ports (each
// appliance then opens its ports on the running EAL and leaves it to the
// process). It is cleaned up after the last test. SLUICE_DPDK_PLUGINS
// names a folder of DPDK driver plugins to load (EAL -d) where DPDK is
// not installed: the GPU bundle's lib/pmds.
func TestMain(m *testing.M) {
	eal := false
	if os.Geteuid() == 0 && dpdk.Available {
		args := []string{"-l", "0", "--no-huge", "--no-pci", "-m", "512", "--no-shconf", "--no-telemetry",
			"--file-prefix", fmt.Sprintf("sluice-apptest-%d", os.Getpid())}
		if d := os.Getenv("SLUICE_DPDK_PLUGINS"); d != "" {
			args = append(args, "-d", d)
		}
		if err := dpdk.InitEAL(args); err != nil {
			fmt.Fprintf(os.Stderr, "appliance tests: DPDK EAL: %v (the DPDK tests will fail)\n", err)
		} else {
			eal = true
		}
	}
	code := m.Run()
	if eal {
		if err := dpdk.CleanupEAL(); err != nil {
			fmt.Fprintf(os.Stderr, "appliance tests: DPDK EAL cleanup: %v\n", err)
		}
	}
	os.Exit(code)
}

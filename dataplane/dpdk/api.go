package dpdk

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
)

// Errors about the process-wide EAL state.
var (
	// ErrEALNotInitialized is returned by Open before InitEAL succeeded.
	ErrEALNotInitialized = errors.New("dpdk: EAL not initialized (call dpdk.InitEAL first)")
	// ErrEALClosed is returned by InitEAL and Open after CleanupEAL: DPDK
	// cannot start its EAL twice in one process.
	ErrEALClosed = errors.New("dpdk: EAL already cleaned up in this process")
)

// ErrUnsupported is returned by InitEAL and Open in builds without DPDK
// (not Linux, or cgo disabled; see Available).
var ErrUnsupported = errors.New("dpdk: not available in this build (needs linux, cgo and libdpdk)")

// ErrBuffersHeld is returned (wrapped) by Close when receive buffers were not
// released: the pool and its region are then left allocated so that the
// holders never read freed memory, until a later Close finds them back.
var ErrBuffersHeld = errors.New("buffers still held by callers")

// FilePrefix is the --file-prefix DefaultEALArgs uses: "sluice-<pid>",
// unique per process, so that concurrent test binaries and appliances never
// share /var/run/dpdk/<prefix>.
func FilePrefix() string { return fmt.Sprintf("sluice-%d", os.Getpid()) }

// DefaultEALArgs returns EAL arguments that work in containers and VMs
// without hugepages or PCI devices: main lcore 0, 256 MiB of anonymous EAL
// memory, no shared config files, no telemetry socket, and a per-process
// file prefix. extra is appended (for example "--vdev=net_ring0" or
// "--log-level=lib.eal:debug").
func DefaultEALArgs(extra ...string) []string {
	args := []string{
		"-l", "0",
		"--no-huge",
		"--no-pci",
		"-m", "256",
		"--no-shconf",
		"--no-telemetry",
		"--file-prefix", FilePrefix(),
	}
	return append(args, extra...)
}

// filePrefixOf returns the --file-prefix value in EAL args, or "".
func filePrefixOf(args []string) string {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--file-prefix="); ok {
			return v
		}
		if a == "--file-prefix" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// RegionInfo describes a port's buffer region.
type RegionInfo struct {
	Base, Size uintptr
	PageSize   uintptr
	// Hugepages is true when the region is on hugepages (MAP_HUGETLB).
	Hugepages bool
	// Locked is true when the region cannot be swapped out (hugepages,
	// or mlock succeeded).
	Locked bool
	// DMAMapped is true when rte_dev_dma_map accepted the region for the
	// device: a real mapping for PCI devices under VFIO, a no-op the vdev
	// bus accepts for vdevs (they do not DMA). False when the bus does not
	// support it (ENOTSUP), which Open tolerates.
	DMAMapped bool
}

// Rate is the result of MeasureRawRx.
type Rate struct {
	Packets uint64
	Elapsed time.Duration
}

// PPS returns packets per second.
func (r Rate) PPS() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Packets) / r.Elapsed.Seconds()
}

// MeasureRawRx polls p with RxRaw for d and returns how many frames it
// received: the rate at which the device alone delivers frames, with no
// parsing and no Go-side work, which bounds any pipeline built on the port.
// Use a source that never runs dry (net_pcap with infinite_rx=1).
func MeasureRawRx(p *Port, d time.Duration) Rate {
	var n uint64
	start := time.Now()
	deadline := start.Add(d)
	for i := 0; ; i++ {
		n += uint64(p.RxRaw(MaxBurst))
		if i&255 == 255 && time.Now().After(deadline) {
			break
		}
	}
	return Rate{Packets: n, Elapsed: time.Since(start)}
}

//go:build !linux || !cgo

package dpdk

import (
	"net/netip"
	"unsafe"

	"sluice/dataplane"
)

// Available reports whether this build includes DPDK: false here (not
// Linux, or cgo disabled).
const Available = false

// InitEAL returns ErrUnsupported in this build.
func InitEAL(args []string) error { return ErrUnsupported }

// EALInitialized returns false in this build.
func EALInitialized() bool { return false }

// RuntimeDir returns "" in this build.
func RuntimeDir() string { return "" }

// CleanupEAL does nothing in this build.
func CleanupEAL() error { return nil }

// Version returns "" in this build.
func Version() string { return "" }

// Port is a DPDK port; it cannot be opened in this build.
type Port struct{ cfg Config }

var _ dataplane.Port = (*Port)(nil)

// Open validates cfg and returns ErrUnsupported.
func Open(cfg Config) (*Port, error) {
	if _, err := cfg.normalize(); err != nil {
		return nil, err
	}
	return nil, ErrUnsupported
}

// Name returns "".
func (p *Port) Name() string { return "" }

// PortID returns 0.
func (p *Port) PortID() uint16 { return 0 }

// Driver returns "".
func (p *Port) Driver() string { return "" }

// MAC returns the zero address.
func (p *Port) MAC() [6]byte { return [6]byte{} }

// IP returns the configured address.
func (p *Port) IP() netip.Addr { return p.cfg.IP }

// MTU returns 0.
func (p *Port) MTU() int { return 0 }

// MaxPayload returns 0.
func (p *Port) MaxPayload() int { return 0 }

// Config returns the configuration.
func (p *Port) Config() Config { return p.cfg }

// Region returns 0, 0.
func (p *Port) Region() (ptr uintptr, size uintptr) { return 0, 0 }

// PacketRegion returns nil, 0.
func (p *Port) PacketRegion() (unsafe.Pointer, int) { return nil, 0 }

// RegionInfo returns the zero RegionInfo.
func (p *Port) RegionInfo() RegionInfo { return RegionInfo{} }

// LinkUp returns false.
func (p *Port) LinkUp() bool { return false }

// RxBurst returns ErrUnsupported.
func (p *Port) RxBurst(pkts []dataplane.Packet) (int, error) { return 0, ErrUnsupported }

// RxRaw returns 0.
func (p *Port) RxRaw(n int) int { return 0 }

// RxRawHold returns 0.
func (p *Port) RxRawHold(n, hold int) int { return 0 }

// PoolOps returns "".
func (p *Port) PoolOps() string { return "" }

// Release does nothing.
func (p *Port) Release(bufs []dataplane.BufRef) {}

// TxBurst returns ErrUnsupported.
func (p *Port) TxBurst(dgs []dataplane.Datagram) (int, error) { return 0, ErrUnsupported }

// Stats returns zeros.
func (p *Port) Stats() dataplane.PortStats { return dataplane.PortStats{} }

// DriverStats returns zeros.
func (p *Port) DriverStats() DriverStats { return DriverStats{} }

// Close does nothing.
func (p *Port) Close() error { return nil }

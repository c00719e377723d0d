//go:build !linux

package udp

import (
	"context"
	"errors"
	"net/netip"

	"sluice/dataplane"
)

// errUnsupported is what every call returns off Linux.
var errUnsupported = errors.New("udp: the udp port driver needs Linux (recvmmsg, sendmmsg)")

// Port is a dataplane.Port over one UDP socket. Off Linux it cannot be
// opened.
type Port struct{}

// Open fails off Linux.
func Open(ctx context.Context, cfg Config) (*Port, error) { return nil, errUnsupported }

// LocalAddr returns the zero address.
func (p *Port) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// RxBurst fails off Linux.
func (p *Port) RxBurst(pkts []dataplane.Packet) (int, error) { return 0, errUnsupported }

// Release does nothing off Linux.
func (p *Port) Release(bufs []dataplane.BufRef) {}

// TxBurst fails off Linux.
func (p *Port) TxBurst(dgs []dataplane.Datagram) (int, error) { return 0, errUnsupported }

// Wait fails off Linux.
func (p *Port) Wait(timeoutNS int64) error { return errUnsupported }

// Stats returns zero counters.
func (p *Port) Stats() dataplane.PortStats { return dataplane.PortStats{} }

// DriverStats returns zero counters.
func (p *Port) DriverStats() DriverStats { return DriverStats{} }

// Close does nothing off Linux.
func (p *Port) Close() error { return nil }

var (
	_ dataplane.Port   = (*Port)(nil)
	_ dataplane.Waiter = (*Port)(nil)
)

// Package dataplane defines what every packet I/O driver provides (bursts of
// received datagrams, batched transmit, buffer release) and the drop
// accounting shared by the dataplane's stages. The drivers live in the
// subpackages dpdk, udp and mem; reassembly and egress in reasm and egress.
package dataplane

import (
	"net/netip"
	"unsafe"

	"sluice/dataplane/wire"
)

// Endpoint says where a datagram came from, with enough detail to answer it
// through the same driver.
type Endpoint struct {
	// Addr is the remote IP address and UDP port.
	Addr netip.AddrPort
	// Local is the IP address and UDP port the datagram was sent to. L2
	// drivers (dpdk) use it as the source of the reply.
	Local netip.AddrPort
	// MAC is the remote link-layer address (L2 drivers only; zero otherwise).
	MAC [6]byte
}

// BufRef is a driver's opaque handle to one receive buffer (an mbuf pointer
// for dpdk, a slab index for udp and mem). It is given back with Release.
type BufRef uint64

// Packet is one received sluice datagram. Data is the UDP payload, header
// included, and aliases driver-owned memory: it stays valid until Buf is
// released, and must not be written.
type Packet struct {
	Data []byte
	From Endpoint
	Buf  BufRef
}

// Datagram is one datagram to transmit: a sluice header followed by a
// payload. The driver copies both into its own transmit buffer, so the caller
// may reuse them as soon as TxBurst returns.
type Datagram struct {
	To      Endpoint
	Header  [wire.HeaderLen]byte
	Payload []byte
}

// PortStats are a driver's cumulative counters and its buffer pool level.
type PortStats struct {
	RxPackets uint64 // sluice datagrams handed to RxBurst callers
	RxBytes   uint64 // their UDP payload bytes
	TxPackets uint64 // datagrams accepted by TxBurst
	TxBytes   uint64 // their UDP payload bytes
	// RxFiltered counts frames the driver consumed itself or discarded
	// before they became Packets: ARP, other protocols, other UDP ports, IP
	// fragments, bad L3/L4 headers.
	RxFiltered uint64
	// RxMissed counts packets the device or kernel dropped for lack of
	// buffers (imissed / rx_nombuf / socket overflow), where the driver can
	// see them.
	RxMissed uint64
	// TxFailed counts datagrams TxBurst could not send.
	TxFailed uint64
	// BufInUse is how many receive buffers are out of the pool now: held by
	// callers or queued in the driver. BufCapacity is the pool's size.
	BufInUse    uint64
	BufCapacity uint64
}

// Port is a packet I/O driver. RxBurst, Release and TxBurst are called from
// one goroutine, the port's I/O loop; Stats may be called from any.
//
// Drivers make at most a constant number of cgo calls or system calls per
// burst, never one per packet, and allocate nothing per packet.
type Port interface {
	// RxBurst fills pkts[:n] with received datagrams and returns n. It does
	// not block; it returns 0 when nothing is ready.
	RxBurst(pkts []Packet) (int, error)
	// Release gives receive buffers back to the driver's pool.
	Release(bufs []BufRef)
	// TxBurst transmits dgs and returns how many were sent; the rest are
	// counted in TxFailed by the driver and may be retried by the caller.
	TxBurst(dgs []Datagram) (int, error)
	// Stats returns the driver's counters.
	Stats() PortStats
	// Close stops the port and frees its resources. Buffers still held by
	// callers must be released first.
	Close() error
}

// PacketRegioner is implemented by ports whose receive buffers all lie in
// one region of C memory that never moves (dpdk: the mbuf pool's region,
// mlocked). A backend whose device reads host memory in place registers
// it once (libml.RegionMapper), so requests reach the device without a
// host copy (ARCHITECTURE.md §2 step 5).
type PacketRegioner interface {
	// PacketRegion returns the region's base and length (nil, 0 when the
	// port has none).
	PacketRegion() (base unsafe.Pointer, size int)
}

// Waiter is implemented by ports that can sleep until a packet is ready
// (kernel sockets). Poll-mode ports (dpdk, mem) do not implement it, and the
// I/O loop backs off on its own when they are idle.
type Waiter interface {
	// Wait blocks until a datagram may be ready or timeoutNS passes.
	Wait(timeoutNS int64) error
}

// Waker is implemented by Waiters whose Wait another goroutine can cut
// short: the I/O loop's wake-up when a response is queued while it
// sleeps (the response would otherwise wait for the next datagram or the
// timeout).
type Waker interface {
	// Wake makes a running or the next Wait return. It is safe to call
	// from any goroutine, also during or after Close.
	Wake()
}

package dpdk

import (
	"encoding/binary"
	"errors"
	"net/netip"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// txHeaderLen is the Ethernet + IPv4 + UDP header length of frames we send
// (no VLAN tag, no IP options); SL_TX_HDR_LEN in sl_dpdk.h.
const txHeaderLen = 14 + 20 + 8

// Errors TxBurst returns for datagrams it cannot send (wrapped with the
// port name and the datagram's index).
var (
	ErrTooLarge  = errors.New("datagram frame exceeds the MTU or one mbuf (see Port.MaxPayload, Config.DataRoom)")
	ErrNoMAC     = errors.New("destination MAC is zero")
	ErrNotIPv4   = errors.New("destination is not an IPv4 address and port")
	ErrClosed    = errors.New("dpdk: port closed")
	errNoBuffers = errors.New("mbuf pool empty")
)

// frameLen returns the frame length for a datagram, or an error when the
// port cannot send it.
func frameLen(d *dataplane.Datagram, room int) (int, error) {
	n := txHeaderLen + wire.HeaderLen + len(d.Payload)
	if n > room || n-14 > 65535 {
		return 0, ErrTooLarge
	}
	if d.To.MAC == ([6]byte{}) {
		return 0, ErrNoMAC
	}
	if a := d.To.Addr.Addr(); !a.Is4() && !a.Is4In6() || d.To.Addr.Port() == 0 {
		return 0, ErrNotIPv4
	}
	return n, nil
}

// putFrame writes an Ethernet/IPv4/UDP frame carrying hdr and payload into
// b, which must hold frameLen bytes, and returns its length. The IPv4 header
// checksum is computed; the UDP checksum is 0 (none, legal over IPv4).
func putFrame(b []byte, srcMAC [6]byte, src netip.AddrPort, d *dataplane.Datagram, id uint16) int {
	udpLen := 8 + wire.HeaderLen + len(d.Payload)
	ipLen := 20 + udpLen
	n := 14 + ipLen
	_ = b[n-1]

	copy(b[0:6], d.To.MAC[:])
	copy(b[6:12], srcMAC[:])
	b[12], b[13] = 0x08, 0x00

	ip := b[14:34]
	ip[0] = 0x45 // version 4, IHL 5
	ip[1] = 0
	binary.BigEndian.PutUint16(ip[2:], uint16(ipLen))
	binary.BigEndian.PutUint16(ip[4:], id)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF: we never fragment
	ip[8] = 64
	ip[9] = 17
	ip[10], ip[11] = 0, 0
	s4 := src.Addr().As4()
	d4 := d.To.Addr.Addr().Unmap().As4()
	copy(ip[12:16], s4[:])
	copy(ip[16:20], d4[:])
	binary.BigEndian.PutUint16(ip[10:], ipv4Checksum(ip))

	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], d.To.Addr.Port())
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0

	copy(b[42:42+wire.HeaderLen], d.Header[:])
	copy(b[42+wire.HeaderLen:n], d.Payload)
	return n
}

// ipv4Checksum returns the Internet checksum of a 20-byte IPv4 header whose
// checksum field is zero.
func ipv4Checksum(h []byte) uint16 {
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}

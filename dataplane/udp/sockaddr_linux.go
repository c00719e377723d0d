//go:build linux

package udp

import (
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ntohs reads a port stored in network byte order in a sockaddr field.
func ntohs(p *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// htons stores port in network byte order in a sockaddr field.
func htons(p *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(p))
	b[0], b[1] = byte(port>>8), byte(port)
}

// zoneCache remembers the last IPv6 scope id and interface name it
// translated, so link-local peers cost one lookup, not one per packet.
type zoneCache struct {
	scope uint32
	name  string
}

// nameOf returns the zone for an IPv6 scope id: the interface's name, or
// the id in decimal when the interface is gone.
func (z *zoneCache) nameOf(scope uint32) string {
	if scope == z.scope && z.name != "" {
		return z.name
	}
	name := strconv.FormatUint(uint64(scope), 10)
	if ifi, err := net.InterfaceByIndex(int(scope)); err == nil {
		name = ifi.Name
	}
	z.scope, z.name = scope, name
	return name
}

// scopeOf returns the IPv6 scope id for a zone (an interface name or a
// decimal index); 0 when the zone is empty or unknown.
func (z *zoneCache) scopeOf(zone string) uint32 {
	if zone == "" {
		return 0
	}
	if zone == z.name && z.scope != 0 {
		return z.scope
	}
	var scope uint32
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		scope = uint32(n)
	} else if ifi, err := net.InterfaceByName(zone); err == nil {
		scope = uint32(ifi.Index)
	}
	if scope != 0 {
		z.scope, z.name = scope, zone
	}
	return scope
}

// parseSockaddr converts a sockaddr_in or sockaddr_in6 written by the kernel
// into an address and port without allocating. IPv4-mapped IPv6 addresses
// (from dual-stack sockets) are unmapped. An unknown family gives the zero
// AddrPort.
func parseSockaddr(sa *unix.RawSockaddrInet6, z *zoneCache) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), ntohs(&sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr)
		if a.Is4In6() {
			a = a.Unmap()
		} else if sa.Scope_id != 0 {
			a = a.WithZone(z.nameOf(sa.Scope_id))
		}
		return netip.AddrPortFrom(a, ntohs(&sa.Port))
	}
	return netip.AddrPort{}
}

// fillSockaddr writes ap into sa for a socket of the given family and
// returns the sockaddr's length, or 0 when ap cannot be reached through
// such a socket (invalid, or IPv6 on an IPv4 socket). IPv4 addresses are
// mapped into IPv6 on AF_INET6 sockets.
func fillSockaddr(sa *unix.RawSockaddrInet6, family int, ap netip.AddrPort, z *zoneCache) uint32 {
	a := ap.Addr()
	if !a.IsValid() {
		return 0
	}
	if family == unix.AF_INET {
		a = a.Unmap()
		if !a.Is4() {
			return 0
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		sa4.Family = unix.AF_INET
		htons(&sa4.Port, ap.Port())
		sa4.Addr = a.As4()
		sa4.Zero = [8]uint8{}
		return unix.SizeofSockaddrInet4
	}
	sa.Family = unix.AF_INET6
	htons(&sa.Port, ap.Port())
	sa.Flowinfo = 0
	sa.Addr = a.As16()
	sa.Scope_id = z.scopeOf(a.Zone())
	return unix.SizeofSockaddrInet6
}

package dpdk

import "fmt"

// FilterReason says why a received frame did not become a Packet. Every
// filtered frame is freed by the driver and counted under one reason; the
// sum over reasons is PortStats.RxFiltered.
type FilterReason int

// Filter reasons (the order matches enum sl_filter in native/dpdk/sl_dpdk.h).
const (
	// FilterShortFrame: the frame is shorter than the headers it announces
	// (Ethernet, VLAN tag, ARP, IPv4 with its options, UDP).
	FilterShortFrame FilterReason = iota
	// FilterARP: an ARP frame. Requests for the port's IP are answered
	// (DriverStats.ARPReplies) and counted here too.
	FilterARP
	// FilterNotIPv4: another EtherType (IPv6, LLDP, stacked VLAN tags...).
	FilterNotIPv4
	// FilterBadIPHeader: IPv4 version is not 4 or IHL is below 5.
	FilterBadIPHeader
	// FilterBadIPChecksum: the IPv4 header checksum is wrong.
	FilterBadIPChecksum
	// FilterBadIPLength: the IPv4 total length is below the header length
	// or beyond the end of the frame (a truncated frame).
	FilterBadIPLength
	// FilterIPFragment: an IPv4 fragment (more-fragments flag or an
	// offset). sluice fragments at its own layer and never sends these.
	FilterIPFragment
	// FilterNotUDP: another IP protocol (TCP, ICMP...).
	FilterNotUDP
	// FilterWrongIP: UDP to an address other than Config.IP (unless
	// Config.AcceptAnyIP).
	FilterWrongIP
	// FilterWrongPort: UDP to a port other than Config.UDPPort.
	FilterWrongPort
	// FilterBadUDPLength: the UDP length is below 8 or beyond the IP
	// payload.
	FilterBadUDPLength
	// FilterBadUDPChecksum: the UDP checksum is wrong (only checked with
	// Config.VerifyUDPChecksum or when the device reports it).
	FilterBadUDPChecksum
	// FilterSegmented: the frame was larger than one mbuf's data room and
	// the device chained it.
	FilterSegmented
	// NumFilterReasons is the number of reasons.
	NumFilterReasons
)

var filterNames = [NumFilterReasons]string{
	FilterShortFrame:     "short_frame",
	FilterARP:            "arp",
	FilterNotIPv4:        "not_ipv4",
	FilterBadIPHeader:    "bad_ip_header",
	FilterBadIPChecksum:  "bad_ip_checksum",
	FilterBadIPLength:    "bad_ip_length",
	FilterIPFragment:     "ip_fragment",
	FilterNotUDP:         "not_udp",
	FilterWrongIP:        "wrong_ip",
	FilterWrongPort:      "wrong_port",
	FilterBadUDPLength:   "bad_udp_length",
	FilterBadUDPChecksum: "bad_udp_checksum",
	FilterSegmented:      "segmented",
}

// String returns the reason's metric label ("wrong_port").
func (r FilterReason) String() string {
	if r >= 0 && r < NumFilterReasons {
		return filterNames[r]
	}
	return fmt.Sprintf("FilterReason(%d)", int(r))
}

// DriverStats are the dpdk driver's counters beyond dataplane.PortStats.
type DriverStats struct {
	// Filtered counts filtered frames by reason.
	Filtered [NumFilterReasons]uint64
	// ARPReplies counts ARP replies sent for the port's IP; ARPTxFailed
	// the replies the device refused.
	ARPReplies, ARPTxFailed uint64
	// IMissed and RxNoMbuf are the device's rte_eth_stats counters (their
	// sum is PortStats.RxMissed); IErrors and OErrors its error counters.
	IMissed, RxNoMbuf, IErrors, OErrors uint64
	// DevRxPackets and DevTxPackets are the frames the device itself
	// counted (all frames, not only sluice datagrams).
	DevRxPackets, DevTxPackets uint64
}

// FilteredTotal returns the sum of Filtered.
func (s *DriverStats) FilteredTotal() uint64 {
	var t uint64
	for _, v := range s.Filtered {
		t += v
	}
	return t
}

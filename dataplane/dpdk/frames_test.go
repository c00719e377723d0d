package dpdk

import (
	"encoding/binary"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Test addresses: pcap files never reach a network, but stay in 10.99/16.
var (
	clientMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	serverMAC  = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	clientIP   = netip.MustParseAddr("10.99.50.2")
	serverIP   = netip.MustParseAddr("10.99.50.1")
	clientPort = uint16(40000)
	serverPort = uint16(7000)
)

// udpSpec describes one test frame carrying UDP.
type udpSpec struct {
	dst      netip.Addr
	dport    uint16
	payload  []byte
	vlan     uint16 // 0: untagged
	ipOpts   bool   // add 4 bytes of IP options (IHL 6)
	flags    layers.IPv4Flag
	fragOff  uint16
	noUDPSum bool // UDP checksum 0
}

func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ls...); err != nil {
		t.Fatalf("serialize: %v", err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// udpFrame builds an Ethernet (optionally VLAN) / IPv4 / UDP frame from the
// client to s.dst:s.dport.
func udpFrame(t testing.TB, s udpSpec) []byte {
	t.Helper()
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: serverMAC, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Id: 1,
		SrcIP: clientIP.AsSlice(), DstIP: s.dst.AsSlice(), Flags: s.flags, FragOffset: s.fragOff}
	if s.ipOpts {
		// Router Alert (RFC 2113): type 148, length 4, value 0.
		ip.Options = []layers.IPv4Option{{OptionType: 148, OptionLength: 4, OptionData: []byte{0, 0}}}
	}
	udp := &layers.UDP{SrcPort: layers.UDPPort(clientPort), DstPort: layers.UDPPort(s.dport)}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	ls := []gopacket.SerializableLayer{eth}
	if s.vlan != 0 {
		eth.EthernetType = layers.EthernetTypeDot1Q
		ls = append(ls, &layers.Dot1Q{VLANIdentifier: s.vlan, Type: layers.EthernetTypeIPv4})
	}
	ls = append(ls, ip, udp, gopacket.Payload(s.payload))
	b := serialize(t, ls...)
	if s.noUDPSum {
		off := ethLen(b) + ipHdrLen(b)
		b[off+6], b[off+7] = 0, 0
	}
	return b
}

// ethLen returns the L2 header length of a test frame (14, or 18 tagged).
func ethLen(b []byte) int {
	if binary.BigEndian.Uint16(b[12:]) == 0x8100 {
		return 18
	}
	return 14
}

func ipHdrLen(b []byte) int { return int(b[ethLen(b)]&0x0f) * 4 }

// fixIPSum recomputes the IPv4 header checksum after a test mutated it.
func fixIPSum(b []byte) {
	ip := b[ethLen(b):]
	n := ipHdrLen(b)
	ip[10], ip[11] = 0, 0
	var sum uint32
	for i := 0; i < n; i += 2 {
		sum += uint32(ip[i])<<8 | uint32(ip[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
}

// arpFrame builds an ARP frame from the client.
func arpFrame(t testing.TB, op uint16, target netip.Addr) []byte {
	t.Helper()
	dst := net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	eth := &layers.Ethernet{SrcMAC: clientMAC, DstMAC: dst, EthernetType: layers.EthernetTypeARP}
	arp := &layers.ARP{AddrType: layers.LinkTypeEthernet, Protocol: layers.EthernetTypeIPv4,
		HwAddressSize: 6, ProtAddressSize: 4, Operation: op,
		SourceHwAddress: clientMAC, SourceProtAddress: clientIP.AsSlice(),
		DstHwAddress: make([]byte, 6), DstProtAddress: target.AsSlice()}
	return serialize(t, eth, arp)
}

// writePcap writes frames to a new pcap file in dir and returns its path.
func writePcap(t testing.TB, path string, frames [][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := pcapgo.NewWriter(f)
	if err := w.WriteFileHeader(65535, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	for i, fr := range frames {
		ci := gopacket.CaptureInfo{Timestamp: ts.Add(time.Duration(i) * time.Microsecond), CaptureLength: len(fr), Length: len(fr)}
		if err := w.WritePacket(ci, fr); err != nil {
			t.Fatal(err)
		}
	}
}

// readPcap returns the frames of a pcap file.
func readPcap(t testing.TB, path string) [][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out [][]byte
	for {
		data, _, err := r.ReadPacketData()
		if err != nil {
			break
		}
		out = append(out, data)
	}
	return out
}

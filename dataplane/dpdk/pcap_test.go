package dpdk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// replayMix is the known mix of frames of the pcap replay tests.
type replayMix struct {
	frames [][]byte
	// delivered[verify] are the UDP payloads expected as Packets, in order,
	// with UDP checksum verification off (false) and on (true).
	delivered [2][][]byte
	filtered  [2][NumFilterReasons]uint64
	// requests are the sluice requests whose fragments are all in the mix:
	// id -> payload. badSumReq is complete only without verification.
	requests  map[uint64][]byte
	badSumReq uint64
	// reasmDrops are the reassembler's expected drops by reason name.
	reasmDrops map[string]uint64
}

func requestPayload(id uint64, total int) []byte {
	b := make([]byte, total)
	for i := range b {
		b[i] = byte(int(id)*31 + i)
	}
	return b
}

// buildMix makes valid fragments of several requests (reordered, one VLAN
// tagged, one with IP options, one with UDP checksum 0, a duplicate, a late
// fragment after its request completed), a tiny
// padded datagram and a truncated sluice header (both reach the driver's
// caller), and one or more frames for every filter reason.
func buildMix(t testing.TB) *replayMix {
	t.Helper()
	m := &replayMix{requests: map[uint64][]byte{}}
	var frames [][]byte
	deliver := func(fr, payload []byte, verifyToo bool) {
		frames = append(frames, fr)
		m.delivered[0] = append(m.delivered[0], payload)
		if verifyToo {
			m.delivered[1] = append(m.delivered[1], payload)
		}
	}
	filter := func(r FilterReason, verifyOnly bool, frs ...[]byte) {
		for _, fr := range frs {
			frames = append(frames, fr)
			if !verifyOnly {
				m.filtered[0][r]++
			}
			m.filtered[1][r]++
		}
	}
	toUs := func(p []byte) udpSpec { return udpSpec{dst: serverIP, dport: serverPort, payload: p} }

	r1 := fragments(1, 7, 101, 5000, 1432) // 4 fragments
	r2 := fragments(1, 7, 102, 3000, 1200) // 3 fragments
	r3 := fragments(2, 7, 103, 500, 1432)  // 1 fragment
	r4 := fragments(2, 8, 104, 900, 1432)  // 1 fragment, UDP checksum 0
	r5 := fragments(2, 8, 105, 700, 1432)  // 1 fragment, bad UDP checksum
	m.requests[101] = requestPayload(101, 5000)
	m.requests[102] = requestPayload(102, 3000)
	m.requests[103] = requestPayload(103, 500)
	m.requests[104] = requestPayload(104, 900)
	m.requests[105] = requestPayload(105, 700)
	m.badSumReq = 105

	// Requests, reordered and interleaved with noise.
	deliver(udpFrame(t, toUs(r1[2])), r1[2], true)
	filter(FilterARP, false, arpFrame(t, layers.ARPRequest, serverIP)) // answered
	deliver(udpFrame(t, toUs(r1[0])), r1[0], true)
	s := toUs(r2[0])
	s.vlan = 100
	deliver(udpFrame(t, s), r2[0], true)
	filter(FilterARP, false, arpFrame(t, layers.ARPRequest, netip.MustParseAddr("10.99.50.9")), arpFrame(t, layers.ARPReply, clientIP))
	s = toUs(r2[1])
	s.ipOpts = true
	deliver(udpFrame(t, s), r2[1], true)
	deliver(udpFrame(t, toUs(r1[3])), r1[3], true)
	deliver(udpFrame(t, toUs(r1[0])), r1[0], true) // duplicate
	deliver(udpFrame(t, toUs(r2[2])), r2[2], true)
	deliver(udpFrame(t, toUs(r1[1])), r1[1], true)
	deliver(udpFrame(t, toUs(r3[0])), r3[0], true)
	deliver(udpFrame(t, toUs(r1[1])), r1[1], true) // again, after completion: late
	s = toUs(r4[0])
	s.noUDPSum = true
	deliver(udpFrame(t, s), r4[0], true)
	bad := udpFrame(t, toUs(r5[0]))
	bad[len(bad)-1] ^= 0xff // payload byte: UDP checksum now wrong
	r5bad := bytes.Clone(r5[0])
	r5bad[len(r5bad)-1] ^= 0xff
	deliver(bad, r5bad, false)            // delivered without verification,
	m.filtered[1][FilterBadUDPChecksum]++ // filtered with it
	// The wrong payload byte would fail the request's content check, so
	// the test compares request 105 against the corrupted payload.
	m.requests[105][len(m.requests[105])-1] ^= 0xff
	// A 4-byte datagram in a frame padded to 60 bytes with junk: the
	// payload must stop at the UDP length.
	tiny := udpFrame(t, toUs([]byte("abcd")))
	for len(tiny) < 60 {
		tiny = append(tiny, 0xee)
	}
	deliver(tiny, []byte("abcd"), true)
	// A UDP datagram too short for a sluice header.
	short := bytes.Repeat([]byte{0x53}, 20)
	deliver(udpFrame(t, toUs(short)), short, true)

	// Other EtherTypes.
	ip6 := serialize(t,
		&layers.Ethernet{SrcMAC: clientMAC, DstMAC: serverMAC, EthernetType: layers.EthernetTypeIPv6},
		&layers.IPv6{Version: 6, NextHeader: layers.IPProtocolUDP, HopLimit: 64,
			SrcIP: netip.MustParseAddr("fd00::2").AsSlice(), DstIP: netip.MustParseAddr("fd00::1").AsSlice()},
		gopacket.Payload(make([]byte, 48)))
	lldp := append(append(append([]byte{}, serverMAC...), clientMAC...), 0x88, 0xcc)
	lldp = append(lldp, make([]byte, 46)...)
	qinq := udpFrame(t, udpSpec{dst: serverIP, dport: serverPort, payload: r3[0], vlan: 10})
	qinq = append(append(append([]byte{}, qinq[:16]...), 0x81, 0x00, 0x00, 20), qinq[16:]...) // a second tag
	filter(FilterNotIPv4, false, ip6, lldp, qinq)

	// Other IP protocols.
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 7000, SYN: true, Window: 1024}
	ipT := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: clientIP.AsSlice(), DstIP: serverIP.AsSlice()}
	_ = tcp.SetNetworkLayerForChecksum(ipT)
	tcpF := serialize(t, &layers.Ethernet{SrcMAC: clientMAC, DstMAC: serverMAC, EthernetType: layers.EthernetTypeIPv4}, ipT, tcp)
	icmpF := serialize(t, &layers.Ethernet{SrcMAC: clientMAC, DstMAC: serverMAC, EthernetType: layers.EthernetTypeIPv4},
		&layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolICMPv4, SrcIP: clientIP.AsSlice(), DstIP: serverIP.AsSlice()},
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(layers.ICMPv4TypeEchoRequest, 0)}, gopacket.Payload(make([]byte, 32)))
	filter(FilterNotUDP, false, tcpF, icmpF)

	// Wrong port, wrong address.
	filter(FilterWrongPort, false,
		udpFrame(t, udpSpec{dst: serverIP, dport: serverPort + 1, payload: r3[0]}),
		udpFrame(t, udpSpec{dst: serverIP, dport: 53, payload: []byte("dns?")}))
	filter(FilterWrongIP, false, udpFrame(t, udpSpec{dst: netip.MustParseAddr("10.99.50.77"), dport: serverPort, payload: r3[0]}))

	// IP fragments of a datagram to our port.
	filter(FilterIPFragment, false,
		udpFrame(t, udpSpec{dst: serverIP, dport: serverPort, payload: r3[0], flags: layers.IPv4MoreFragments}),
		udpFrame(t, udpSpec{dst: serverIP, dport: serverPort, payload: r3[0][:64], fragOff: 185}))

	// Truncated frames: cut inside the Ethernet header, the VLAN tag, the
	// IPv4 header, the UDP header, the ARP body.
	whole := udpFrame(t, toUs(r1[0]))
	tagged := udpFrame(t, udpSpec{dst: serverIP, dport: serverPort, payload: r3[0], vlan: 7})
	udpCut := udpFrame(t, toUs(nil)) // 42 bytes: IPv4 total length 28
	udpCut = bytes.Clone(udpCut[:38])
	binary.BigEndian.PutUint16(udpCut[16:], 24) // total length: header + 4 bytes
	fixIPSum(udpCut)
	arpCut := arpFrame(t, layers.ARPRequest, serverIP)[:30]
	filter(FilterShortFrame, false, whole[:10], tagged[:16], whole[:30], udpCut, arpCut)

	// Truncated in the payload (IP total length beyond the frame), and an
	// IP total length below the header length.
	lenLow := udpFrame(t, toUs(r3[0]))
	binary.BigEndian.PutUint16(lenLow[16:], 12)
	fixIPSum(lenLow)
	filter(FilterBadIPLength, false, bytes.Clone(whole[:100]), lenLow)

	// Bad IPv4 headers: version 6 under the IPv4 EtherType, IHL 4.
	v6 := udpFrame(t, toUs(r3[0]))
	v6[14] = 0x65
	ihl4 := udpFrame(t, toUs(r3[0]))
	ihl4[14] = 0x44
	filter(FilterBadIPHeader, false, v6, ihl4)

	// Bad IPv4 header checksum.
	csum := udpFrame(t, toUs(r3[0]))
	csum[24] ^= 0x5a
	filter(FilterBadIPChecksum, false, csum)

	// UDP length below 8 and beyond the IP payload.
	ul1 := udpFrame(t, toUs(r3[0]))
	binary.BigEndian.PutUint16(ul1[38:], 4)
	ul2 := udpFrame(t, toUs(r3[0]))
	binary.BigEndian.PutUint16(ul2[38:], uint16(len(r3[0])+8+1))
	filter(FilterBadUDPLength, false, ul1, ul2)

	// A jumbo frame over the 2048-byte data room: the PMD chains it.
	filter(FilterSegmented, false, udpFrame(t, toUs(make([]byte, 3000))))

	m.frames = frames
	m.reasmDrops = map[string]uint64{"duplicate": 1, "late": 1, "truncated": 2}
	return m
}

// TestPcapReplay replays the mix through net_pcap and checks exact counts
// per filter reason, the delivered bytes, the ARP reply and a TxBurst reply
// (both captured by the PMD's tx_pcap), and the buffer level.
func TestPcapReplay(t *testing.T) {
	needEAL(t)
	mix := buildMix(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.pcap")
	writePcap(t, in, mix.frames)

	for vi, verify := range []bool{false, true} {
		t.Run(fmt.Sprintf("verify_udp=%v", verify), func(t *testing.T) {
			out := filepath.Join(dir, fmt.Sprintf("out%d.pcap", vi))
			p, err := Open(Config{
				Vdev: fmt.Sprintf("net_pcap_replay%d,rx_pcap=%s,tx_pcap=%s", vi, in, out),
				IP:   serverIP, UDPPort: serverPort, VerifyUDPChecksum: verify,
				PoolSize: 2047, RxDesc: 256, TxDesc: 256,
			})
			if err != nil {
				t.Fatal(err)
			}
			closed := false
			defer func() {
				if !closed {
					p.Close()
				}
			}()
			base := p.Stats().BufInUse

			var got [][]byte
			var first dataplane.Endpoint
			total := uint64(len(mix.frames))
			ok := pollUntil(t, p, 10*time.Second, func(pk *dataplane.Packet) {
				if len(got) == 0 {
					first = pk.From
				}
				got = append(got, bytes.Clone(pk.Data))
			}, func() bool { st := p.Stats(); return st.RxPackets+st.RxFiltered >= total })
			st, ds := p.Stats(), p.DriverStats()
			if !ok {
				t.Fatalf("processed %d+%d of %d frames", st.RxPackets, st.RxFiltered, total)
			}
			t.Logf("stats %+v driver %+v", st, ds)
			// Nothing more may come.
			pollUntil(t, p, 20*time.Millisecond, func(pk *dataplane.Packet) { t.Errorf("extra packet %x", pk.Data) }, func() bool { return false })

			want := mix.delivered[vi]
			if len(got) != len(want) || st.RxPackets != uint64(len(want)) {
				t.Fatalf("delivered %d (RxPackets %d), want %d", len(got), st.RxPackets, len(want))
			}
			var wantBytes uint64
			for i := range want {
				wantBytes += uint64(len(want[i]))
				if !bytes.Equal(got[i], want[i]) {
					t.Errorf("packet %d: %d bytes %.16x..., want %d bytes %.16x...", i, len(got[i]), got[i], len(want[i]), want[i])
				}
			}
			if st.RxBytes != wantBytes {
				t.Errorf("RxBytes = %d, want %d", st.RxBytes, wantBytes)
			}
			for r := FilterReason(0); r < NumFilterReasons; r++ {
				if ds.Filtered[r] != mix.filtered[vi][r] {
					t.Errorf("filtered[%s] = %d, want %d", r, ds.Filtered[r], mix.filtered[vi][r])
				}
			}
			if st.RxFiltered != ds.FilteredTotal() {
				t.Errorf("RxFiltered = %d, sum of reasons %d", st.RxFiltered, ds.FilteredTotal())
			}
			if ds.ARPReplies != 1 {
				t.Errorf("ARPReplies = %d, want 1", ds.ARPReplies)
			}
			wantFrom := dataplane.Endpoint{Addr: netip.AddrPortFrom(clientIP, clientPort),
				Local: netip.AddrPortFrom(serverIP, serverPort), MAC: [6]byte(clientMAC)}
			if first != wantFrom {
				t.Errorf("From = %+v, want %+v", first, wantFrom)
			}

			// A reply through TxBurst, captured by tx_pcap.
			var h wire.Header
			h.Kind, h.Request, h.FragCount, h.TotalLen, h.PayloadLen = wire.KindResponse, 101, 1, 5, 5
			var d dataplane.Datagram
			d.To = first
			wire.Encode(d.Header[:], &h)
			d.Payload = []byte("hello")
			if n, err := p.TxBurst([]dataplane.Datagram{d}); n != 1 || err != nil {
				t.Fatalf("TxBurst = %d, %v", n, err)
			}
			assertBufs(t, p, base)
			mac := p.MAC()
			closed = true
			if err := p.Close(); err != nil {
				t.Fatal(err)
			}
			checkTxCapture(t, readPcap(t, out), mac, d)
		})
	}
}

// checkTxCapture checks what the port sent: the ARP reply, then the reply
// datagram.
func checkTxCapture(t *testing.T, frames [][]byte, mac [6]byte, d dataplane.Datagram) {
	t.Helper()
	if len(frames) != 2 {
		t.Fatalf("tx capture has %d frames, want 2 (ARP reply, datagram)", len(frames))
	}
	pa := gopacket.NewPacket(frames[0], layers.LayerTypeEthernet, gopacket.Default)
	arp, _ := pa.Layer(layers.LayerTypeARP).(*layers.ARP)
	eth, _ := pa.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	if arp == nil || eth == nil {
		t.Fatalf("first tx frame is not ARP: %v", pa)
	}
	if arp.Operation != layers.ARPReply || !bytes.Equal(arp.SourceHwAddress, mac[:]) ||
		!bytes.Equal(arp.SourceProtAddress, serverIP.AsSlice()) || !bytes.Equal(arp.DstHwAddress, clientMAC) ||
		!bytes.Equal(arp.DstProtAddress, clientIP.AsSlice()) || !bytes.Equal(eth.DstMAC, clientMAC) || !bytes.Equal(eth.SrcMAC, mac[:]) {
		t.Errorf("bad ARP reply: %v", pa)
	}
	checkReplyFrame(t, frames[1], mac, serverIP, d)
}

// checkReplyFrame decodes a frame sent by TxBurst and checks every header.
func checkReplyFrame(t *testing.T, fr []byte, mac [6]byte, src netip.Addr, d dataplane.Datagram) {
	t.Helper()
	checkReplyFrameFrom(t, fr, mac, src, serverPort, d)
}

// checkReplyFrameFrom is checkReplyFrame for a source port.
func checkReplyFrameFrom(t *testing.T, fr []byte, mac [6]byte, src netip.Addr, sport uint16, d dataplane.Datagram) {
	t.Helper()
	pk := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
	eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
	ip, _ := pk.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
	if eth == nil || ip == nil || udp == nil {
		t.Fatalf("reply frame does not decode: %v", pk)
	}
	if !bytes.Equal(eth.SrcMAC, mac[:]) || !bytes.Equal(eth.DstMAC, d.To.MAC[:]) {
		t.Errorf("reply MACs %v -> %v", eth.SrcMAC, eth.DstMAC)
	}
	if !bytes.Equal(ip.SrcIP, src.AsSlice()) || !bytes.Equal(ip.DstIP, d.To.Addr.Addr().AsSlice()) || ip.TTL != 64 {
		t.Errorf("reply IP %v -> %v ttl %d", ip.SrcIP, ip.DstIP, ip.TTL)
	}
	if int(udp.SrcPort) != int(sport) || int(udp.DstPort) != int(d.To.Addr.Port()) || udp.Checksum != 0 {
		t.Errorf("reply UDP %d -> %d csum %#x", udp.SrcPort, udp.DstPort, udp.Checksum)
	}
	var sum uint32
	hdr := fr[14:34]
	for i := 0; i < 20; i += 2 {
		sum += uint32(hdr[i])<<8 | uint32(hdr[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	if sum != 0xffff {
		t.Errorf("reply IPv4 header checksum wrong (sum %#x)", sum)
	}
	want := append(append([]byte{}, d.Header[:]...), d.Payload...)
	if !bytes.Equal(udp.Payload, want) {
		t.Errorf("reply payload %x, want %x", udp.Payload, want)
	}
}

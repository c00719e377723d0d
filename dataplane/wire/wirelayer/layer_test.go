package wirelayer

import (
	"bytes"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"sluice/dataplane/wire"
)

func TestDecodeFromEthernetFrame(t *testing.T) {
	RegisterPort(wire.DefaultPort)
	payload := []byte("fragment payload")
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: net.IP{10, 99, 0, 2}, DstIP: net.IP{10, 99, 0, 1}}
	udp := &layers.UDP{SrcPort: 40000, DstPort: wire.DefaultPort}
	_ = udp.SetNetworkLayerForChecksum(ip)
	sl := &Sluice{Header: wire.Header{Kind: wire.KindRequest, Flags: wire.FlagRT, Model: 7, Flow: 8, Request: 9,
		FragIndex: 0, FragCount: 1, TotalLen: uint32(len(payload))}}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, sl, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	pkt := gopacket.NewPacket(buf.Bytes(), layers.LayerTypeEthernet, gopacket.Default)
	l := pkt.Layer(LayerTypeSluice)
	if l == nil {
		t.Fatalf("no sluice layer in %v", pkt)
	}
	got := l.(*Sluice)
	if got.Model != 7 || got.Request != 9 || got.Class() != wire.ClassRT || !bytes.Equal(got.LayerPayload(), payload) {
		t.Fatalf("decoded %+v payload %q", got.Header, got.LayerPayload())
	}
}

func TestDecodeErrorIsReported(t *testing.T) {
	pkt := gopacket.NewPacket([]byte("too short"), LayerTypeSluice, gopacket.Default)
	if pkt.ErrorLayer() == nil {
		t.Fatal("a truncated header decoded without error")
	}
}

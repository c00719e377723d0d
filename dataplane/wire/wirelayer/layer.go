// Package wirelayer registers the sluice header as a gopacket layer, so
// pcap files and tools built on gopacket decode sluice datagrams:
//
//	wirelayer.RegisterPort(wire.DefaultPort)
//	pkt := gopacket.NewPacket(frame, layers.LayerTypeEthernet, gopacket.Default)
//	if l := pkt.Layer(wirelayer.LayerTypeSluice); l != nil { ... }
package wirelayer

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"sluice/dataplane/wire"
)

// LayerTypeSluice is the gopacket layer type of a sluice header. The number
// is in gopacket's range for third-party layers.
var LayerTypeSluice = gopacket.RegisterLayerType(1889, gopacket.LayerTypeMetadata{
	Name:    "Sluice",
	Decoder: gopacket.DecodeFunc(decodeSluice),
})

// Sluice is a decoded sluice header with its fragment payload.
type Sluice struct {
	layers.BaseLayer
	wire.Header
}

// LayerType implements gopacket.Layer.
func (s *Sluice) LayerType() gopacket.LayerType { return LayerTypeSluice }

// CanDecode implements gopacket.DecodingLayer.
func (s *Sluice) CanDecode() gopacket.LayerClass { return LayerTypeSluice }

// NextLayerType implements gopacket.DecodingLayer: the fragment payload is
// opaque.
func (s *Sluice) NextLayerType() gopacket.LayerType { return gopacket.LayerTypePayload }

// DecodeFromBytes implements gopacket.DecodingLayer.
func (s *Sluice) DecodeFromBytes(data []byte, df gopacket.DecodeFeedback) error {
	if err := wire.Decode(data, &s.Header); err != nil {
		df.SetTruncated()
		return fmt.Errorf("sluice: %w", err)
	}
	s.BaseLayer = layers.BaseLayer{Contents: data[:wire.HeaderLen], Payload: data[wire.HeaderLen:]}
	return nil
}

// SerializeTo implements gopacket.SerializableLayer: it prepends the header
// to the payload already in b, filling PayloadLen from it when
// opts.FixLengths is set.
func (s *Sluice) SerializeTo(b gopacket.SerializeBuffer, opts gopacket.SerializeOptions) error {
	if opts.FixLengths {
		s.PayloadLen = uint16(len(b.Bytes()))
	}
	hdr, err := b.PrependBytes(wire.HeaderLen)
	if err != nil {
		return fmt.Errorf("sluice: %w", err)
	}
	wire.Encode(hdr, &s.Header)
	return nil
}

func decodeSluice(data []byte, p gopacket.PacketBuilder) error {
	s := &Sluice{}
	if err := s.DecodeFromBytes(data, p); err != nil {
		return err
	}
	p.AddLayer(s)
	return p.NextDecoder(gopacket.LayerTypePayload)
}

// RegisterPort makes gopacket's UDP decoder hand datagrams to or from port
// to the sluice layer.
func RegisterPort(port uint16) {
	layers.RegisterUDPPortLayerType(layers.UDPPort(port), LayerTypeSluice)
}

// Frame builds an Ethernet/IPv4/UDP frame carrying one sluice datagram, with
// valid IPv4 and UDP checksums: for pcap files and test traffic.
func Frame(srcMAC, dstMAC [6]byte, src, dst netip.AddrPort, datagram []byte) ([]byte, error) {
	if !src.Addr().Is4() || !dst.Addr().Is4() {
		return nil, fmt.Errorf("sluice: frame %v -> %v: IPv4 addresses required", src, dst)
	}
	s4, d4 := src.Addr().As4(), dst.Addr().As4()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr(srcMAC[:]), DstMAC: net.HardwareAddr(dstMAC[:]), EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, Flags: layers.IPv4DontFragment,
		SrcIP: net.IP(s4[:]), DstIP: net.IP(d4[:])}
	udp := &layers.UDP{SrcPort: layers.UDPPort(src.Port()), DstPort: layers.UDPPort(dst.Port())}
	if err := udp.SetNetworkLayerForChecksum(ip); err != nil {
		return nil, fmt.Errorf("sluice: frame: %w", err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, udp, gopacket.Payload(datagram)); err != nil {
		return nil, fmt.Errorf("sluice: frame: %w", err)
	}
	return buf.Bytes(), nil
}

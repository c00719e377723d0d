package dpdk

import (
	"bytes"
	"encoding/binary"
	"path/filepath"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// checkSink gathers each completed request on the I/O loop, compares it
// with what the pcap carried, and answers it with the 64-bit sum of its
// bytes.
type checkSink struct {
	t    *testing.T
	want map[uint64][]byte
	got  map[uint64]bool
	buf  []byte
}

func (s *checkSink) Deliver(r *ioloop.Request) {
	buf := s.buf[:r.TotalLen]
	if err := r.CopyPayload(buf); err != nil {
		s.t.Errorf("gather %d: %v", r.ID, err)
	}
	r.Release()
	if !bytes.Equal(buf, s.want[r.ID]) {
		s.t.Errorf("request %d: reassembled payload differs", r.ID)
	}
	if s.got[r.ID] {
		s.t.Errorf("request %d completed twice", r.ID)
	}
	s.got[r.ID] = true
	var sum uint64
	for _, b := range buf {
		sum += uint64(b)
	}
	r.Reply(wire.StatusOK, binary.BigEndian.AppendUint64(nil, sum), nil)
}

// TestPcapFullPath replays the pcap mix through the whole receive path:
// driver, I/O loop, zero-copy reassembly, gather, egress, driver. It checks
// the exact number of completed requests and of each drop reason at both
// the driver and the reassembler, the responses captured on the wire, and
// that every buffer went back to the pool.
func TestPcapFullPath(t *testing.T) {
	needEAL(t)
	mix := buildMix(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "in.pcap"), filepath.Join(dir, "out.pcap")
	writePcap(t, in, mix.frames)
	p, err := Open(Config{Vdev: "net_pcap_full,rx_pcap=" + in + ",tx_pcap=" + out,
		IP: serverIP, UDPPort: serverPort, PoolSize: 2047, RxDesc: 256, TxDesc: 256})
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

	eg, err := egress.New(egress.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sink := &checkSink{t: t, want: mix.requests, got: map[uint64]bool{}, buf: make([]byte, 1<<16)}
	loop, err := ioloop.New(ioloop.DefaultConfig(), p, eg, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxRequests, rc.MaxHeldFragments, rc.Timeout = 64, 1024, time.Minute
	table, err := loop.NewTable(rc)
	if err != nil {
		t.Fatal(err)
	}

	total := uint64(len(mix.frames))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := loop.Poll(loop.Now()); err != nil {
			t.Fatal(err)
		}
		st := p.Stats()
		if st.RxPackets+st.RxFiltered == total && table.Outstanding() == 0 && eg.Pending() == 0 && loop.InFlight() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not done after 10 s: stats %+v, outstanding %d, pending %d", st, table.Outstanding(), eg.Pending())
		}
	}
	// One more round gives back the buffers of the last requests.
	loop.Poll(loop.Now())

	st, ds := p.Stats(), p.DriverStats()
	if st.RxPackets != uint64(len(mix.delivered[0])) || ds.Filtered != mix.filtered[0] {
		t.Errorf("driver: %d packets, filtered %v; want %d, %v", st.RxPackets, ds.Filtered, len(mix.delivered[0]), mix.filtered[0])
	}
	if got, want := table.C.Completed.Load(), uint64(len(mix.requests)); got != want {
		t.Errorf("completed %d requests, want %d", got, want)
	}
	if got := table.C.Fragments.Load(); got != 10 {
		t.Errorf("reassembler accepted %d fragments, want 10", got)
	}
	for _, r := range reasm.Reasons() {
		if got, want := table.C.Drops(r), mix.reasmDrops[r.String()]; got != want {
			t.Errorf("reassembler drops[%s] = %d, want %d", r, got, want)
		}
	}
	if table.HeldFragments() != 0 || table.Assembling() != 0 {
		t.Errorf("table still holds %d fragments, %d requests", table.HeldFragments(), table.Assembling())
	}
	assertBufs(t, p, base)
	mac := p.MAC()
	closed = true
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}

	// On the wire: the ARP reply, then one response per request.
	frames := readPcap(t, out)
	if len(frames) != 1+len(mix.requests) {
		t.Fatalf("captured %d frames, want %d", len(frames), 1+len(mix.requests))
	}
	seen := map[uint64]bool{}
	for _, fr := range frames[1:] {
		pk := gopacket.NewPacket(fr, layers.LayerTypeEthernet, gopacket.Default)
		udp, _ := pk.Layer(layers.LayerTypeUDP).(*layers.UDP)
		eth, _ := pk.Layer(layers.LayerTypeEthernet).(*layers.Ethernet)
		var h wire.Header
		if udp == nil || eth == nil || wire.Decode(udp.Payload, &h) != nil {
			t.Fatalf("bad response frame %v", pk)
		}
		if h.Kind != wire.KindResponse || h.Status != wire.StatusOK || h.TotalLen != 8 || !bytes.Equal(eth.SrcMAC, mac[:]) ||
			!bytes.Equal(eth.DstMAC, clientMAC) || int(udp.DstPort) != int(clientPort) {
			t.Errorf("response %+v from %v to %v:%d", h, eth.SrcMAC, eth.DstMAC, udp.DstPort)
		}
		var sum uint64
		for _, b := range mix.requests[h.Request] {
			sum += uint64(b)
		}
		if got := binary.BigEndian.Uint64(udp.Payload[wire.HeaderLen:]); got != sum {
			t.Errorf("response to %d carries %d, want %d", h.Request, got, sum)
		}
		seen[h.Request] = true
	}
	if len(seen) != len(mix.requests) {
		t.Errorf("responses for %d distinct requests, want %d", len(seen), len(mix.requests))
	}
}

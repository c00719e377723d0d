package dpdk

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
)

// TestRingLoopback sends datagrams to the port itself through net_ring (its
// rx and tx queues share one ring) and checks payloads, endpoints, filter
// counts for a wrong port, buffer accounting and zero allocations per burst.
func TestRingLoopback(t *testing.T) {
	needEAL(t)
	ip := netip.MustParseAddr("10.99.1.1")
	p := openPort(t, Config{Vdev: "net_ring_sltest0", IP: ip, UDPPort: 7000, PoolSize: 4095, RxDesc: 512, TxDesc: 512})
	base := p.Stats().BufInUse
	self := dataplane.Endpoint{Addr: netip.AddrPortFrom(ip, 7000), MAC: p.MAC()}
	frags := fragments(3, 9, 42, 10000, 1432)
	dgs := make([]dataplane.Datagram, len(frags))
	for i, f := range frags {
		dgs[i] = datagram(self, f)
	}
	n, err := p.TxBurst(dgs)
	if err != nil || n != len(dgs) {
		t.Fatalf("TxBurst = %d, %v; want %d", n, err, len(dgs))
	}
	var got [][]byte
	ok := pollUntil(t, p, 2*time.Second, func(pk *dataplane.Packet) {
		got = append(got, bytes.Clone(pk.Data))
		if pk.From.Addr != self.Addr || pk.From.MAC != p.MAC() || pk.From.Local != self.Addr {
			t.Errorf("From = %+v", pk.From)
		}
	}, func() bool { return len(got) == len(frags) })
	if !ok {
		t.Fatalf("received %d of %d", len(got), len(frags))
	}
	for i := range frags {
		if !bytes.Equal(got[i], frags[i]) {
			t.Errorf("datagram %d differs", i)
		}
	}
	assertBufs(t, p, base)
	t.Logf("stats %+v", p.Stats())
}

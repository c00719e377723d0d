package dpdk

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

var ringIP = netip.MustParseAddr("10.99.1.1")

// ringPort opens a net_ring port whose rx and tx queues share one ring:
// every frame sent comes back.
func ringPort(t *testing.T, cfg Config) *Port {
	t.Helper()
	needEAL(t)
	// net_ring names its rings after the device: keep the name short.
	cfg.Vdev = fmt.Sprintf("net_ring_r%d", ringSeq.Add(1))
	if !cfg.IP.IsValid() {
		cfg.IP = ringIP
	}
	if cfg.UDPPort == 0 {
		cfg.UDPPort = 7000
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 4095
		cfg.RxDesc, cfg.TxDesc = 512, 512
	}
	return openPort(t, cfg)
}

var ringSeq atomic.Int32

func selfEndpoint(p *Port) dataplane.Endpoint {
	return dataplane.Endpoint{Addr: netip.AddrPortFrom(p.IP(), p.Config().UDPPort), MAC: p.MAC()}
}

// TestRingLoopback sends a request's fragments to the port itself and
// checks payloads, endpoints and counters.
func TestRingLoopback(t *testing.T) {
	p := ringPort(t, Config{})
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	frags := fragments(3, 9, 42, 10000, 1432)
	dgs := make([]dataplane.Datagram, len(frags))
	var bytesOut uint64
	for i, f := range frags {
		dgs[i] = datagram(self, f)
		bytesOut += uint64(len(f))
	}
	n, err := p.TxBurst(dgs)
	if err != nil || n != len(dgs) {
		t.Fatalf("TxBurst = %d, %v; want %d", n, err, len(dgs))
	}
	// Frames wait in the ring: their mbufs are out of the pool.
	if got := p.Stats().BufInUse; got != base+uint64(len(dgs)) {
		t.Errorf("BufInUse with %d frames in the ring = %d, want %d", len(dgs), got, base+uint64(len(dgs)))
	}
	var got [][]byte
	base0, size := p.Region()
	ok := pollUntil(t, p, 2*time.Second, func(pk *dataplane.Packet) {
		got = append(got, bytes.Clone(pk.Data))
		// Zero copy: Data and the mbuf lie in the port's region.
		d := uintptr(unsafe.Pointer(unsafe.SliceData(pk.Data)))
		if d < base0 || d+uintptr(len(pk.Data)) > base0+size || uintptr(pk.Buf) < base0 || uintptr(pk.Buf) >= base0+size {
			t.Errorf("packet at %#x (mbuf %#x) outside region %#x+%d", d, pk.Buf, base0, size)
		}
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
	st := p.Stats()
	if st.TxPackets != uint64(len(dgs)) || st.TxBytes != bytesOut || st.RxPackets != uint64(len(dgs)) ||
		st.RxBytes != bytesOut || st.RxFiltered != 0 || st.TxFailed != 0 {
		t.Errorf("stats %+v; want %d packets, %d bytes each way", st, len(dgs), bytesOut)
	}
	assertBufs(t, p, base)
}

// TestRingHeldBuffers checks that BufInUse counts buffers held by the
// caller, and that Close refuses to free the pool under them.
func TestRingHeldBuffers(t *testing.T) {
	needEAL(t)
	p, err := Open(Config{Vdev: "net_ring_held", IP: ringIP, UDPPort: 7000, PoolSize: 511, RxDesc: 256, TxDesc: 256, Burst: 32})
	if err != nil {
		t.Fatal(err)
	}
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	dgs := make([]dataplane.Datagram, 20)
	for i := range dgs {
		dgs[i] = datagram(self, fragments(1, 1, uint64(i), 100, 100)[0])
	}
	if n, err := p.TxBurst(dgs); n != len(dgs) || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	pkts := make([]dataplane.Packet, 64)
	var held []dataplane.BufRef
	deadline := time.Now().Add(2 * time.Second)
	for len(held) < len(dgs) && time.Now().Before(deadline) {
		n, _ := p.RxBurst(pkts)
		for _, pk := range pkts[:n] {
			held = append(held, pk.Buf)
		}
	}
	if len(held) != len(dgs) {
		t.Fatalf("received %d of %d", len(held), len(dgs))
	}
	if got := p.Stats().BufInUse; got != base+uint64(len(held)) {
		t.Errorf("BufInUse = %d while holding %d, want %d", got, len(held), base+uint64(len(held)))
	}
	p.Release(held[:5])
	if got := p.Stats().BufInUse; got != base+uint64(len(held)-5) {
		t.Errorf("BufInUse = %d after releasing 5, want %d", got, base+uint64(len(held)-5))
	}
	// Closing with 15 buffers held must not free their memory.
	err = p.Close()
	if !errors.Is(err, ErrBuffersHeld) {
		t.Fatalf("Close with held buffers = %v, want ErrBuffersHeld", err)
	}
	if _, err := p.RxBurst(pkts); !errors.Is(err, ErrClosed) {
		t.Errorf("RxBurst after Close = %v, want ErrClosed", err)
	}
	if got := p.Stats().BufInUse; got != base+15 {
		t.Errorf("BufInUse after refused Close = %d, want %d", got, base+15)
	}
	// The buffers are still readable and can still be released (into the
	// pool that Close left allocated); then Close finishes.
	p.Release(held[5:])
	if err := p.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("third Close = %v", err)
	}
	if st := p.Stats(); st.BufInUse != 0 || st.RxPackets != 20 {
		t.Errorf("final stats %+v", st)
	}
}

// TestRingFiltersAndSource sends to other ports and addresses, and checks
// AcceptAnyIP with replies from Endpoint.Local.
func TestRingFiltersAndSource(t *testing.T) {
	p := ringPort(t, Config{})
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	other := self
	other.Addr = netip.AddrPortFrom(ringIP, 7001)
	otherIP := self
	otherIP.Addr = netip.AddrPortFrom(netip.MustParseAddr("10.99.1.9"), 7000)
	payload := fragments(1, 1, 1, 64, 64)[0]
	dgs := []dataplane.Datagram{datagram(other, payload), datagram(otherIP, payload), datagram(other, payload), datagram(self, payload)}
	if n, err := p.TxBurst(dgs); n != 4 || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	got := 0
	pollUntil(t, p, 2*time.Second, func(*dataplane.Packet) { got++ }, func() bool {
		st := p.Stats()
		return st.RxPackets+st.RxFiltered == 4
	})
	ds := p.DriverStats()
	if got != 1 || ds.Filtered[FilterWrongPort] != 2 || ds.Filtered[FilterWrongIP] != 1 || ds.FilteredTotal() != 3 {
		t.Errorf("delivered %d, filtered %v; want 1 delivered, 2 wrong_port, 1 wrong_ip", got, ds.Filtered)
	}
	assertBufs(t, p, base)

	// AcceptAnyIP: delivered whatever the address; the reply comes from it.
	q := ringPort(t, Config{AcceptAnyIP: true, UDPPort: 7100})
	anyAddr := netip.AddrPortFrom(netip.MustParseAddr("10.99.1.77"), 7100)
	to := dataplane.Endpoint{Addr: anyAddr, MAC: q.MAC()}
	if n, err := q.TxBurst([]dataplane.Datagram{datagram(to, payload)}); n != 1 || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	var first dataplane.Endpoint
	if !pollUntil(t, q, 2*time.Second, func(pk *dataplane.Packet) { first = pk.From }, func() bool { return first.Addr.IsValid() }) {
		t.Fatal("nothing received")
	}
	// It was sent from the configured IP, to 10.99.1.77.
	if first.Local != anyAddr || first.Addr != netip.AddrPortFrom(ringIP, 7100) {
		t.Fatalf("From = %+v", first)
	}
	// Reply to the sender from the address it used (Local): the frame
	// loops back with that source.
	back := dataplane.Endpoint{Addr: anyAddr, Local: first.Local, MAC: q.MAC()}
	if n, err := q.TxBurst([]dataplane.Datagram{datagram(back, payload)}); n != 1 || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	var second dataplane.Endpoint
	pollUntil(t, q, 2*time.Second, func(pk *dataplane.Packet) { second = pk.From }, func() bool { return second.Addr.IsValid() })
	if second.Addr != anyAddr {
		t.Errorf("reply came from %v, want %v", second.Addr, anyAddr)
	}
}

// TestRingTxErrors checks datagrams TxBurst refuses and its TxFailed count.
func TestRingTxErrors(t *testing.T) {
	p := ringPort(t, Config{})
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	ok := datagram(self, fragments(1, 1, 1, 64, 64)[0])
	big := ok
	big.Payload = make([]byte, p.MaxPayload()+1)
	noMAC := ok
	noMAC.To.MAC = [6]byte{}
	v6 := ok
	v6.To.Addr = netip.MustParseAddrPort("[fd00::1]:7000")

	failed := uint64(0)
	for _, c := range []struct {
		d    dataplane.Datagram
		want error
	}{{big, ErrTooLarge}, {noMAC, ErrNoMAC}, {v6, ErrNotIPv4}} {
		n, err := p.TxBurst([]dataplane.Datagram{ok, ok, c.d, ok})
		if n != 2 || !errors.Is(err, c.want) {
			t.Errorf("TxBurst = %d, %v; want 2, %v", n, err, c.want)
		}
		failed += 2
	}
	if st := p.Stats(); st.TxFailed != failed || st.TxPackets != 6 {
		t.Errorf("TxFailed = %d, TxPackets = %d; want %d, 6", st.TxFailed, st.TxPackets, failed)
	}
	// The largest payload that fits does go through.
	fit := ok
	fit.Payload = make([]byte, p.MaxPayload())
	if n, err := p.TxBurst([]dataplane.Datagram{fit}); n != 1 || err != nil {
		t.Errorf("TxBurst(max payload) = %d, %v", n, err)
	}
	if p.MTU() != 1500 || p.MaxPayload() != wire.DefaultFragSize {
		t.Errorf("MTU %d, MaxPayload %d; want 1500, %d", p.MTU(), p.MaxPayload(), wire.DefaultFragSize)
	}
	pollUntil(t, p, 2*time.Second, nil, func() bool { return p.Stats().RxPackets == 7 })
	assertBufs(t, p, base)
}

// TestRingJumbo sends 9000-byte payloads through a port with a jumbo data
// room.
func TestRingJumbo(t *testing.T) {
	p := ringPort(t, Config{DataRoom: 9216, PoolSize: 1023, RxDesc: 256, TxDesc: 256})
	base := p.Stats().BufInUse
	frags := fragments(1, 2, 3, 36000, 9000)
	dgs := make([]dataplane.Datagram, len(frags))
	for i, f := range frags {
		dgs[i] = datagram(selfEndpoint(p), f)
	}
	if p.MTU() != 9216-18 || p.MaxPayload() < 9000 {
		t.Errorf("jumbo port: MTU %d, MaxPayload %d", p.MTU(), p.MaxPayload())
	}
	if n, err := p.TxBurst(dgs); n != len(dgs) || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	var got [][]byte
	pollUntil(t, p, 2*time.Second, func(pk *dataplane.Packet) { got = append(got, bytes.Clone(pk.Data)) },
		func() bool { return len(got) == len(frags) })
	for i := range frags {
		if i >= len(got) || !bytes.Equal(got[i], frags[i]) {
			t.Fatalf("jumbo datagram %d lost or different", i)
		}
	}
	assertBufs(t, p, base)
}

// TestRingPoolExhaustion fills the pool with held buffers and checks that
// TxBurst then sends a shorter prefix and counts the rest.
func TestRingPoolExhaustion(t *testing.T) {
	p := ringPort(t, Config{PoolSize: 400, RxDesc: 128, TxDesc: 512, Burst: 64})
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	dgs := make([]dataplane.Datagram, 64)
	for i := range dgs {
		dgs[i] = datagram(self, fragments(1, 1, uint64(i), 64, 64)[0])
	}
	// 6 bursts of 64 = 384 frames in the ring; 16 mbufs left.
	for i := 0; i < 6; i++ {
		if n, _ := p.TxBurst(dgs); n != 64 {
			t.Fatalf("burst %d: sent %d", i, n)
		}
	}
	n, err := p.TxBurst(dgs)
	if n != 16 || err != nil {
		t.Errorf("TxBurst with 16 mbufs left = %d, %v; want 16, nil", n, err)
	}
	if st := p.Stats(); st.TxFailed != 48 || st.BufInUse != 400 {
		t.Errorf("TxFailed = %d, BufInUse = %d; want 48, 400", st.TxFailed, st.BufInUse)
	}
	pollUntil(t, p, 2*time.Second, nil, func() bool { return p.Stats().RxPackets == 400 })
	assertBufs(t, p, base)
}

// TestBurstLoopAllocs checks that the TxBurst/RxBurst/Release loop allocates
// nothing.
func TestBurstLoopAllocs(t *testing.T) {
	p := ringPort(t, Config{})
	base := p.Stats().BufInUse
	self := selfEndpoint(p)
	dgs := make([]dataplane.Datagram, 32)
	for i := range dgs {
		dgs[i] = datagram(self, fragments(1, 1, uint64(i), 1432, 1432)[0])
	}
	pkts := make([]dataplane.Packet, 64)
	bufs := make([]dataplane.BufRef, 0, 64)
	var h wire.Header
	bad := 0
	allocs := testing.AllocsPerRun(200, func() {
		p.TxBurst(dgs)
		n, _ := p.RxBurst(pkts)
		bufs = bufs[:0]
		for i := 0; i < n; i++ {
			if wire.Decode(pkts[i].Data, &h) != nil || pkts[i].From.Addr != self.Addr {
				bad++
			}
			bufs = append(bufs, pkts[i].Buf)
		}
		p.Release(bufs)
	})
	if allocs != 0 {
		t.Errorf("burst loop allocates %.1f times per iteration, want 0", allocs)
	}
	if bad != 0 {
		t.Errorf("%d bad packets", bad)
	}
	pollUntil(t, p, time.Second, nil, func() bool { return p.Stats().BufInUse == base })
	assertBufs(t, p, base)
}

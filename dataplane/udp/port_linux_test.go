//go:build linux

package udp

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Every test binds to loopback addresses with ephemeral ports and sends only
// to ports it opened itself.

var loopbacks = []struct {
	name   string
	listen string
}{
	{"ipv4", "127.0.0.1:0"},
	{"ipv6", "[::1]:0"},
}

// openPort opens a port and registers a cleanup that checks the buffer pool
// is back at its baseline (every buffer free, free list intact) and closes
// the port.
func openPort(t testing.TB, cfg Config) *Port {
	t.Helper()
	p, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%+v): %v", cfg, err)
	}
	t.Cleanup(func() {
		checkPoolBaseline(t, p)
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

// checkPoolBaseline fails the test unless every buffer of p is free and the
// free list holds each index exactly once.
func checkPoolBaseline(t testing.TB, p *Port) {
	t.Helper()
	st := p.Stats()
	if st.BufInUse != 0 {
		t.Errorf("BufInUse = %d at the end of the test, want 0", st.BufInUse)
	}
	if got, want := len(p.pool.free), p.pool.capacity(); got != want || uint64(want) != st.BufCapacity {
		t.Errorf("free list holds %d buffers, capacity %d (stats %d)", got, want, st.BufCapacity)
	}
	seen := make([]bool, p.pool.capacity())
	for _, i := range p.pool.free {
		if seen[i] || p.pool.out[i] {
			t.Fatalf("free list corrupt: index %d twice or marked out", i)
		}
		seen[i] = true
	}
}

// payloadByte is the byte at offset i of datagram seq's payload.
func payloadByte(seq uint64, i int) byte { return byte(seq*131 + uint64(i)*7 + uint64(i>>8)) }

// makeDatagram builds datagram seq with n payload bytes addressed to to.
func makeDatagram(d *dataplane.Datagram, to netip.AddrPort, seq uint64, payload []byte) {
	for i := range payload {
		payload[i] = payloadByte(seq, i)
	}
	h := wire.Header{Kind: wire.KindRequest, Model: 7, Flow: 3, Request: seq,
		FragCount: 1, TotalLen: uint32(len(payload)), PayloadLen: uint16(len(payload))}
	wire.Encode(d.Header[:], &h)
	d.To = dataplane.Endpoint{Addr: to}
	d.Payload = payload
}

// checkPacket decodes pkt's header and verifies its payload bytes; it
// returns the sequence number.
func checkPacket(t testing.TB, pkt *dataplane.Packet, wantLen int) uint64 {
	t.Helper()
	var h wire.Header
	if err := wire.Decode(pkt.Data, &h); err != nil {
		t.Fatalf("packet of %d bytes: %v", len(pkt.Data), err)
	}
	if wantLen >= 0 && len(pkt.Data) != wantLen {
		t.Fatalf("seq %d: %d bytes, want %d", h.Request, len(pkt.Data), wantLen)
	}
	p := pkt.Data[wire.HeaderLen:]
	for i := range p {
		if p[i] != payloadByte(h.Request, i) {
			t.Fatalf("seq %d: payload byte %d = %#x, want %#x", h.Request, i, p[i], payloadByte(h.Request, i))
		}
	}
	return h.Request
}

// drain receives until fn has seen want packets or the deadline passes,
// releasing every packet after fn. It returns the number received.
func drain(t testing.TB, p *Port, want int, timeout time.Duration, fn func(*dataplane.Packet)) int {
	t.Helper()
	pkts := make([]dataplane.Packet, 64)
	refs := make([]dataplane.BufRef, 64)
	got := 0
	deadline := time.Now().Add(timeout)
	for got < want && time.Now().Before(deadline) {
		n, err := p.RxBurst(pkts)
		if err != nil {
			t.Fatalf("RxBurst: %v", err)
		}
		for i := range n {
			if fn != nil {
				fn(&pkts[i])
			}
			refs[i] = pkts[i].Buf
		}
		p.Release(refs[:n])
		got += n
		if n == 0 {
			if err := p.Wait(int64(10 * time.Millisecond)); err != nil {
				t.Fatalf("Wait: %v", err)
			}
		}
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			a := openPort(t, Config{Listen: lb.listen, BufCount: 64, BufSize: 2048})
			b := openPort(t, Config{Listen: lb.listen, BufCount: 256, BufSize: 2048})
			const total, burst = 3000, 100 // 100 > Burst (32): 4 sendmmsg calls per TxBurst
			dgs := make([]dataplane.Datagram, burst)
			bufs := make([][]byte, burst)
			for i := range bufs {
				bufs[i] = make([]byte, 1500)
			}
			size := func(seq uint64) int { return int(seq*37) % 1500 }
			seen := make([]bool, total)
			var wantBytes uint64
			received, rxCalls := 0, uint64(0)
			check := func(pkt *dataplane.Packet) {
				seq := checkPacket(t, pkt, -1)
				if seq >= total || seen[seq] {
					t.Fatalf("unexpected or duplicate seq %d", seq)
				}
				if len(pkt.Data) != wire.HeaderLen+size(seq) {
					t.Fatalf("seq %d: %d bytes, want %d", seq, len(pkt.Data), wire.HeaderLen+size(seq))
				}
				seen[seq] = true
				if pkt.From.Addr != a.LocalAddr() || pkt.From.Local != b.LocalAddr() {
					t.Fatalf("endpoint %+v, want from %v to %v", pkt.From, a.LocalAddr(), b.LocalAddr())
				}
			}
			pkts := make([]dataplane.Packet, 64)
			refs := make([]dataplane.BufRef, 64)
			for seq := uint64(0); seq < total; seq += burst {
				for i := range dgs {
					s := seq + uint64(i)
					makeDatagram(&dgs[i], b.LocalAddr(), s, bufs[i][:size(s)])
					wantBytes += uint64(wire.HeaderLen + size(s))
				}
				n, err := a.TxBurst(dgs)
				if n != burst || err != nil {
					t.Fatalf("TxBurst = %d, %v", n, err)
				}
				// Take what has arrived, one RxBurst at a time.
				for {
					k, err := b.RxBurst(pkts)
					rxCalls++
					if err != nil {
						t.Fatal(err)
					}
					for i := range k {
						check(&pkts[i])
						refs[i] = pkts[i].Buf
					}
					b.Release(refs[:k])
					received += k
					if k == 0 {
						break
					}
				}
			}
			before := b.DriverStats().RxSyscalls
			received += drain(t, b, total-received, 5*time.Second, check)
			rxCalls += b.DriverStats().RxSyscalls - before
			if received != total {
				t.Fatalf("received %d of %d datagrams", received, total)
			}
			as, bs := a.Stats(), b.Stats()
			if as.TxPackets != total || as.TxBytes != wantBytes || as.TxFailed != 0 {
				t.Errorf("sender stats %+v, want %d packets, %d bytes", as, total, wantBytes)
			}
			if bs.RxPackets != total || bs.RxBytes != wantBytes || bs.RxFiltered != 0 || bs.RxMissed != 0 {
				t.Errorf("receiver stats %+v, want %d packets, %d bytes", bs, total, wantBytes)
			}
			ad, bd := a.DriverStats(), b.DriverStats()
			// Each TxBurst of 100 goes out in chunks of 32, 32, 32 and 4.
			if want := uint64(total / burst * 4); ad.TxBlocked == 0 && ad.TxSyscalls != want {
				t.Errorf("%d sendmmsg calls, want %d", ad.TxSyscalls, want)
			}
			if bd.RxSyscalls != rxCalls {
				t.Errorf("%d recvmmsg calls for %d RxBurst calls", bd.RxSyscalls, rxCalls)
			}
			if bd.RxSyscalls >= total/2 {
				t.Errorf("%d recvmmsg calls for %d datagrams: not batching", bd.RxSyscalls, total)
			}
		})
	}
}

func TestStdlibInterop(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			p := openPort(t, Config{Listen: lb.listen, BufCount: 64, BufSize: 4096})
			c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(p.LocalAddr().Addr(), 0)))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			cAddr := c.LocalAddr().(*net.UDPAddr).AddrPort()
			const n = 50
			var d dataplane.Datagram
			for seq := range uint64(n) {
				makeDatagram(&d, p.LocalAddr(), seq, make([]byte, seq*20))
				msg := append(d.Header[:], d.Payload...)
				if _, err := c.WriteToUDPAddrPort(msg, p.LocalAddr()); err != nil {
					t.Fatal(err)
				}
			}
			// Echo every request back to its sender with a new payload.
			replies := make([]dataplane.Datagram, 0, n)
			got := drain(t, p, n, 5*time.Second, func(pkt *dataplane.Packet) {
				s := checkPacket(t, pkt, int(wire.HeaderLen+seq(pkt)*20))
				if pkt.From.Addr.Addr().Unmap() != cAddr.Addr().Unmap() || pkt.From.Addr.Port() != cAddr.Port() {
					t.Fatalf("from %v, want %v", pkt.From.Addr, cAddr)
				}
				var r dataplane.Datagram
				makeDatagram(&r, pkt.From.Addr, s+1000, make([]byte, s*30))
				replies = append(replies, r)
			})
			if got != n {
				t.Fatalf("received %d of %d", got, n)
			}
			if k, err := p.TxBurst(replies); k != n || err != nil {
				t.Fatalf("TxBurst = %d, %v", k, err)
			}
			buf := make([]byte, 65536)
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			for range n {
				m, from, err := c.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatal(err)
				}
				if from.Port() != p.LocalAddr().Port() {
					t.Fatalf("reply from %v", from)
				}
				pkt := dataplane.Packet{Data: buf[:m]}
				s := seq(&pkt)
				checkPacket(t, &pkt, int(wire.HeaderLen+(s-1000)*30))
			}
		})
	}
}

// seq returns the request id in pkt's header.
func seq(pkt *dataplane.Packet) uint64 {
	var h wire.Header
	if wire.Decode(pkt.Data, &h) != nil {
		return 1 << 62
	}
	return h.Request
}

func TestDualStack(t *testing.T) {
	p := openPort(t, Config{Listen: ":0", BufCount: 16, BufSize: 2048})
	if p.family != unix.AF_INET6 {
		t.Skip("no dual-stack socket on this host")
	}
	port := p.LocalAddr().Port()
	for _, lb := range loopbacks {
		peer := openPort(t, Config{Listen: lb.listen, BufCount: 16, BufSize: 2048})
		to := netip.AddrPortFrom(peer.LocalAddr().Addr(), port)
		var d dataplane.Datagram
		makeDatagram(&d, to, 1, make([]byte, 100))
		if n, err := peer.TxBurst([]dataplane.Datagram{d}); n != 1 {
			t.Fatalf("%s: TxBurst = %d, %v", lb.name, n, err)
		}
		var from netip.AddrPort
		if drain(t, p, 1, 5*time.Second, func(pkt *dataplane.Packet) { from = pkt.From.Addr }) != 1 {
			t.Fatalf("%s: nothing received", lb.name)
		}
		if from != peer.LocalAddr() {
			t.Fatalf("%s: from %v, want %v (unmapped)", lb.name, from, peer.LocalAddr())
		}
		// Reply through the dual-stack socket (IPv4 is mapped on the way out).
		makeDatagram(&d, from, 2, make([]byte, 10))
		if n, err := p.TxBurst([]dataplane.Datagram{d}); n != 1 {
			t.Fatalf("%s: reply TxBurst = %d, %v", lb.name, n, err)
		}
		if drain(t, peer, 1, 5*time.Second, func(pkt *dataplane.Packet) { checkPacket(t, pkt, 50) }) != 1 {
			t.Fatalf("%s: reply not received", lb.name)
		}
	}
}

func TestJumbo(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			a := openPort(t, Config{Listen: lb.listen, BufCount: 4, BufSize: 1024})
			b := openPort(t, Config{Listen: lb.listen, BufCount: 16}) // default BufSize
			if b.pool.size != DefaultBufSize {
				t.Fatalf("BufSize %d, want %d", b.pool.size, DefaultBufSize)
			}
			sizes := []int{9000, 60000, 100, 60000, DefaultBufSize - wire.HeaderLen, 0, 8960}
			dgs := make([]dataplane.Datagram, len(sizes))
			for i, s := range sizes {
				payload := make([]byte, s)
				makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), payload)
				// PayloadLen is 16 bits: the largest sizes still fit.
			}
			if n, err := a.TxBurst(dgs); n != len(dgs) || err != nil {
				t.Fatalf("TxBurst = %d, %v", n, err)
			}
			seen := make([]bool, len(sizes))
			got := drain(t, b, len(sizes), 5*time.Second, func(pkt *dataplane.Packet) {
				s := seq(pkt)
				if s >= uint64(len(sizes)) || seen[s] {
					t.Fatalf("bad or duplicate seq %d", s)
				}
				seen[s] = true
				checkPacket(t, pkt, wire.HeaderLen+sizes[s])
			})
			if got != len(sizes) {
				t.Fatalf("received %d of %d", got, len(sizes))
			}
			if st := b.Stats(); st.RxFiltered != 0 {
				t.Fatalf("RxFiltered = %d", st.RxFiltered)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			a := openPort(t, Config{Listen: lb.listen, BufCount: 4})
			b := openPort(t, Config{Listen: lb.listen, BufCount: 8, BufSize: 1024})
			// Datagram sizes, header included: 1024 fits exactly.
			sizes := []int{500, 2000, 1024, 1025, 60000, 50}
			fits := map[int]bool{500: true, 1024: true, 50: true}
			dgs := make([]dataplane.Datagram, len(sizes))
			for i, s := range sizes {
				makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, s-wire.HeaderLen))
			}
			if n, err := a.TxBurst(dgs); n != len(dgs) || err != nil {
				t.Fatalf("TxBurst = %d, %v", n, err)
			}
			var got []int
			// Hold the packets until all have arrived to check BufInUse.
			pkts := make([]dataplane.Packet, 8)
			var held []dataplane.BufRef
			deadline := time.Now().Add(5 * time.Second)
			for len(got) < 3 && time.Now().Before(deadline) {
				n, err := b.RxBurst(pkts)
				if err != nil {
					t.Fatal(err)
				}
				for i := range n {
					checkPacket(t, &pkts[i], sizes[seq(&pkts[i])])
					held = append(held, pkts[i].Buf)
					got = append(got, len(pkts[i].Data))
				}
				if n == 0 {
					b.Wait(int64(10 * time.Millisecond))
				}
			}
			if len(got) != 3 {
				t.Fatalf("received %d datagrams, want the 3 that fit", len(got))
			}
			for _, s := range got {
				if !fits[s] {
					t.Errorf("received a %d-byte datagram", s)
				}
			}
			// The two truncated ones may trail the last good one: wait for
			// the counters to settle.
			for time.Now().Before(deadline) && b.Stats().RxFiltered < 3 {
				if n, _ := b.RxBurst(pkts); n != 0 {
					t.Fatalf("received %d more datagrams", n)
				}
				if b.Stats().RxFiltered == 3 {
					break
				}
				b.Wait(int64(time.Millisecond))
			}
			st := b.Stats()
			if st.RxFiltered != 3 || b.DriverStats().RxTruncated != 3 || st.RxPackets != 3 {
				t.Errorf("stats %+v %+v, want 3 truncated, 3 packets", st, b.DriverStats())
			}
			if st.BufInUse != 3 {
				t.Errorf("BufInUse = %d while holding 3", st.BufInUse)
			}
			b.Release(held)
		})
	}
}

func TestPoolExhaustion(t *testing.T) {
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 8, BufSize: 256})
	const total = 20
	dgs := make([]dataplane.Datagram, total)
	for i := range dgs {
		makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 100+i))
	}
	if n, err := a.TxBurst(dgs); n != total || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	seen := make([]bool, total)
	pkts := make([]dataplane.Packet, 32)
	var held []dataplane.BufRef
	take := func(want int) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for got := 0; got < want; {
			if time.Now().After(deadline) {
				t.Fatalf("received %d of %d", got, want)
			}
			n, err := b.RxBurst(pkts)
			if err != nil {
				t.Fatal(err)
			}
			if got+n > want {
				t.Fatalf("RxBurst returned %d packets with %d buffers free", n, want-got)
			}
			for i := range n {
				s := checkPacket(t, &pkts[i], wire.HeaderLen+100+int(seq(&pkts[i])))
				if seen[s] {
					t.Fatalf("duplicate seq %d", s)
				}
				seen[s] = true
				held = append(held, pkts[i].Buf)
			}
			got += n
			if n == 0 {
				b.Wait(int64(time.Millisecond))
			}
		}
	}
	take(8)
	if st := b.Stats(); st.BufInUse != 8 || st.BufCapacity != 8 {
		t.Fatalf("stats %+v, want 8 of 8 in use", st)
	}
	calls := b.DriverStats().RxSyscalls
	if n, err := b.RxBurst(pkts); n != 0 || err != nil {
		t.Fatalf("RxBurst with an empty pool = %d, %v", n, err)
	}
	if d := b.DriverStats(); d.RxNoBuf != 1 || d.RxSyscalls != calls {
		t.Fatalf("empty pool: RxNoBuf %d, %d recvmmsg calls", d.RxNoBuf, d.RxSyscalls-calls)
	}
	// With the pool empty Wait ignores the (readable) socket.
	start := time.Now()
	if err := b.Wait(int64(20 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 15*time.Millisecond {
		t.Errorf("Wait with an empty pool returned after %v", el)
	}
	if err := b.Wait(-1); err != nil {
		t.Fatal(err)
	}
	b.Release(held[:3])
	held = held[3:]
	take(3)
	b.Release(held)
	held = held[:0]
	// The rest, more than the pool holds, with the buffers cycling.
	got := drain(t, b, total-11, 5*time.Second, func(pkt *dataplane.Packet) {
		s := checkPacket(t, pkt, wire.HeaderLen+100+int(seq(pkt)))
		if seen[s] {
			t.Fatalf("duplicate seq %d", s)
		}
		seen[s] = true
	})
	if got != total-11 {
		t.Fatalf("received %d of the last %d", got, total-11)
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("seq %d lost", i)
		}
	}
	if st := b.Stats(); st.RxPackets != total || st.RxMissed != 0 || st.RxFiltered != 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestRxMissed(t *testing.T) {
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	// A 16 KiB receive buffer (the kernel doubles the 8 KiB asked) holds a
	// few datagrams of the 200 sent.
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 256, BufSize: 2048, RecvBuffer: 8192})
	const total = 200
	dgs := make([]dataplane.Datagram, total)
	for i := range dgs {
		makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 1000))
	}
	if n, err := a.TxBurst(dgs); n != total || err != nil {
		t.Fatalf("TxBurst = %d, %v", n, err)
	}
	time.Sleep(20 * time.Millisecond)
	first := drain(t, b, total, 100*time.Millisecond, nil)
	if first == 0 || first == total {
		t.Fatalf("received %d of %d through a %d-byte socket buffer", first, total, b.DriverStats().RecvBuffer)
	}
	// The kernel reports the drop count with the next datagram queued.
	if n, err := a.TxBurst(dgs[:1]); n != 1 {
		t.Fatal(err)
	}
	if drain(t, b, 1, 5*time.Second, nil) != 1 {
		t.Fatal("last datagram not received")
	}
	t.Logf("socket buffer %d bytes: %d received, %d missed", b.DriverStats().RecvBuffer, first, b.Stats().RxMissed)
	if st := b.Stats(); int(st.RxMissed)+first != total {
		t.Errorf("received %d + missed %d, want %d sent", first, st.RxMissed, total)
	}
}

func TestRelease(t *testing.T) {
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 8, BufSize: 256})
	dgs := make([]dataplane.Datagram, 8)
	for i := range dgs {
		makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 50))
	}
	send := func() {
		if n, err := a.TxBurst(dgs); n != len(dgs) {
			t.Fatal(err)
		}
	}
	send()
	var refs []dataplane.BufRef
	pkts := make([]dataplane.Packet, 8)
	for deadline := time.Now().Add(5 * time.Second); len(refs) < 8 && time.Now().Before(deadline); {
		n, _ := b.RxBurst(pkts[:8-len(refs)])
		for i := range n {
			refs = append(refs, pkts[i].Buf)
		}
		b.Wait(int64(time.Millisecond))
	}
	if len(refs) != 8 {
		t.Fatalf("received %d of 8", len(refs))
	}
	distinct := map[dataplane.BufRef]bool{}
	for _, r := range refs {
		distinct[r] = true
	}
	if len(distinct) != 8 {
		t.Fatalf("buffers handed out twice: %v", refs)
	}
	b.Release(refs[:1])
	b.Release(refs[:1]) // double
	b.Release([]dataplane.BufRef{refs[1], refs[1], 1 << 40, 8, dataplane.BufRef(^uint64(0))})
	d := b.DriverStats()
	if d.DoubleRelease != 2 || d.ForeignRelease != 3 {
		t.Errorf("double %d foreign %d, want 2 and 3", d.DoubleRelease, d.ForeignRelease)
	}
	if st := b.Stats(); st.BufInUse != 6 {
		t.Errorf("BufInUse = %d, want 6", st.BufInUse)
	}
	b.Release(refs[2:])
	b.Release(refs) // all double now
	if d := b.DriverStats(); d.DoubleRelease != 10 {
		t.Errorf("double releases %d, want 10", d.DoubleRelease)
	}
	// The pool still works and hands out each buffer once.
	send()
	distinct = map[dataplane.BufRef]bool{}
	got := drain(t, b, 8, 5*time.Second, func(pkt *dataplane.Packet) {
		checkPacket(t, pkt, 90)
	})
	if got != 8 {
		t.Fatalf("received %d of 8 after bad releases", got)
	}
}

func TestWait(t *testing.T) {
	a := openPort(t, Config{Listen: "[::1]:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "[::1]:0", BufCount: 4, BufSize: 256})
	// Timeout: nil error after about the timeout.
	start := time.Now()
	if err := b.Wait(int64(30 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 25*time.Millisecond {
		t.Errorf("Wait(30ms) returned after %v", el)
	}
	if err := b.Wait(0); err != nil {
		t.Fatal(err)
	}
	// Data wakes an unlimited Wait.
	done := make(chan error, 1)
	go func() { done <- b.Wait(-1) }()
	time.Sleep(20 * time.Millisecond)
	var d dataplane.Datagram
	makeDatagram(&d, b.LocalAddr(), 1, make([]byte, 10))
	if n, err := a.TxBurst([]dataplane.Datagram{d}); n != 1 {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return when a datagram arrived")
	}
	// A datagram already queued makes Wait return at once.
	start = time.Now()
	if err := b.Wait(int64(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("Wait with a datagram queued took %v", el)
	}
	if drain(t, b, 1, 5*time.Second, nil) != 1 {
		t.Fatal("datagram lost")
	}
}

func TestCloseUnblocksWait(t *testing.T) {
	for _, timeout := range []int64{-1, int64(time.Minute)} {
		p, err := Open(context.Background(), Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- p.Wait(timeout) }()
		time.Sleep(30 * time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("Wait(%d) returned early: %v", timeout, err)
		default:
		}
		closed := make(chan error, 1)
		go func() { closed <- p.Close() }()
		select {
		case err := <-done:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Wait after Close: %v, want net.ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Wait")
		}
		if err := <-closed; err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := p.Close(); err != nil {
			t.Errorf("second Close: %v", err)
		}
		if _, err := p.RxBurst(make([]dataplane.Packet, 4)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("RxBurst after Close: %v", err)
		}
		if err := p.Wait(1); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
		var d dataplane.Datagram
		makeDatagram(&d, p.LocalAddr(), 1, nil)
		if n, err := p.TxBurst([]dataplane.Datagram{d, d}); n != 0 || !errors.Is(err, net.ErrClosed) {
			t.Errorf("TxBurst after Close = %d, %v", n, err)
		}
		if st := p.Stats(); st.TxFailed != 2 {
			t.Errorf("TxFailed = %d, want 2", st.TxFailed)
		}
	}
}

func TestTxErrors(t *testing.T) {
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 16, BufSize: 256})
	mk := func(n int) []dataplane.Datagram {
		dgs := make([]dataplane.Datagram, n)
		for i := range dgs {
			makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 20))
		}
		return dgs
	}
	cases := []struct {
		name  string
		bad   func(*dataplane.Datagram)
		errno error
	}{
		{"zero address", func(d *dataplane.Datagram) { d.To.Addr = netip.AddrPort{} }, nil},
		{"ipv6 on ipv4 socket", func(d *dataplane.Datagram) {
			d.To.Addr = netip.AddrPortFrom(netip.IPv6Loopback(), b.LocalAddr().Port())
		}, nil},
		{"too large", func(d *dataplane.Datagram) { d.Payload = make([]byte, DefaultBufSize-wire.HeaderLen+1) }, unix.EMSGSIZE},
	}
	failed := uint64(0)
	for _, c := range cases {
		dgs := mk(5)
		c.bad(&dgs[2])
		n, err := a.TxBurst(dgs)
		if n != 2 || err == nil {
			t.Fatalf("%s: TxBurst = %d, %v; want 2 and an error", c.name, n, err)
		}
		if c.errno != nil && !errors.Is(err, c.errno) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.errno)
		}
		failed += 3
		if st := a.Stats(); st.TxFailed != failed {
			t.Errorf("%s: TxFailed = %d, want %d", c.name, st.TxFailed, failed)
		}
		// The caller drops the bad datagram and sends the rest.
		if n, err := a.TxBurst(dgs[3:]); n != 2 || err != nil {
			t.Fatalf("%s: resend = %d, %v", c.name, n, err)
		}
		if got := drain(t, b, 4, 5*time.Second, func(pkt *dataplane.Packet) { checkPacket(t, pkt, 60) }); got != 4 {
			t.Fatalf("%s: received %d of 4", c.name, got)
		}
	}
	if n, err := a.TxBurst(nil); n != 0 || err != nil {
		t.Fatalf("empty TxBurst = %d, %v", n, err)
	}
}

func TestConfig(t *testing.T) {
	bad := []Config{
		{},
		{Listen: "nonsense"},
		{Listen: "127.0.0.1:0", Burst: MaxBurst + 1},
		{Listen: "127.0.0.1:0", Burst: -1},
		{Listen: "127.0.0.1:0", BufSize: -5},
		{Listen: "127.0.0.1:0", BufCount: -1},
		{Listen: "127.0.0.1:0", BufCount: 1 << 20, BufSize: 1 << 20},
	}
	for _, c := range bad {
		if p, err := Open(context.Background(), c); err == nil {
			p.Close()
			t.Errorf("Open(%+v) succeeded", c)
		}
	}
	c, err := Config{Listen: "x"}.withDefaults()
	if err != nil || c.Burst != DefaultBurst || c.BufCount != DefaultBufCount || c.BufSize != DefaultBufSize ||
		c.RecvBuffer != DefaultRecvBuffer || c.SendBuffer != DefaultSendBuffer || c.TxWait != DefaultTxWait {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	// Addr wins over Listen; socket buffers are applied.
	p := openPort(t, Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), Listen: "[::1]:0",
		BufCount: 2, BufSize: 64, RecvBuffer: 1 << 20, SendBuffer: 1 << 19})
	if !p.LocalAddr().Addr().Is4() || p.LocalAddr().Port() == 0 {
		t.Errorf("bound to %v", p.LocalAddr())
	}
	if d := p.DriverStats(); d.RecvBuffer < 1<<20 || d.SendBuffer < 1<<19 {
		t.Logf("socket buffers %d/%d (capped by net.core.[rw]mem_max without CAP_NET_ADMIN)", d.RecvBuffer, d.SendBuffer)
	}
	// ReusePort lets two ports share an address.
	q := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 2, BufSize: 64, ReusePort: true})
	r := openPort(t, Config{Addr: q.LocalAddr(), BufCount: 2, BufSize: 64, ReusePort: true})
	if r.LocalAddr() != q.LocalAddr() {
		t.Errorf("reuseport: %v vs %v", r.LocalAddr(), q.LocalAddr())
	}
}

func TestSockaddr(t *testing.T) {
	var z zoneCache
	for _, s := range []string{"127.0.0.1:9", "10.1.2.3:65535", "[::1]:1", "[2001:db8::5]:4242"} {
		ap := netip.MustParseAddrPort(s)
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			var sa unix.RawSockaddrInet6
			n := fillSockaddr(&sa, fam, ap, &z)
			if fam == unix.AF_INET && ap.Addr().Is6() {
				if n != 0 {
					t.Errorf("%s accepted on an IPv4 socket", s)
				}
				continue
			}
			if got := parseSockaddr(&sa, &z); got != ap {
				t.Errorf("%s through family %d: %v", s, fam, got)
			}
		}
	}
	// A v4-mapped address arrives unmapped.
	var sa unix.RawSockaddrInet6
	fillSockaddr(&sa, unix.AF_INET6, netip.MustParseAddrPort("[::ffff:127.0.0.1]:7"), &z)
	if got := parseSockaddr(&sa, &z); got != netip.MustParseAddrPort("127.0.0.1:7") {
		t.Errorf("mapped: %v", got)
	}
	// Scope ids become zones and back.
	ap := netip.MustParseAddrPort("[fe80::1%1]:5")
	if n := fillSockaddr(&sa, unix.AF_INET6, ap, &z); n == 0 || sa.Scope_id != 1 {
		t.Fatalf("scope id %d", sa.Scope_id)
	}
	if got := parseSockaddr(&sa, &z); got.Addr().Zone() == "" || got.Port() != 5 {
		t.Errorf("link-local: %v", got)
	}
	sa.Family = unix.AF_UNIX
	if got := parseSockaddr(&sa, &z); got.IsValid() {
		t.Errorf("unknown family parsed as %v", got)
	}
}

func TestAllocs(t *testing.T) {
	for _, lb := range loopbacks {
		t.Run(lb.name, func(t *testing.T) {
			a := openPort(t, Config{Listen: lb.listen, BufCount: 4, BufSize: 256})
			b := openPort(t, Config{Listen: lb.listen, BufCount: 128, BufSize: 2048})
			dgs := make([]dataplane.Datagram, 32)
			for i := range dgs {
				makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 200))
			}
			pkts := make([]dataplane.Packet, 32)
			refs := make([]dataplane.BufRef, 32)
			lost := 0
			round := func() {
				n, _ := a.TxBurst(dgs)
				for got, spins := 0, 0; got < n && spins < 1000; spins++ {
					k, _ := b.RxBurst(pkts)
					for i := range k {
						refs[i] = pkts[i].Buf
					}
					b.Release(refs[:k])
					got += k
					if k == 0 {
						b.Wait(int64(10 * time.Millisecond))
					}
					if spins == 999 {
						lost++
					}
				}
			}
			round()
			if allocs := testing.AllocsPerRun(200, round); allocs != 0 {
				t.Errorf("TxBurst+RxBurst+Release of 32 datagrams: %v allocations per round", allocs)
			}
			if allocs := testing.AllocsPerRun(100, func() { b.Wait(1000) }); allocs != 0 {
				t.Errorf("Wait: %v allocations", allocs)
			}
			if allocs := testing.AllocsPerRun(100, func() { b.RxBurst(pkts) }); allocs != 0 {
				t.Errorf("empty RxBurst: %v allocations", allocs)
			}
			if lost != 0 {
				t.Errorf("%d rounds lost datagrams", lost)
			}
			if st := b.Stats(); st.RxPackets != st.RxPackets/32*32 || st.RxPackets == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

func TestPayloadAliasing(t *testing.T) {
	// Data is capped at its length: appending cannot reach the next buffer.
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	var d dataplane.Datagram
	makeDatagram(&d, b.LocalAddr(), 9, make([]byte, 60))
	a.TxBurst([]dataplane.Datagram{d})
	drain(t, b, 1, 5*time.Second, func(pkt *dataplane.Packet) {
		if cap(pkt.Data) != len(pkt.Data) {
			t.Errorf("cap %d > len %d", cap(pkt.Data), len(pkt.Data))
		}
		if !bytes.Equal(pkt.Data[:wire.HeaderLen], d.Header[:]) {
			t.Errorf("header mismatch")
		}
	})
}

func TestStatsConcurrent(t *testing.T) {
	// Stats may be read from any goroutine while the I/O loop runs (run
	// with -race).
	a := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256})
	b := openPort(t, Config{Listen: "127.0.0.1:0", BufCount: 64, BufSize: 256})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
				_, _ = a.Stats(), b.Stats()
				_ = b.DriverStats()
			}
		}
	}()
	dgs := make([]dataplane.Datagram, 16)
	for i := range dgs {
		makeDatagram(&dgs[i], b.LocalAddr(), uint64(i), make([]byte, 30))
	}
	for range 20 {
		if n, err := a.TxBurst(dgs); n != len(dgs) {
			t.Fatal(err)
		}
		if got := drain(t, b, len(dgs), 5*time.Second, nil); got != len(dgs) {
			t.Fatalf("received %d of %d", got, len(dgs))
		}
	}
	close(stop)
	<-done
	if st := b.Stats(); st.RxPackets != 20*16 || st.RxBytes != 20*16*70 {
		t.Errorf("stats %+v", st)
	}
}

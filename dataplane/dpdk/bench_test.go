package dpdk

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sluice/dataplane"
)

// benchPort opens net_pcap replaying a file of 256 sluice fragments of
// payload bytes forever (infinite_rx=1).
func benchPort(b *testing.B, payload int) *Port {
	b.Helper()
	needEAL(b)
	frames := make([][]byte, 0, 256)
	for req := uint64(1); len(frames) < cap(frames); req++ {
		for _, f := range fragments(1, 1, req, 16*payload, payload) {
			frames = append(frames, udpFrame(b, udpSpec{dst: serverIP, dport: serverPort, payload: f}))
		}
	}
	// Not b.TempDir(): the sub-benchmark name puts '=' in the path, which
	// the devargs parser would split on.
	dir, err := os.MkdirTemp("", "sluice-bench")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	in := filepath.Join(dir, "bench.pcap")
	writePcap(b, in, frames[:256])
	benchSeq++
	return openPort(b, Config{Vdev: fmt.Sprintf("net_pcap_bench%d,rx_pcap=%s,infinite_rx=1", benchSeq, in),
		IP: serverIP, UDPPort: serverPort, Burst: 64, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
}

var benchSeq int

// BenchmarkRxRaw is the device ceiling: rte_eth_rx_burst and
// rte_pktmbuf_free_bulk in one cgo call per burst of 64, no parsing. The
// pkts/s metric is what any pipeline on this port can at best reach.
func BenchmarkRxRaw(b *testing.B) {
	for _, payload := range []int{64, 1432} {
		b.Run(fmt.Sprintf("payload=%d", payload), func(b *testing.B) {
			p := benchPort(b, payload)
			b.ResetTimer()
			start := time.Now()
			var n uint64
			for i := 0; i < b.N; i++ {
				n += uint64(p.RxRaw(64))
			}
			el := time.Since(start)
			b.ReportMetric(float64(n)/el.Seconds(), "pkts/s")
			b.ReportMetric(float64(el.Nanoseconds())/float64(max(n, 1)), "ns/pkt")
		})
	}
}

// BenchmarkRxBurst is the driver's full receive path: rx burst, parse and
// filter in C, Packet views in Go, bulk Release.
func BenchmarkRxBurst(b *testing.B) {
	for _, payload := range []int{64, 1432} {
		b.Run(fmt.Sprintf("payload=%d", payload), func(b *testing.B) {
			p := benchPort(b, payload)
			pkts := make([]dataplane.Packet, 64)
			bufs := make([]dataplane.BufRef, 64)
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			var n uint64
			for i := 0; i < b.N; i++ {
				k, _ := p.RxBurst(pkts)
				for j := 0; j < k; j++ {
					bufs[j] = pkts[j].Buf
				}
				p.Release(bufs[:k])
				n += uint64(k)
			}
			el := time.Since(start)
			b.ReportMetric(float64(n)/el.Seconds(), "pkts/s")
			b.ReportMetric(float64(el.Nanoseconds())/float64(max(n, 1)), "ns/pkt")
			if st := p.Stats(); st.RxFiltered != 0 {
				b.Fatalf("filtered %d frames", st.RxFiltered)
			}
		})
	}
}

// replayPcap writes a pcap of one request in 64 fragments of 1432 bytes
// to a file named name in the test's directory and returns its path.
func replayPcap(t *testing.T, name string) string {
	t.Helper()
	frames := make([][]byte, 0, 64)
	for _, f := range fragments(1, 1, 1, 64*1432, 1432) {
		frames = append(frames, udpFrame(t, udpSpec{dst: serverIP, dport: serverPort, payload: f}))
	}
	in := filepath.Join(t.TempDir(), name)
	writePcap(t, in, frames)
	return in
}

// TestMeasureRawRx checks the exported ceiling helper briefly.
func TestMeasureRawRx(t *testing.T) {
	needEAL(t)
	in := replayPcap(t, "m.pcap")
	p := openPort(t, Config{Vdev: "net_pcap_measure,rx_pcap=" + in + ",infinite_rx=1", IP: serverIP, UDPPort: serverPort})
	r := MeasureRawRx(p, 100*time.Millisecond)
	t.Logf("raw rx: %d frames in %v = %.0f pkts/s", r.Packets, r.Elapsed, r.PPS())
	if r.Packets == 0 || r.PPS() <= 0 {
		t.Errorf("no frames: %+v", r)
	}
}

// BenchmarkRingLoop sends bursts of 32 full-size fragments to the port
// itself through net_ring and receives and releases them: TxBurst (frame
// writing, two cgo calls) plus RxBurst and Release, per packet.
func BenchmarkRingLoop(b *testing.B) {
	needEAL(b)
	ringSeq.Add(1)
	p := openPort(b, Config{Vdev: fmt.Sprintf("net_ring_b%d", ringSeq.Load()), IP: ringIP, UDPPort: 7000,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	self := selfEndpoint(p)
	dgs := make([]dataplane.Datagram, 32)
	for i := range dgs {
		dgs[i] = datagram(self, fragments(1, 1, uint64(i), 1432, 1432)[0])
	}
	pkts := make([]dataplane.Packet, 64)
	bufs := make([]dataplane.BufRef, 64)
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	var n uint64
	for i := 0; i < b.N; i++ {
		p.TxBurst(dgs)
		k, _ := p.RxBurst(pkts)
		for j := 0; j < k; j++ {
			bufs[j] = pkts[j].Buf
		}
		p.Release(bufs[:k])
		n += uint64(k)
	}
	el := time.Since(start)
	b.ReportMetric(float64(n)/el.Seconds(), "pkts/s")
	b.ReportMetric(float64(el.Nanoseconds())/float64(max(n, 1)), "ns/pkt")
}

// TestRxRawHold checks the held ceiling's bookkeeping: RxRawHold keeps
// exactly hold frames out of the pool once that many came, never more
// than the pool less a burst, and RxRaw (of no frames) gives them back;
// Close gives back what is still held.
// The pool is a stack (LIFO) where DPDK's stack driver is installed, as
// the Makefile's packages install it.
func TestRxRawHold(t *testing.T) {
	needEAL(t)
	in := replayPcap(t, "h.pcap")
	const pool, burst = 1023, 32
	p := openPort(t, Config{Vdev: "net_pcap_hold,rx_pcap=" + in + ",infinite_rx=1", IP: serverIP, UDPPort: serverPort,
		PoolSize: pool, RxDesc: 256, TxDesc: 256, Burst: burst})
	if ops := p.PoolOps(); ops != "stack" {
		t.Errorf("PoolOps = %q, want stack", ops)
	}
	base := p.Stats().BufInUse
	for _, hold := range []int{0, 1, 100, 500} {
		got := 0
		for i := 0; i < 1000 && got < 2*pool; i++ {
			got += p.RxRawHold(burst, hold)
		}
		if got < 2*pool {
			t.Fatalf("hold %d: %d frames in 1000 bursts", hold, got)
		}
		want := uint64(hold)
		if held := p.Stats().BufInUse - base; held != want {
			t.Errorf("hold %d: %d frames out of the pool, want %d", hold, held, want)
		}
		p.RxRaw(0)
		if held := p.Stats().BufInUse - base; held != 0 {
			t.Errorf("hold %d: %d frames out of the pool after RxRaw(0), want 0", hold, held)
		}
	}
	// a hold beyond the pool is capped at the pool less a burst
	for range 100 {
		p.RxRawHold(burst, 5000)
	}
	if held := p.Stats().BufInUse - base; held > pool-burst {
		t.Errorf("hold 5000: %d frames out of a pool of %d", held, pool)
	}
	p.RxRawHold(burst, 10) // Close gives these back
}

//go:build linux

package udp

import (
	"fmt"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// BenchmarkRxBurst measures RxBurst+Release on loopback: each round the
// timer is stopped while a sender port queues up to 1024 datagrams in the
// receiver's socket buffer, then the receiver drains them in bursts of 32.
// It reports received packets per second; allocs/op is per packet.
func BenchmarkRxBurst(b *testing.B) {
	for _, size := range []int{64, 1472} { // datagram bytes, header included
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) {
			tx := openPort(b, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256, SendBuffer: 16 << 20})
			rx := openPort(b, Config{Listen: "127.0.0.1:0", BufCount: 1024, BufSize: 2048, RecvBuffer: 32 << 20})
			const round = 1024
			dgs := make([]dataplane.Datagram, round)
			payload := make([]byte, size-wire.HeaderLen)
			for i := range dgs {
				makeDatagram(&dgs[i], rx.LocalAddr(), uint64(i), payload)
			}
			pkts := make([]dataplane.Packet, 32)
			refs := make([]dataplane.BufRef, 32)
			b.ReportAllocs()
			b.ResetTimer()
			b.StopTimer()
			lost := 0
			for done := 0; done < b.N; {
				want := min(round, b.N-done)
				if n, err := tx.TxBurst(dgs[:want]); n != want {
					b.Fatalf("TxBurst = %d, %v", n, err)
				}
				b.StartTimer()
				got := 0
				for idle := 0; got < want && idle < 100; {
					k, err := rx.RxBurst(pkts)
					if err != nil {
						b.Fatal(err)
					}
					for i := range k {
						refs[i] = pkts[i].Buf
					}
					rx.Release(refs[:k])
					got += k
					if k == 0 {
						idle++
						rx.Wait(int64(time.Millisecond))
					}
				}
				b.StopTimer()
				lost += want - got
				done += want
			}
			if sec := b.Elapsed().Seconds(); sec > 0 {
				b.ReportMetric(float64(b.N-lost)/sec, "pkts/s")
			}
			if lost != 0 {
				b.ReportMetric(float64(lost), "lost")
			}
		})
	}
}

// BenchmarkTxBurst measures TxBurst of 32-datagram bursts to a loopback
// receiver that drains them outside the timer.
func BenchmarkTxBurst(b *testing.B) {
	tx := openPort(b, Config{Listen: "127.0.0.1:0", BufCount: 4, BufSize: 256, SendBuffer: 16 << 20})
	rx := openPort(b, Config{Listen: "127.0.0.1:0", BufCount: 1024, BufSize: 2048, RecvBuffer: 32 << 20})
	dgs := make([]dataplane.Datagram, 32)
	payload := make([]byte, 24)
	for i := range dgs {
		makeDatagram(&dgs[i], rx.LocalAddr(), uint64(i), payload)
	}
	pkts := make([]dataplane.Packet, 32)
	refs := make([]dataplane.BufRef, 32)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(dgs) {
		if n, err := tx.TxBurst(dgs); n != len(dgs) {
			b.Fatalf("TxBurst = %d, %v", n, err)
		}
		if i%1024 == 1024-len(dgs) {
			b.StopTimer()
			for {
				k, _ := rx.RxBurst(pkts)
				for j := range k {
					refs[j] = pkts[j].Buf
				}
				rx.Release(refs[:k])
				if k == 0 {
					break
				}
			}
			b.StartTimer()
		}
	}
	if sec := b.Elapsed().Seconds(); sec > 0 {
		b.ReportMetric(float64(b.N)/sec, "pkts/s")
	}
	b.StopTimer()
	drain(b, rx, 1<<30, 20*time.Millisecond, nil)
}

package dpdk

import (
	"fmt"
	"os"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
)

// TestMain cleans up the EAL (and /var/run/dpdk/<prefix>) after the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := CleanupEAL(); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// needEAL starts the process's EAL once (root only).
func needEAL(t testing.TB) {
	t.Helper()
	if !Available {
		if os.Getenv("SLUICE_REQUIRE_ROOT") == "1" {
			t.Fatal("this build has no DPDK (needs linux and cgo) and SLUICE_REQUIRE_ROOT=1")
		}
		t.Skip("this build has no DPDK (needs linux and cgo)")
	}
	dptest.RequireRoot(t)
	if err := InitEAL(DefaultEALArgs()); err != nil {
		t.Fatalf("InitEAL: %v", err)
	}
}

// openPort opens a port and closes it at cleanup, checking that every
// buffer went back to the pool.
func openPort(t testing.TB, cfg Config) *Port {
	t.Helper()
	p, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Vdev, err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close(%s): %v", p.Name(), err)
		}
	})
	return p
}

// assertBufs checks that the pool is back at its baseline level.
func assertBufs(t testing.TB, p *Port, baseline uint64) {
	t.Helper()
	if got := p.Stats().BufInUse; got != baseline {
		t.Errorf("%s: BufInUse = %d, want baseline %d", p.Name(), got, baseline)
	}
}

// releaseAll gives every packet's buffer back.
func releaseAll(p *Port, pkts []dataplane.Packet, bufs []dataplane.BufRef) {
	bufs = bufs[:0]
	for i := range pkts {
		bufs = append(bufs, pkts[i].Buf)
	}
	p.Release(bufs)
}

// pollUntil calls RxBurst until cond holds or d passes; every packet is
// handed to fn and released.
func pollUntil(t testing.TB, p *Port, d time.Duration, fn func(pk *dataplane.Packet), cond func() bool) bool {
	t.Helper()
	pkts := make([]dataplane.Packet, 64)
	bufs := make([]dataplane.BufRef, 0, 64)
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		n, err := p.RxBurst(pkts)
		if err != nil {
			t.Fatalf("RxBurst: %v", err)
		}
		if n == 0 {
			time.Sleep(50 * time.Microsecond)
			continue
		}
		for i := 0; i < n; i++ {
			if fn != nil {
				fn(&pkts[i])
			}
		}
		releaseAll(p, pkts[:n], bufs)
	}
	return true
}

// fragments returns the sluice request datagrams (header+payload) for one
// request of total bytes cut into frag-byte fragments.
func fragments(model uint16, flow uint32, req uint64, total, frag int) [][]byte {
	count := (total + frag - 1) / frag
	out := make([][]byte, 0, count)
	for i := 0; i < count; i++ {
		off := i * frag
		n := min(frag, total-off)
		b := make([]byte, wire.HeaderLen+n)
		h := wire.Header{Kind: wire.KindRequest, Model: model, Flow: flow, Request: req,
			FragIndex: uint16(i), FragCount: uint16(count), TotalLen: uint32(total),
			Offset: uint32(off), PayloadLen: uint16(n)}
		wire.Encode(b, &h)
		for j := 0; j < n; j++ {
			b[wire.HeaderLen+j] = byte(int(req)*31 + off + j)
		}
		out = append(out, b)
	}
	return out
}

// datagram makes a Datagram from an encoded header+payload.
func datagram(to dataplane.Endpoint, b []byte) dataplane.Datagram {
	var d dataplane.Datagram
	d.To = to
	copy(d.Header[:], b[:wire.HeaderLen])
	d.Payload = b[wire.HeaderLen:]
	return d
}

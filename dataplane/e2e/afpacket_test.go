package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane/dpdk"
	"sluice/dataplane/dptest"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// TestAfPacketVethRequests runs the whole dataplane on a DPDK net_af_packet
// port on one end of a veth pair, with a client in another network
// namespace sending multi-fragment requests at a paced rate. At least 95%
// must come back complete and correct (the VMs stall at random); every
// answer must match its request, nothing may be answered twice, and every
// mbuf must be back in the pool afterwards.
func TestAfPacketVethRequests(t *testing.T) {
	dptest.RequireRoot(t)
	if !dpdk.Available {
		t.Fatal("this build has no DPDK")
	}
	if err := dpdk.InitEAL(dpdk.DefaultEALArgs()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dpdk.CleanupEAL() })
	v := dptest.NewVeth(t, 150, 200)
	port, err := dpdk.Open(dpdk.Config{
		Vdev: fmt.Sprintf("net_af_packet_e2e,iface=%s,framecnt=32768,qpairs=1", v.Host),
		IP:   v.HostIP, UDPPort: wire.DefaultPort, PoolSize: 16383,
	})
	if err != nil {
		t.Fatal(err)
	}
	base := port.Stats().BufInUse
	defer func() {
		if err := port.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()

	out, err := egress.New(egress.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sink := dptest.NewDigestSink(1, 512)
	loop, err := ioloop.New(ioloop.DefaultConfig(), port, out, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := reasm.DefaultConfig()
	rcfg.MaxHeldFragments = 8192
	table, err := loop.NewTable(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink.Start(ctx, 1)
	lctx, lcancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() { loopErr <- loop.Run(lctx) }()

	conn, err := dptest.UDPInNetns(v.NS, netip.AddrPortFrom(v.PeerIP, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(8 << 20)
	cl := dptest.NewClient(conn, 5, wire.DefaultFragSize)
	server := netip.AddrPortFrom(v.HostIP, wire.DefaultPort)

	// 400 requests of 1-20 KB (1-14 fragments) at 400 requests/s
	const n = 400
	payloads := make(map[uint64][]byte, n)
	start := time.Now()
	for id := uint64(1); id <= n; id++ {
		p := make([]byte, 1000+int(id*7919)%19000)
		for i := range p {
			p[i] = byte(id*31) ^ byte(i)
		}
		payloads[id] = p
		if err := cl.Send(server, 1, id, wire.FlagRT, p); err != nil {
			t.Fatal(err)
		}
		if d := time.Until(start.Add(time.Duration(id) * 2500 * time.Microsecond)); d > 0 {
			time.Sleep(d)
		}
	}
	ok, bad, timedOut := 0, 0, 0
	deadline := time.Now().Add(5 * time.Second)
	for id := uint64(1); id <= n; id++ {
		r, got := cl.Wait(id, time.Until(deadline))
		if !got {
			continue
		}
		if r.Status == wire.StatusTimedOut {
			// a datagram lost while the VM stalled: the request's one
			// answer is timed_out, which the 95% rule below allows for
			timedOut++
			continue
		}
		if r.Status == wire.StatusOK && bytes.Equal(r.Output, dptest.Result(payloads[id])) {
			ok++
		} else {
			bad++
			t.Errorf("request %d: status %v, %d output bytes", id, r.Status, len(r.Output))
		}
	}
	lcancel()
	if err := <-loopErr; err != nil {
		t.Errorf("loop: %v", err)
	}
	cancel()
	sink.Wait()
	st := port.Stats()
	t.Logf("af_packet e2e: %d/%d requests answered correctly, %d timed out, %d wrong; port %+v; drops %d", ok, n, timedOut, bad, st, table.C.TotalDrops())
	if ok < n*95/100 {
		t.Errorf("%d of %d requests completed, want >= 95%%", ok, n)
	}
	if cl.Duplicates() != 0 {
		t.Errorf("%d duplicate response fragments", cl.Duplicates())
	}
	if st.BufInUse != base {
		t.Errorf("mbufs in use %d, baseline %d", st.BufInUse, base)
	}
}

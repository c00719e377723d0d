package e2e

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane/dptest"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/reasm"
	"sluice/dataplane/udp"
	"sluice/dataplane/wire"
)

// TestUDPLoopback runs the whole dataplane over kernel UDP on loopback:
// requests in, correct results out, bad input counted, nothing leaked.
func TestUDPLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port, err := udp.Open(ctx, udp.Config{Listen: "127.0.0.1:0", BufCount: 4096, BufSize: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	server := port.LocalAddr()

	ecfg := egress.DefaultConfig()
	ecfg.FragSize = 1400
	out, err := egress.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	sink := dptest.NewDigestSink(1, 256)
	loop, err := ioloop.New(ioloop.DefaultConfig(), port, out, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	rcfg := reasm.DefaultConfig()
	rcfg.MaxHeldFragments = 2048
	rcfg.Timeout = 50 * time.Millisecond
	table, err := loop.NewTable(rcfg)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithCancel(ctx)
	sink.Start(sctx, 2)
	lctx, lcancel := context.WithCancel(ctx)
	loopErr := make(chan error, 1)
	go func() { loopErr <- loop.Run(lctx) }()

	conn, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetReadBuffer(8 << 20)
	cl := dptest.NewClient(conn, 77, 1400)

	const n = 300
	payloads := map[uint64][]byte{}
	for id := uint64(1); id <= n; id++ {
		p := make([]byte, 1+int(id*97)%30000)
		for i := range p {
			p[i] = byte(id) ^ byte(i*13)
		}
		payloads[id] = p
		flags := uint8(0)
		if id%3 == 0 {
			flags = wire.FlagRT
		}
		if err := cl.Send(server, 1, id, flags, p); err != nil {
			t.Fatal(err)
		}
		if id%20 == 0 {
			time.Sleep(time.Millisecond) // pace: the loopback socket buffer is finite
		}
	}
	// bad input: answered or counted, never served
	_ = cl.SendRaw(server, []byte("not a sluice datagram"))
	bad := make([]byte, wire.HeaderLen+10)
	wire.Encode(bad, &wire.Header{Kind: wire.KindRequest, Flow: 77, Request: 5000, FragCount: 1, TotalLen: 10, PayloadLen: 10})
	bad[0] = 0xFF
	_ = cl.SendRaw(server, bad)
	if err := cl.Send(server, 42, 6000, 0, []byte("who serves model 42?")); err != nil {
		t.Fatal(err)
	}
	ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 77, Request: 7000}, make([]byte, 5000), 1400)
	_ = cl.SendRaw(server, ds[0]) // never completed

	for id := uint64(1); id <= n; id++ {
		r, ok := cl.Wait(id, 10*time.Second)
		if !ok {
			t.Fatalf("request %d: no response (%d complete)", id, cl.Completed())
		}
		if r.Status != wire.StatusOK || !bytes.Equal(r.Output, dptest.Result(payloads[id])) {
			t.Fatalf("request %d: status %v, output of %d bytes does not match", id, r.Status, len(r.Output))
		}
	}
	if r, ok := cl.Wait(6000, 5*time.Second); !ok || r.Status != wire.StatusUnknownModel {
		t.Fatalf("unknown model: ok=%v status=%v", ok, r.Status)
	}
	if r, ok := cl.Wait(7000, 5*time.Second); !ok || r.Status != wire.StatusTimedOut {
		t.Fatalf("incomplete request: ok=%v status=%v", ok, r.Status)
	}

	lcancel()
	if err := <-loopErr; err != nil {
		t.Fatal(err)
	}
	scancel()
	sink.Wait()
	c := &table.C
	if c.Drops(reasm.ReasonBadMagic) != 1 || c.Drops(reasm.ReasonTruncated) != 1 || c.Drops(reasm.ReasonTimedOut) != 1 {
		t.Fatalf("drops: bad_magic %d truncated %d timed_out %d", c.Drops(reasm.ReasonBadMagic), c.Drops(reasm.ReasonTruncated), c.Drops(reasm.ReasonTimedOut))
	}
	if c.Completed.Load() != n+1 || c.Released.Load() != n+1 {
		t.Fatalf("completed %d released %d, want %d", c.Completed.Load(), c.Released.Load(), n+1)
	}
	if s := port.Stats(); s.BufInUse != 0 {
		t.Fatalf("%d receive buffers still in use", s.BufInUse)
	}
	if d := cl.Duplicates(); d != 0 {
		t.Fatalf("%d duplicate response fragments", d)
	}
}

package ioloop

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/udp"
	"sluice/dataplane/wire"
)

// nopSink takes no requests: these tests only send responses.
type nopSink struct{}

func (nopSink) Deliver(r *Request) { r.Reply(wire.StatusOverloaded, nil, nil) }

// runIdle starts a loop on port whose idle waits and sleeps last far
// longer than the test waits: only a wake-up can send a response queued
// while it is idle.
func runIdle(t *testing.T, port dataplane.Port) (*Loop, *egress.Egress) {
	t.Helper()
	out, err := egress.New(egress.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Spin, cfg.IdleSleep, cfg.IdleWait = 1, time.Minute, time.Minute
	cfg.DrainQuiet, cfg.DrainTimeout = time.Millisecond, time.Second
	loop, err := New(cfg, port, out, nopSink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxHeldFragments = 64
	if _, err := loop.NewTable(rc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_ = loop.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		loop.wake() // the idle wait is a minute long
		wg.Wait()
	})
	// wait until the loop is asleep
	deadline := time.Now().Add(5 * time.Second)
	for !loop.sleeping.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the loop never went idle")
		}
		time.Sleep(time.Millisecond)
	}
	return loop, out
}

// A response queued while the loop sleeps in a kernel-socket port's Wait
// goes out at once: the queue wakes the port (dataplane.Waker), instead of
// waiting for the Wait to time out.
func TestResponseWakesSocketWait(t *testing.T) {
	port, err := udp.Open(context.Background(), udp.Config{Listen: "127.0.0.1:0", BufCount: 256})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	loop, out := runIdle(t, port)
	client, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	to := dataplane.Endpoint{Addr: client.LocalAddr().(*net.UDPAddr).AddrPort()}
	if err := out.Send(&egress.Response{To: to, Model: 1, Flow: 2, ID: 3, Output: []byte("woken")}); err != nil {
		t.Fatal(err)
	}
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 2048)
	n, _, err := client.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("no response while the loop's wait had a minute to run: %v", err)
	}
	var h wire.Header
	if err := wire.Decode(buf[:n], &h); err != nil || h.Request != 3 {
		t.Fatalf("response %+v, %v", h, err)
	}
	if loop.Wakes.Load() == 0 {
		t.Fatal("sent without a wake-up")
	}
}

// The same for a poll-mode port, whose loop sleeps between polls.
func TestResponseWakesIdleSleep(t *testing.T) {
	sent := make(chan uint64, 1)
	port, err := mem.New(mem.Config{Buffers: 256, BufSize: 2048, OnTx: func(_ dataplane.Endpoint, b []byte) {
		var h wire.Header
		if wire.Decode(b, &h) == nil {
			sent <- h.Request
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer port.Close()
	loop, out := runIdle(t, port)
	to := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	if err := out.Send(&egress.Response{To: to, ID: 9, Status: wire.StatusOverloaded}); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-sent:
		if id != 9 {
			t.Fatalf("sent request %d", id)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no response while the loop's sleep had a minute to run")
	}
	if loop.Wakes.Load() == 0 {
		t.Fatal("sent without a wake-up")
	}
}

package ioloop

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// holdSink keeps every request it is given.
type holdSink struct{ got []*Request }

func (s *holdSink) Deliver(r *Request) { s.got = append(s.got, r) }

// polled is a loop driven by hand (Poll), over a mem port whose
// transmitted datagrams are collected.
func polled(t *testing.T, replies, egressQueue int) (*mem.Port, *Loop, *egress.Egress, *holdSink, *collector) {
	t.Helper()
	col := &collector{msgs: map[uint64][][]byte{}}
	port, err := mem.New(mem.Config{Buffers: 512, BufSize: 2048, OnTx: col.onTx})
	if err != nil {
		t.Fatal(err)
	}
	ecfg := egress.DefaultConfig()
	ecfg.QueueLen = egressQueue
	out, err := egress.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	sink := &holdSink{}
	cfg := DefaultConfig()
	cfg.Replies = replies
	loop, err := New(cfg, port, out, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxRequests, rc.MaxHeldFragments = 8, 256
	if _, err := loop.NewTable(rc); err != nil {
		t.Fatal(err)
	}
	return port, loop, out, sink, col
}

var testFrom = dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}

// send injects request id (payload p in 1000-byte fragments, last first).
func send(t *testing.T, port *mem.Port, id uint64, p []byte) {
	t.Helper()
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: id}, p, 1000)
	if err != nil {
		t.Fatal(err)
	}
	for i := len(ds) - 1; i >= 0; i-- {
		if err := port.Inject(ds[i], testFrom); err != nil {
			t.Fatal(err)
		}
	}
}

// A request handle gives the payload as views in order, aliasing the
// packet buffers, until Release; Reply queues the answer without the
// egress queue: a reply is sent even while that queue is full and nobody
// drains it, and Reply returns at once. Everything is back to baseline
// afterwards: handles, buffers, the table's slots.
func TestReplyNeverBlocksOnFullEgress(t *testing.T) {
	port, loop, out, sink, col := polled(t, 0, 1)
	p := make([]byte, 2500)
	for i := range p {
		p[i] = byte(i * 7)
	}
	send(t, port, 1, p)
	send(t, port, 2, p[:1000])
	if _, err := loop.Poll(1); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 2 || loop.InFlight() != 2 {
		t.Fatalf("%d requests delivered, %d in flight; want 2 and 2", len(sink.got), loop.InFlight())
	}
	r1, r2 := sink.got[0], sink.got[1]
	views, err := r1.AppendPayload(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(views) != 3 || !bytes.Equal(bytes.Join(views, nil), p) {
		t.Fatalf("%d views that do not make up the payload", len(views))
	}
	r1.Release()
	if _, err := r1.AppendPayload(nil); !errors.Is(err, ErrReleased) {
		t.Fatalf("payload after Release: err %v", err)
	}
	// fill the egress queue; the I/O loop does not run meanwhile
	if err := out.Send(&egress.Response{To: testFrom, ID: 99, Status: wire.StatusInternal}); err != nil {
		t.Fatal(err)
	}
	if err := out.Send(&egress.Response{To: testFrom, ID: 98, Status: wire.StatusInternal}); !errors.Is(err, egress.ErrFull) {
		t.Fatalf("egress queue of 1 took a second response: %v", err)
	}
	sent := 0
	r1.Reply(wire.StatusOK, []byte("result"), func([]byte) { sent++ })
	r2.Reply(wire.StatusBadInput, nil, nil)
	if _, err := loop.Poll(2); err != nil {
		t.Fatal(err)
	}
	if st, o, ok := col.response(t, 1); !ok || st != wire.StatusOK || string(o) != "result" || sent != 1 {
		t.Fatalf("request 1: answered %v (%v %q), output returned %d times", ok, st, o, sent)
	}
	if st, _, ok := col.response(t, 2); !ok || st != wire.StatusBadInput {
		t.Fatalf("request 2: answered %v (%v)", ok, st)
	}
	if loop.InFlight() != 0 || loop.C.Replied.Load() != 2 || port.Stats().BufInUse != 0 || loop.Table().Outstanding() != 0 {
		t.Fatalf("not back to baseline: %d in flight, %d replied, %d buffers in use, %d outstanding",
			loop.InFlight(), loop.C.Replied.Load(), port.Stats().BufInUse, loop.Table().Outstanding())
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a second Reply did not panic")
		}
	}()
	r2.Reply(wire.StatusOK, nil, nil)
}

// With every reply slot taken, a completed request is refused overloaded
// at once and counted; the slots come back as replies are sent.
func TestNoReplySlotRefusesAtOnce(t *testing.T) {
	port, loop, _, sink, col := polled(t, 2, 16)
	for id := uint64(1); id <= 3; id++ {
		send(t, port, id, make([]byte, 100))
	}
	if _, err := loop.Poll(1); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 2 || loop.C.NoReplySlot.Load() != 1 {
		t.Fatalf("%d delivered, %d refused for want of a reply slot; want 2 and 1", len(sink.got), loop.C.NoReplySlot.Load())
	}
	if st, _, ok := col.response(t, 3); !ok || st != wire.StatusOverloaded {
		t.Fatalf("request 3: answered %v (%v), want overloaded", ok, st)
	}
	for _, r := range sink.got {
		r.Reply(wire.StatusOK, nil, nil)
	}
	sink.got = nil
	send(t, port, 4, make([]byte, 100))
	if _, err := loop.Poll(2); err != nil {
		t.Fatal(err)
	}
	if len(sink.got) != 1 || loop.InFlight() != 1 {
		t.Fatalf("after the replies: %d delivered, %d in flight", len(sink.got), loop.InFlight())
	}
	sink.got[0].Reply(wire.StatusOK, nil, nil)
	loop.Flush()
	if loop.InFlight() != 0 || port.Stats().BufInUse != 0 {
		t.Fatalf("%d in flight, %d buffers in use", loop.InFlight(), port.Stats().BufInUse)
	}
}

package ioloop

import (
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// okSink answers every request ok at once, on the loop.
type okSink struct{ loop *Loop }

func (s *okSink) Deliver(r *Request) { r.Reply(wire.StatusOK, nil, nil) }

// TestOneAnswerPerRequestOnTheWire drives Poll with explicit times (no Run,
// no sleeps) through issue 13's cases and counts the responses that reach
// the wire: a request refused overloaded while the table is full gets no
// second answer when its other fragment arrives after a slot freed, and
// stale copies of answered requests get none either.
func TestOneAnswerPerRequestOnTheWire(t *testing.T) {
	col := &collector{msgs: map[uint64][][]byte{}}
	port, err := mem.New(mem.Config{Buffers: 256, BufSize: 2048, OnTx: col.onTx})
	if err != nil {
		t.Fatal(err)
	}
	out, err := egress.New(egress.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	sink := &okSink{}
	loop, err := New(DefaultConfig(), port, out, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	sink.loop = loop
	rc := reasm.DefaultConfig()
	rc.MaxRequests = 2
	rc.MaxHeldFragments = 64
	rc.Timeout = 10 * time.Millisecond
	table, err := loop.NewTable(rc)
	if err != nil {
		t.Fatal(err)
	}
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	req := func(id uint64) [][]byte {
		ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: id}, make([]byte, 1500), 1000)
		if err != nil {
			t.Fatal(err)
		}
		return ds
	}
	now := int64(time.Second)
	poll := func(ds ...[]byte) {
		t.Helper()
		for _, d := range ds {
			if err := port.Inject(d, from); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := loop.Poll(now); err != nil {
			t.Fatal(err)
		}
	}
	poll(req(1)[0], req(2)[0]) // the table is full
	poll(req(3)[0])            // refused: overloaded
	now += int64(rc.Timeout) + 1
	poll() // 1 and 2 time out: the table has room again
	poll(req(3)[1], req(3)[1])
	poll(req(4)...) // ok
	now += int64(rc.Timeout)
	poll(req(4)[0], req(1)[1], req(1)[0], req(3)[0]) // stale copies
	now += 3 * int64(rc.Timeout)
	poll()
	want := map[uint64]wire.Status{1: wire.StatusTimedOut, 2: wire.StatusTimedOut, 3: wire.StatusOverloaded, 4: wire.StatusOK}
	for id, st := range want {
		ds := col.msgs[id]
		if len(ds) != 1 {
			t.Fatalf("request %d: %d response datagrams, want 1", id, len(ds))
		}
		var h wire.Header
		if err := wire.Decode(ds[0], &h); err != nil || h.Status != st {
			t.Fatalf("request %d answered %v (%v), want %v", id, h.Status, err, st)
		}
	}
	if len(col.msgs) != len(want) {
		t.Fatalf("responses to %d requests, want %d", len(col.msgs), len(want))
	}
	c := &table.C
	if c.Drops(reasm.ReasonTableFull) != 1 || c.Drops(reasm.ReasonAfterFailure) != 3 || c.Drops(reasm.ReasonLate) != 3 {
		t.Fatalf("table_full %d after_failure %d late %d; want 1, 3, 3",
			c.Drops(reasm.ReasonTableFull), c.Drops(reasm.ReasonAfterFailure), c.Drops(reasm.ReasonLate))
	}
	if port.Stats().BufInUse != 0 {
		t.Fatalf("%d buffers still held", port.Stats().BufInUse)
	}
}

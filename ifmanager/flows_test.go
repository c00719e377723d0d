package ifmanager

import (
	"context"
	"encoding/binary"
	"math"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
	"sluice/libml/stateful"
	"sluice/libml/zoo"
)

// statefulPath serves the zoo's streaming LSTM (kws) packed with its
// state bindings, on an IF clock the test moves.
type statefulPath struct {
	*path
	clock  atomic.Int64
	layout *stateful.Layout
	// ref carries each flow's reference state, computed at batch 1
	state map[flowKey][]float32
	id    uint64
}

func newStatefulPath(t *testing.T, maxFlows int, idle time.Duration) *statefulPath {
	g := zoo.KWS(zoo.Options{Seed: 9, Features: 10, Hidden: 6, Classes: 4})
	l, err := stateful.Pack(g, []stateful.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}})
	if err != nil {
		t.Fatal(err)
	}
	sp := &statefulPath{layout: l, state: map[flowKey][]float32{}}
	sp.clock.Store(1)
	sp.path = newPathConfig(t, g, Config{Name: "kws", ModelID: 7, MinBatch: 1, MaxBatch: 4, QueueLen: 64, Input: InputF32,
		Batching: "fixed", State: StateConfig{Elems: l.StateElems, Idle: idle, MaxFlows: maxFlows}}, 64, 1024, sp.clock.Load)
	sp.keep = true
	if !sp.f.Stateful() || sp.f.RequestBytes() != 40 || sp.f.ResponseBytes() != 16 {
		t.Fatalf("stateful %v, request %d bytes, response %d, want 40 and 16", sp.f.Stateful(), sp.f.RequestBytes(), sp.f.ResponseBytes())
	}
	return sp
}

// send injects one request of flow (from, flow) and returns its id and
// the frame it carries; reset sets the RESET flag.
func (sp *statefulPath) send(from dataplane.Endpoint, flow uint32, reset bool) (uint64, []float32) {
	sp.id++
	x := zoo.Input(sp.id, sp.layout.DataElems)
	payload := make([]byte, 4*len(x))
	for i, v := range x {
		binary.LittleEndian.PutUint32(payload[4*i:], math.Float32bits(v))
	}
	h := wire.Header{Kind: wire.KindRequest, Model: 7, Flow: flow, Request: sp.id}
	if reset {
		h.Flags |= wire.FlagReset
	}
	ds, err := wire.Datagrams(h, payload, 1000)
	if err != nil {
		sp.t.Fatal(err)
	}
	for _, d := range ds {
		if err := sp.port.Inject(d, from); err != nil {
			sp.t.Fatal(err)
		}
	}
	return sp.id, x
}

// expect runs x from the flow's reference state at batch 1, moves the
// reference state on, and returns the result.
func (sp *statefulPath) expect(k flowKey, x []float32, fresh bool) []float32 {
	l := sp.layout
	st, ok := sp.state[k]
	if !ok || fresh {
		st = make([]float32, l.StateElems)
	}
	row := append(slices.Clone(x), st...)
	out := make([]float32, sp.ref.OutputSize())
	if err := sp.be.InferBatch(context.Background(), sp.ref, 1, row, out); err != nil {
		sp.t.Fatal(err)
	}
	res := out[:len(out)-l.StateElems]
	sp.state[k] = slices.Clone(out[len(res):])
	return res
}

// check waits for n answers and compares request id's with want.
func (sp *statefulPath) check(want map[uint64][]float32, status map[uint64]wire.Status) {
	sp.t.Helper()
	for range len(want) + len(status) {
		sp.poll()
		select {
		case <-sp.obs.answered:
		case <-time.After(time.Minute):
			sp.t.Fatal("no answer in a minute")
		}
	}
	sp.poll() // send the replies
	for id, w := range want {
		st, out := sp.answer(id)
		if st != wire.StatusOK || len(out) != 4*len(w) {
			sp.t.Fatalf("request %d: %v, %d bytes, want ok and %d", id, st, len(out), 4*len(w))
		}
		for i, v := range w {
			if got := math.Float32frombits(binary.LittleEndian.Uint32(out[4*i:])); math.Float32bits(got) != math.Float32bits(v) {
				sp.t.Fatalf("request %d: result %d is %v, want %v (the flow's state went wrong)", id, i, got, v)
			}
		}
	}
	for id, w := range status {
		if st, _ := sp.answer(id); st != w {
			sp.t.Fatalf("request %d: %v, want %v", id, st, w)
		}
	}
}

// A stateful IF keeps each flow's state between its requests: three
// flows (two from one address, told apart by their flow id) of three
// steps each, queued together, run as three batches of three: batches
// across flows, at most one request of a flow in a batch, a flow's
// requests in order. Every result equals the model run request by
// request at batch 1 with the state carried by hand, bit for bit. A
// RESET request starts its flow afresh; a flow beyond max_flows is
// answered overloaded while the others are live, and gets in once they
// were idle for longer than the idle time, which drops their state.
// Everything returns to baseline.
func TestStatefulFlows(t *testing.T) {
	const idle = time.Hour
	sp := newStatefulPath(t, 3, idle)
	a1 := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	b := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.3:7000")}
	flows := []struct {
		from dataplane.Endpoint
		flow uint32
	}{{a1, 1}, {a1, 2}, {b, 1}}
	release, held := make(chan struct{}), make(chan struct{})
	go func() { _ = sp.f.do(context.Background(), func() { close(held); <-release }) }()
	<-held
	want := map[uint64][]float32{}
	for range 3 {
		for _, fl := range flows {
			id, x := sp.send(fl.from, fl.flow, false)
			want[id] = sp.expect(flowKey{fl.from.Addr, fl.flow}, x, false)
		}
	}
	sp.poll()
	if q := sp.f.QueueDepth(); q != 9 {
		t.Fatalf("%d requests queued, want 9", q)
	}
	close(release)
	sp.check(want, nil)
	if b, n := sp.f.C.Batches.Load(), sp.f.C.BatchItems.Load(); b != 3 || n != 9 {
		t.Fatalf("%d batches of %d requests, want 3 batches of one request per flow", b, n)
	}

	// RESET: flow (a1, 2) starts from zeros; the others carry on
	id, x := sp.send(a1, 2, true)
	want = map[uint64][]float32{id: sp.expect(flowKey{a1.Addr, 2}, x, true)}
	id, x = sp.send(b, 1, false)
	want[id] = sp.expect(flowKey{b.Addr, 1}, x, false)
	sp.poll()
	sp.check(want, nil)

	// a fourth flow while three are live: overloaded, nothing else moves
	c := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.4:7000")}
	full, _ := sp.send(c, 1, false)
	sp.poll()
	sp.check(nil, map[uint64]wire.Status{full: wire.StatusOverloaded})

	// an hour and more later the three are idle: their states go, the new
	// flow gets in, and an old flow starts afresh
	sp.clock.Add(int64(idle) + 1)
	id, x = sp.send(c, 1, false)
	want = map[uint64][]float32{id: sp.expect(flowKey{c.Addr, 1}, x, false)}
	sp.poll()
	sp.check(want, nil)
	id, x = sp.send(a1, 1, false)
	want = map[uint64][]float32{id: sp.expect(flowKey{a1.Addr, 1}, x, true)}
	sp.poll()
	sp.check(want, nil)

	fc := &sp.f.C.Flows
	if got := [5]uint64{uint64(fc.Flows.Load()), fc.Started.Load(), fc.Idle.Load(), fc.Resets.Load(), fc.Full.Load()}; got != [5]uint64{2, 5, 3, 1, 1} {
		t.Fatalf("flows, started, idle, resets, full = %v, want [2 5 3 1 1]", got)
	}
	if sp.f.C.Failed.Load() != 1 || sp.f.C.Served.Load() != 13 {
		t.Fatalf("served %d, failed %d, want 13 and 1", sp.f.C.Served.Load(), sp.f.C.Failed.Load())
	}
	sp.baseline()
}

// A stateful IF refuses what it cannot serve: u8 image payloads, a state
// that leaves no data, a table whose states would not fit in memory.
func TestStatefulConfigErrors(t *testing.T) {
	g := zoo.KWS(zoo.Options{Features: 10, Hidden: 6, Classes: 4})
	l, err := stateful.Pack(g, []stateful.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}})
	if err != nil {
		t.Fatal(err)
	}
	p := newPathConfig(t, g, Config{Name: "kws", ModelID: 7, MaxBatch: 2, QueueLen: 4, Input: InputF32}, 64, 256, nil)
	for _, tc := range []struct {
		st   StateConfig
		want string
	}{
		{StateConfig{Elems: 22}, "leaves no data"},
		{StateConfig{Elems: l.StateElems, MaxFlows: MaxFlowsLimit + 1}, "max_flows 1048577: out of range"},
	} {
		inst, err := p.be.LinkModel(context.Background(), p.ref)
		if err != nil {
			t.Fatal(err)
		}
		_, err = New(Config{Name: "kws", ModelID: 7, MaxBatch: 2, QueueLen: 4, Input: InputF32, State: tc.st}, p.be, inst, nil, nil)
		_ = inst.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.st, err, tc.want)
		}
	}
	// a million-float state (4 MiB) for 1024 flows: 4 GiB, refused
	if _, err := newFlowTable(StateConfig{Elems: 1 << 20}, &FlowCounters{}); err == nil || !strings.Contains(err.Error(), "more than 1024 MiB") {
		t.Errorf("a 4 GiB flow table: error %v", err)
	}
}

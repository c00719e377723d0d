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
	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/pack"
	"sluice/libml/zoo"
)

// statefulPath serves the zoo's streaming LSTM (kws) packed with its
// state bindings, on an IF clock the test moves.
type statefulPath struct {
	*path
	clock  atomic.Int64
	layout *pack.Layout
	// ref carries each flow's reference state, computed at batch 1
	state map[flowKey][]float32
	id    uint64
}

func newStatefulPath(t *testing.T, maxFlows int, idle time.Duration) *statefulPath {
	g := zoo.KWS(zoo.Options{Seed: 9, Features: 10, Hidden: 6, Classes: 4})
	sp := newStatefulPathModel(t, g, []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}},
		Config{Input: InputF32, State: StateConfig{Idle: idle, MaxFlows: maxFlows}})
	if !sp.f.Stateful() || sp.f.RequestBytes() != 40 || sp.f.ResponseBytes() != 16 {
		t.Fatalf("stateful %v, request %d bytes, response %d, want 40 and 16", sp.f.Stateful(), sp.f.RequestBytes(), sp.f.ResponseBytes())
	}
	return sp
}

// newStatefulPathModel serves g packed with binds; cfg gives the input
// format and the state's idle time and flow bound.
func newStatefulPathModel(t *testing.T, g *graph.Graph, binds []pack.Binding, cfg Config) *statefulPath {
	l, err := pack.Pack(g, pack.Spec{State: binds})
	if err != nil {
		t.Fatal(err)
	}
	sp := &statefulPath{layout: l, state: map[flowKey][]float32{}}
	sp.clock.Store(1)
	cfg.Name, cfg.ModelID, cfg.MinBatch, cfg.MaxBatch, cfg.QueueLen, cfg.Batching = "st", 7, 1, 4, 64, "fixed"
	cfg.State.Elems, cfg.PayloadShape = l.StateElems, l.DataShape
	sp.path = newPathConfig(t, g, cfg, 64, 1024, sp.clock.Load)
	sp.keep = true
	return sp
}

// send injects one request of flow (from, flow) and returns its id and
// the frame it carries; reset sets the RESET flag.
func (sp *statefulPath) send(from dataplane.Endpoint, flow uint32, reset bool) (uint64, []float32) {
	x := zoo.Input(sp.id+1, sp.layout.DataElems)
	return sp.sendPayload(from, flow, reset, f32le(x), 1000), x
}

// sendPayload injects one request of flow (from, flow) carrying payload
// in fragments of fragSize bytes, and returns its id.
func (sp *statefulPath) sendPayload(from dataplane.Endpoint, flow uint32, reset bool, payload []byte, fragSize int) uint64 {
	sp.id++
	h := wire.Header{Kind: wire.KindRequest, Model: 7, Flow: flow, Request: sp.id}
	if reset {
		h.Flags |= wire.FlagReset
	}
	ds, err := wire.Datagrams(h, payload, fragSize)
	if err != nil {
		sp.t.Fatal(err)
	}
	for _, d := range ds {
		if err := sp.port.Inject(d, from); err != nil {
			sp.t.Fatal(err)
		}
	}
	return sp.id
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

// A stateful IF takes u8 images too: its flow state follows the image in
// the model's input row, and the image is converted as for any IF. The
// model sums each flow's per-channel frame means (its state is the sum
// so far); every answer equals the reference conversion and the model
// at batch 1 with the state carried by hand, bit for bit, with fragments
// ending inside pixels.
func TestStatefulImages(t *testing.T) {
	g := &graph.Graph{Name: "sum", Opset: 17,
		Inputs: []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 4, 4}, DimParams: []string{"batch"}},
			{Name: "h", DType: graph.Float32, Dims: []int64{-1, 3}, DimParams: []string{"batch"}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 3}}, {Name: "h_out", DType: graph.Float32, Dims: []int64{-1, 3}}},
		Nodes: []graph.Node{
			{Name: "gap", Op: "GlobalAveragePool", Inputs: []string{"x"}, Outputs: []string{"g"}},
			{Name: "flat", Op: "Flatten", Inputs: []string{"g"}, Outputs: []string{"f"}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}},
			{Name: "add", Op: "Add", Inputs: []string{"f", "h"}, Outputs: []string{"y"}},
			{Name: "id", Op: "Identity", Inputs: []string{"y"}, Outputs: []string{"h_out"}},
		}}
	mean, std := []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}
	sp := newStatefulPathModel(t, g, []pack.Binding{{Input: "h", Output: "h_out"}}, Config{Input: InputImageU8, Mean: mean, Std: std})
	if sp.f.RequestBytes() != 48 || sp.f.ResponseBytes() != 12 {
		t.Fatalf("request %d bytes, response %d, want 48 and 12", sp.f.RequestBytes(), sp.f.ResponseBytes())
	}
	img, err := libml.NewEncoding(InputImageU8, mean, std, []int64{3, 4, 4})
	if err != nil {
		t.Fatal(err)
	}
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	want := map[uint64][]float32{}
	for step := range 3 {
		for flow := uint32(1); flow <= 2; flow++ {
			payload := make([]byte, 48)
			for i := range payload {
				payload[i] = byte(i*37 + step*11 + int(flow)*101)
			}
			in := libml.Input{Enc: img}
			in.Add(payload)
			x := make([]float32, 48)
			if err := in.Decode(x, 0, 1); err != nil {
				t.Fatal(err)
			}
			id := sp.sendPayload(from, flow, false, payload, 20)
			want[id] = sp.expect(flowKey{from.Addr, flow}, x, false)
		}
		sp.poll()
		sp.check(want, nil)
		clear(want)
	}
	sp.baseline()
}

// A stateful IF refuses what it cannot serve: u8 image payloads, a state
// that leaves no data, a table whose states would not fit in memory.
func TestStatefulConfigErrors(t *testing.T) {
	g := zoo.KWS(zoo.Options{Features: 10, Hidden: 6, Classes: 4})
	l, err := pack.Pack(g, pack.Spec{State: []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}}})
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
		_, err = New(Config{Name: "kws", ModelID: 7, MaxBatch: 2, QueueLen: 4, Input: InputF32, State: tc.st, PayloadShape: l.DataShape}, p.be, inst, nil, nil)
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

// The stateful path allocates nothing per request once its flows have
// their state, and neither does a pipeline's hand-over: datagrams in,
// the flow's state in and out of the row, the next stage's gather from
// the first stage's output buffer, response datagrams out.
func TestStatefulAndPipelineAllocateNothing(t *testing.T) {
	sp := newStatefulPath(t, 4, time.Hour)
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	sds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 7, Flow: 1}, f32le(zoo.Input(1, sp.layout.DataElems)), 1000)
	if err != nil {
		t.Fatal(err)
	}
	sid := uint64(1)
	stateRound := func() {
		for _, d := range sds {
			binary.BigEndian.PutUint64(d[12:20], sid)
			if err := sp.port.Inject(d, from); err != nil {
				t.Fatal(err)
			}
		}
		sid++
		sp.poll()
		if st := <-sp.obs.answered; st != wire.StatusOK {
			t.Fatalf("answered %v", st)
		}
		sp.poll()
	}
	sp.keep = false
	for range 10 {
		stateRound()
	}
	if allocs := testing.AllocsPerRun(50, stateRound); allocs != 0 {
		t.Errorf("the stateful path allocates %.2f times per request", allocs)
	}
	sp.baseline()

	// a pipeline: front (24 -> 8) then a classifier (8 -> 3)
	p := newPathConfig(t, zoo.MLP(zoo.Options{Seed: 1, Features: 24, Layers: 1, Hidden: 16, Classes: 8}),
		Config{Name: "front", ModelID: 7, MaxBatch: 4, QueueLen: 64, Input: InputF32, Batching: "fixed"}, 64, 1024, nil)
	second := newNextStage(t, p, "cls", zoo.MLP(zoo.Options{Seed: 2, Features: 8, Layers: 1, Hidden: 16, Classes: 3})).f
	p.f.SetNext("cls", func() *IF { return second })
	ds := p.datagrams(1, f32le(zoo.Input(2, 24)))
	id := uint64(1)
	pipeRound := func() {
		for _, d := range ds {
			binary.BigEndian.PutUint64(d[12:20], id)
		}
		id++
		p.inject(ds)
		p.poll()
		if st := <-p.obs.answered; st != wire.StatusOK {
			t.Fatalf("answered %v", st)
		}
		p.poll()
	}
	for range 10 {
		pipeRound()
	}
	if allocs := testing.AllocsPerRun(50, pipeRound); allocs != 0 {
		t.Errorf("the pipeline path allocates %.2f times per request", allocs)
	}
	p.baseline()
}

// BenchmarkStatefulPath serves batches of 8 requests of 8 flows (one
// frame of 40 features each) to the zoo's kws (64 LSTM units) kept as a
// stateful stream, against the same packed model served without state
// (its payload the whole row, state included, as a client that carries
// its own state would send): the cost of keeping the state per flow.
func BenchmarkStatefulPath(b *testing.B) {
	for _, stateful := range []bool{true, false} {
		name := "stateful"
		if !stateful {
			name = "state-in-payload"
		}
		b.Run(name, func(b *testing.B) {
			g := zoo.KWS(zoo.Options{Seed: 9})
			l, err := pack.Pack(g, pack.Spec{State: []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}}})
			if err != nil {
				b.Fatal(err)
			}
			cfg := Config{Name: "kws", ModelID: 7, MinBatch: 1, MaxBatch: 8, QueueLen: 64, Input: InputF32, Batching: "fixed"}
			elems := l.DataElems + l.StateElems
			if stateful {
				cfg.State.Elems, cfg.PayloadShape = l.StateElems, l.DataShape
				elems = l.DataElems
			}
			p := newPathConfig(b, g, cfg, 64, 1024, nil)
			from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
			var ds [][]byte
			for f := uint32(1); f <= 8; f++ {
				d, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 7, Flow: f}, f32le(zoo.Input(uint64(f), elems)), 1400)
				if err != nil {
					b.Fatal(err)
				}
				ds = append(ds, d...)
			}
			id := uint64(1)
			round := func() {
				// past the late window of the requests answered before
				// (10 reassembly timeouts): the memory of answered
				// requests empties however many rounds run
				p.now += int64(11 * time.Minute)
				hold, held := make(chan struct{}), make(chan struct{})
				go func() { _ = p.f.do(context.Background(), func() { close(held); <-hold }) }()
				<-held
				for _, d := range ds {
					binary.BigEndian.PutUint64(d[12:20], id)
					id++
					if err := p.port.Inject(d, from); err != nil {
						b.Fatal(err)
					}
				}
				p.poll()
				close(hold)
				for range 8 {
					p.poll()
					if st := <-p.obs.answered; st != wire.StatusOK {
						b.Fatalf("answered %v", st)
					}
				}
				p.poll()
			}
			for range 5 {
				round()
			}
			b.ResetTimer()
			for range b.N {
				round()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(8*b.N), "ns/request")
		})
	}
}

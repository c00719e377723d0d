package ifmanager

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"net/netip"
	"sync"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// signalObs tells the test about every answered request.
type signalObs struct{ answered chan wire.Status }

func (o *signalObs) Request(st wire.Status, _, _, _ time.Duration)          { o.answered <- st }
func (o *signalObs) Batch(int, time.Duration, time.Duration, time.Duration) {}
func (o *signalObs) Swap(time.Duration)                                     {}

// path is the serving path in one process: a mem port, its I/O loop
// driven by hand (Poll), a router and one IF on the cpu backend serving a
// small SqueezeNet on u8 HWC images.
type path struct {
	t      testing.TB
	be     *cpu.Backend
	port   *mem.Port
	loop   *ioloop.Loop
	out    *egress.Egress
	f      *IF
	obs    *signalObs
	ref    libml.Instance // another instance of the model, for expected outputs
	enc    *libml.Encoding
	mu     sync.Mutex
	keep   bool // keep the responses' datagrams
	resp   map[uint64][][]byte
	now    int64
	cancel context.CancelFunc
	done   chan struct{}
}

var pathClient = dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}

func newPath(t *testing.T, egressQueue, maxBatch int) *path {
	t.Helper()
	g, err := zoo.Build("squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 4})
	if err != nil {
		t.Fatal(err)
	}
	return newPathModel(t, g, egressQueue, maxBatch, 1024)
}

// newPathModel is newPath for model g, whose input is a CHW image, with a
// port of buffers packet buffers.
func newPathModel(t testing.TB, g *graph.Graph, egressQueue, maxBatch, buffers int) *path {
	t.Helper()
	mean, std := []float32{0.485, 0.456, 0.406}, []float32{0.229, 0.224, 0.225}
	return newPathConfig(t, g, Config{Name: "sq", ModelID: 7, MinBatch: 1, MaxBatch: maxBatch, QueueLen: 64, Input: InputImageU8,
		Mean: mean, Std: std, Batching: "fixed"}, egressQueue, buffers, nil)
}

// newPathConfig is newPathModel with the IF's configuration cfg; clock,
// when set, is the IF's clock.
func newPathConfig(t testing.TB, g *graph.Graph, cfg Config, egressQueue, buffers int, clock func() int64) *path {
	t.Helper()
	p := &path{t: t, obs: &signalObs{answered: make(chan wire.Status, 256)}, resp: map[uint64][][]byte{}}
	p.be = cpu.New()
	ctx := context.Background()
	if err := p.be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	inst, err := p.be.LoadModel(ctx, "sq", g)
	if err != nil {
		t.Fatal(err)
	}
	if p.ref, err = p.be.LinkModel(ctx, inst); err != nil {
		t.Fatal(err)
	}
	if err := p.be.ConfigureBatch(p.ref, 1); err != nil {
		t.Fatal(err)
	}
	p.f, err = New(cfg, p.be, inst, p.obs, nil)
	if err != nil {
		t.Fatal(err)
	}
	if clock != nil {
		p.f.now = clock
	}
	shape := inst.InputShape()
	if cfg.PayloadShape != nil {
		shape = cfg.PayloadShape
	}
	if p.enc, err = libml.NewEncoding(cfg.Input, cfg.Mean, cfg.Std, shape); err != nil {
		t.Fatal(err)
	}
	p.port, err = mem.New(mem.Config{Buffers: buffers, BufSize: 2048, OnTx: p.onTx})
	if err != nil {
		t.Fatal(err)
	}
	ecfg := egress.DefaultConfig()
	ecfg.QueueLen = egressQueue
	if p.out, err = egress.New(ecfg); err != nil {
		t.Fatal(err)
	}
	rt := NewRouter()
	if err := rt.Add(p.f); err != nil {
		t.Fatal(err)
	}
	if p.loop, err = ioloop.New(ioloop.DefaultConfig(), p.port, p.out, rt, nil); err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxRequests, rc.MaxHeldFragments, rc.Timeout = 64, buffers-2*ioloop.DefaultConfig().Burst, time.Minute
	if _, err := p.loop.NewTable(rc); err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	p.cancel, p.done = cancel, make(chan struct{})
	go func() { p.f.Run(runCtx); close(p.done) }()
	t.Cleanup(func() {
		p.cancel()
		<-p.done
		_ = p.ref.Close()
		if err := p.be.Deinit(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func (p *path) onTx(_ dataplane.Endpoint, d []byte) {
	if !p.keep {
		return
	}
	var h wire.Header
	if err := wire.Decode(d, &h); err != nil {
		panic(err)
	}
	p.mu.Lock()
	p.resp[h.Request] = append(p.resp[h.Request], append([]byte(nil), d...))
	p.mu.Unlock()
}

// image is request id's u8 HWC payload.
func (p *path) image(id uint64) []byte {
	b := make([]byte, p.enc.Bytes)
	for i := range b {
		b[i] = byte(i*31 + int(id)*17)
	}
	return b
}

// datagrams cuts a request into 1000-byte fragments (3072-byte images:
// fragments end inside pixels).
func (p *path) datagrams(id uint64, payload []byte) [][]byte {
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 7, Flow: 1, Request: id}, payload, 1000)
	if err != nil {
		p.t.Fatal(err)
	}
	return ds
}

func (p *path) inject(ds [][]byte) {
	for _, d := range ds {
		if err := p.port.Inject(d, pathClient); err != nil {
			p.t.Fatal(err)
		}
	}
}

func (p *path) poll() {
	p.now++
	if _, err := p.loop.Poll(p.now); err != nil {
		p.t.Fatal(err)
	}
}

// expect is request id's expected output: the model on the reference
// conversion of its payload, at batch 1 (the engine gives every batch size
// the same bits).
func (p *path) expect(payload []byte) []float32 {
	in := libml.Input{Enc: p.enc}
	in.Add(payload)
	x := make([]float32, p.enc.Elems)
	if err := in.Decode(x, 0, 1); err != nil {
		p.t.Fatal(err)
	}
	out := make([]float32, p.ref.OutputSize())
	if err := p.be.InferBatch(context.Background(), p.ref, 1, x, out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// answer returns the status and output of request id's response.
func (p *path) answer(id uint64) (wire.Status, []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ds := p.resp[id]
	if len(ds) == 0 {
		p.t.Fatalf("request %d: no response", id)
	}
	var h wire.Header
	_ = wire.Decode(ds[0], &h)
	if len(ds) != int(h.FragCount) {
		p.t.Fatalf("request %d: %d response datagrams of %d", id, len(ds), h.FragCount)
	}
	out := make([]byte, h.TotalLen)
	for _, d := range ds {
		_ = wire.Decode(d, &h)
		copy(out[h.Offset:], d[wire.HeaderLen:])
	}
	return h.Status, out
}

// baseline checks that nothing is held any more: no request in flight,
// no packet buffer out, no output buffer out, the table empty.
func (p *path) baseline() {
	p.t.Helper()
	st := p.f.Status()
	if n := p.loop.InFlight(); n != 0 || p.port.Stats().BufInUse != 0 || st.OutBuffersInUse != 0 ||
		p.loop.Table().Outstanding() != 0 || p.port.BadReleases() != 0 {
		p.t.Fatalf("not back to baseline: %d in flight, %d packet buffers in use, %d of %d output buffers out, %d outstanding, %d bad releases",
			n, p.port.Stats().BufInUse, st.OutBuffersInUse, st.OutBuffers, p.loop.Table().Outstanding(), p.port.BadReleases())
	}
}

// A full egress queue does not hold the IF back: with the queue full and
// the I/O loop not running at all, the worker answers every request of
// its queue (an answer goes to the request's reply slot, not to that
// queue); the next poll sends them. Each answer is the model's output on
// the reference conversion of its payload, bit for bit, and each request
// had its payload copied once (packet → tensor). Everything is back to
// baseline afterwards: packet buffers, reply slots, output buffers.
func TestFullEgressDoesNotBlockWorker(t *testing.T) {
	p := newPath(t, 1, 4)
	p.keep = true
	const n = 8
	// hold the worker so the queue fills while the egress queue does
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_ = p.f.do(context.Background(), func() { close(held); <-release })
	}()
	<-held
	want := map[uint64][]float32{}
	for id := uint64(1); id <= n; id++ {
		img := p.image(id)
		want[id] = p.expect(img)
		p.inject(p.datagrams(id, img))
	}
	p.poll()
	if q := p.f.QueueDepth(); q != n {
		t.Fatalf("%d requests queued, want %d", q, n)
	}
	if err := p.out.Send(&egress.Response{To: pathClient, ID: 1000, Status: wire.StatusInternal}); err != nil {
		t.Fatal(err)
	}
	if err := p.out.Send(&egress.Response{To: pathClient, ID: 1001}); !errors.Is(err, egress.ErrFull) {
		t.Fatalf("the egress queue is not full: %v", err)
	}
	close(release)
	for i := 0; i < n; i++ {
		if st := <-p.obs.answered; st != wire.StatusOK {
			t.Fatalf("answered %v", st)
		}
	}
	if p.out.Pending() != 1 || p.loop.InFlight() != n {
		t.Fatalf("egress queue holds %d, %d replies wait; want 1 and %d", p.out.Pending(), p.loop.InFlight(), n)
	}
	p.poll()
	for id := uint64(1); id <= n; id++ {
		st, out := p.answer(id)
		if st != wire.StatusOK || len(out) != 4*len(want[id]) {
			t.Fatalf("request %d: %v, %d bytes", id, st, len(out))
		}
		for k, v := range want[id] {
			if got := binary.LittleEndian.Uint32(out[4*k:]); got != math.Float32bits(v) {
				t.Fatalf("request %d: output %d is %#08x, want %#08x", id, k, got, math.Float32bits(v))
			}
		}
	}
	if c := p.f.C.PayloadCopies.Load(); c != n || p.f.C.BatchItems.Load() != n {
		t.Fatalf("%d payload copies for %d requests in batches, want one each", c, p.f.C.BatchItems.Load())
	}
	p.baseline()
}

// A request of the wrong size is answered bad_input; it is not copied.
func TestBadInputAnswered(t *testing.T) {
	p := newPath(t, 16, 4)
	p.keep = true
	p.inject(p.datagrams(1, p.image(1)[:100]))
	p.poll()
	if st := <-p.obs.answered; st != wire.StatusBadInput {
		t.Fatalf("answered %v", st)
	}
	p.poll()
	if st, _ := p.answer(1); st != wire.StatusBadInput {
		t.Fatalf("response %v", st)
	}
	if p.f.C.PayloadCopies.Load() != 0 {
		t.Fatal("a refused payload was copied")
	}
	p.baseline()
}

// The serving path allocates nothing per request once warm: datagrams in,
// reassembly, routing, the IF's batch (payload views, the gather and
// conversion in C, the model, the pooled output buffer), the reply and the
// response datagrams out.
func TestServingPathAllocatesNothing(t *testing.T) {
	p := newPath(t, 16, 4)
	ds := p.datagrams(1, p.image(1))
	id := uint64(1)
	round := func() {
		for _, d := range ds {
			binary.BigEndian.PutUint64(d[12:20], id) // a new request id (wire header bytes 12..19)
		}
		id++
		p.inject(ds)
		p.poll()
		if st := <-p.obs.answered; st != wire.StatusOK {
			t.Fatalf("answered %v", st)
		}
		p.poll()
	}
	for i := 0; i < 10; i++ {
		round()
	}
	allocs := testing.AllocsPerRun(50, round)
	t.Logf("%.2f allocations per request on the serving path", allocs)
	if allocs != 0 {
		t.Errorf("the serving path allocates %.2f times per request", allocs)
	}
	p.baseline()
}

// poolGraph is a model that does next to nothing with a 224×224×3 image
// (a global average pool): the serving path's own cost shows.
func poolGraph() *graph.Graph {
	return &graph.Graph{Name: "gap", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 224, 224}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 3, 1, 1}}},
		Nodes:   []graph.Node{{Name: "gap", Op: "GlobalAveragePool", Inputs: []string{"x"}, Outputs: []string{"y"}}}}
}

// BenchmarkServingPath sends batches of 8 requests (224×224×3 u8 images,
// 150,528 bytes in 147 fragments of 1 KiB) through the whole serving path
// of TestServingPathAllocatesNothing, around a model that does next to
// nothing. It reports, per request: the time, the IF's gather time (from
// the batch's start to the backend's Gathered: payload views collected,
// gathered and converted), payload copies and allocations.
func BenchmarkServingPath(b *testing.B) {
	p := newPathModel(b, poolGraph(), 64, 8, 4096)
	img := p.image(1)
	var batch [][][]byte
	for r := 0; r < 8; r++ {
		batch = append(batch, p.datagrams(uint64(r+1), img))
	}
	id := uint64(1)
	round := func() {
		for _, ds := range batch {
			for _, d := range ds {
				binary.BigEndian.PutUint64(d[12:20], id)
			}
			id++
			p.inject(ds)
		}
		for range (8*len(batch[0]) + 31) / 32 { // one rx burst is 32 datagrams
			p.poll()
		}
		for range batch {
			if st := <-p.obs.answered; st != wire.StatusOK {
				b.Fatalf("answered %v", st)
			}
		}
		p.poll()
	}
	for i := 0; i < 5; i++ {
		round()
	}
	g0, n0, c0 := p.f.C.GatherNS.Load(), p.f.C.BatchItems.Load(), p.f.C.PayloadCopies.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		round()
	}
	b.StopTimer()
	n := float64(p.f.C.BatchItems.Load() - n0)
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/n, "ns/request")
	b.ReportMetric(float64(p.f.C.GatherNS.Load()-g0)/n, "gather-ns/request")
	b.ReportMetric(float64(p.f.C.PayloadCopies.Load()-c0)/n, "copies/request")
	p.baseline()
}

package ifmanager

import (
	"context"
	"encoding/binary"
	"math"
	"reflect"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/ioloop"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
	"sluice/libml"
	"sluice/libml/graph"
)

// These tests run on a fake clock: the IF's, the I/O loop's (Poll's now,
// so each request's first fragment arrives at the clock's time) and the
// backend's, which moves the clock on by a set time per batch size. Every
// decision is made from explicit times; no test sleeps or measures.

const ms = int64(time.Millisecond)

type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() int64 { return c.ns.Load() }

// costBackend serves a model that copies its 2-float input to its output;
// a batch of n takes cost[n] of the fake clock (or the next of once), and
// records the ids (the first input float) of its requests.
type costBackend struct {
	clk *fakeClock
	// keep: the backend reads the payload until the batch is done, as a
	// scheduler job does (Loaded first, Gathered at the end)
	keep    bool
	mu      sync.Mutex
	cost    map[int]time.Duration
	once    []time.Duration
	batches [][]int
}

type costInst struct{}

func (costInst) Model() string        { return "copy" }
func (costInst) InputShape() []int64  { return []int64{2} }
func (costInst) OutputShape() []int64 { return []int64{2} }
func (costInst) InputSize() int       { return 2 }
func (costInst) OutputSize() int      { return 2 }
func (costInst) Close() error         { return nil }

func (b *costBackend) Name() string                                    { return "cost" }
func (b *costBackend) Init(context.Context, libml.BackendConfig) error { return nil }
func (b *costBackend) Deinit() error                                   { return nil }
func (b *costBackend) LoadModel(context.Context, string, *graph.Graph) (libml.Instance, error) {
	return costInst{}, nil
}
func (b *costBackend) LinkModel(context.Context, libml.Instance) (libml.Instance, error) {
	return costInst{}, nil
}
func (b *costBackend) ConfigureBatch(libml.Instance, int) error { return nil }
func (b *costBackend) InferBatch(_ context.Context, _ libml.Instance, n int, in, out []float32) error {
	copy(out[:n*2], in[:n*2])
	return nil
}
func (b *costBackend) InferInput(_ context.Context, _ libml.Instance, in *libml.Input, out []float32) error {
	n := in.N()
	if err := in.Decode(out[:n*2], 0, n); err != nil {
		return err
	}
	in.Copies = 1
	if b.keep {
		in.Load()
		defer in.Gather()
	} else {
		in.Gather()
	}
	ids := make([]int, n)
	for i := range ids {
		ids[i] = int(out[2*i])
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches = append(b.batches, ids)
	d := b.cost[n]
	if len(b.once) > 0 {
		d, b.once = b.once[0], b.once[1:]
	}
	b.clk.ns.Add(int64(d))
	return nil
}

func (b *costBackend) ran() [][]int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]int(nil), b.batches...)
}

// dlObs records the worker's answers: status and time from the first
// fragment, in order.
type dlObs struct {
	answered chan wire.Status
	mu       sync.Mutex
	log      []dlAnswer
}

type dlAnswer struct {
	st    wire.Status
	total time.Duration
}

func (o *dlObs) Request(st wire.Status, _, _, total time.Duration) {
	o.mu.Lock()
	o.log = append(o.log, dlAnswer{st, total})
	o.mu.Unlock()
	o.answered <- st
}
func (o *dlObs) Batch(int, time.Duration, time.Duration, time.Duration) {}
func (o *dlObs) Swap(time.Duration)                                     {}

// dlPath is the serving path on the fake clock: a mem port, its I/O loop
// polled by the test, a router and one IF on costBackend.
type dlPath struct {
	t      *testing.T
	clk    *fakeClock
	be     *costBackend
	port   *mem.Port
	loop   *ioloop.Loop
	f      *IF
	obs    *dlObs
	mu     sync.Mutex
	resp   map[uint64][]wire.Status
	sent   int
	cancel context.CancelFunc
	done   chan struct{}
}

// newDLPath makes the path for cfg (Name, ModelID, Input and the backend
// filled in) with the batch estimates est (size -> time), set before the
// IF runs.
func newDLPath(t *testing.T, cfg Config, cost map[int]time.Duration, est map[int]time.Duration) *dlPath {
	t.Helper()
	p := &dlPath{t: t, clk: &fakeClock{}, obs: &dlObs{answered: make(chan wire.Status, 256)}, resp: map[uint64][]wire.Status{}}
	p.clk.ns.Store(int64(time.Second)) // the clock starts at 1 s
	p.be = &costBackend{clk: p.clk, cost: cost}
	cfg.Name, cfg.ModelID, cfg.Input = "dl", 7, InputF32
	if cfg.QueueLen == 0 {
		cfg.QueueLen = 64
	}
	if cfg.Batching == "" {
		cfg.Batching = "fixed"
	}
	var err error
	if p.f, err = New(cfg, p.be, costInst{}, p.obs, nil); err != nil {
		t.Fatal(err)
	}
	p.f.now = p.clk.now
	for n, d := range est {
		p.f.est.set(n, d, p.clk.now())
	}
	if p.port, err = mem.New(mem.Config{Buffers: 256, BufSize: 2048, OnTx: p.onTx}); err != nil {
		t.Fatal(err)
	}
	out, err := egress.New(egress.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rt := NewRouter()
	if err := rt.Add(p.f); err != nil {
		t.Fatal(err)
	}
	if p.loop, err = ioloop.New(ioloop.DefaultConfig(), p.port, out, rt, nil); err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxRequests, rc.MaxHeldFragments, rc.Timeout = 64, 128, time.Hour
	if _, err := p.loop.NewTable(rc); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel, p.done = cancel, make(chan struct{})
	go func() { p.f.Run(ctx); close(p.done) }()
	t.Cleanup(func() { p.cancel(); <-p.done })
	return p
}

func (p *dlPath) onTx(_ dataplane.Endpoint, d []byte) {
	var h wire.Header
	if err := wire.Decode(d, &h); err != nil {
		panic(err)
	}
	p.mu.Lock()
	p.resp[h.Request] = append(p.resp[h.Request], h.Status)
	p.mu.Unlock()
}

// send makes request id (payload: id, 0) with flags and deadline_us
// arrive now and polls the loop, which admits or refuses it at once.
func (p *dlPath) send(id uint64, flags uint8, deadlineUS uint32) {
	p.t.Helper()
	payload := make([]byte, 8)
	binary.LittleEndian.PutUint32(payload, math.Float32bits(float32(id)))
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Flags: flags, Model: 7, Flow: 1, Request: id, DeadlineUS: deadlineUS}, payload, 1000)
	if err != nil {
		p.t.Fatal(err)
	}
	for _, d := range ds {
		if err := p.port.Inject(d, pathClient); err != nil {
			p.t.Fatal(err)
		}
	}
	p.sent++
	p.poll()
}

func (p *dlPath) poll() {
	if _, err := p.loop.Poll(p.clk.now()); err != nil {
		p.t.Fatal(err)
	}
}

// hold keeps the worker busy (between batches) until release is called.
func (p *dlPath) hold() (release func()) {
	held, rel := make(chan struct{}), make(chan struct{})
	go func() { _ = p.f.do(context.Background(), func() { close(held); <-rel }) }()
	<-held
	return func() { close(rel) }
}

// settle waits for n answers from the IF's worker, then sends every
// answer and checks that the counts add up and nothing is held: each
// request sent has exactly one response; ok, deadline_exceeded and
// overloaded responses match the IF's counters (Served; DeadlineAdmission
// + DeadlineBatch; Overloaded), and the admitted requests are those the
// IF answered; no request, packet buffer or output buffer is held.
func (p *dlPath) settle(n int) map[uint64]wire.Status {
	p.t.Helper()
	for range n {
		<-p.obs.answered
	}
	// the worker reports an answer just before it replies: poll until
	// every reply has been sent
	for p.poll(); p.loop.InFlight() > 0; p.poll() {
		runtime.Gosched()
	}
	var cand int
	if err := p.f.do(context.Background(), func() { cand = len(p.f.cand) }); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	got := map[uint64]wire.Status{}
	count := map[wire.Status]uint64{}
	for id, sts := range p.resp {
		if len(sts) != 1 {
			p.t.Fatalf("request %d: %d responses %v", id, len(sts), sts)
		}
		got[id] = sts[0]
		count[sts[0]]++
	}
	c := &p.f.C
	if len(got) != p.sent {
		p.t.Fatalf("%d requests sent, %d answered", p.sent, len(got))
	}
	if count[wire.StatusOK] != c.Served.Load() || count[wire.StatusDeadline] != c.DeadlineAdmission.Load()+c.DeadlineBatch.Load() ||
		count[wire.StatusOverloaded] != c.Overloaded.Load() || c.Failed.Load() != 0 ||
		uint64(p.sent)-c.Overloaded.Load() != c.Arrivals.Load() ||
		c.Arrivals.Load()-c.DeadlineAdmission.Load() != c.Served.Load()+c.DeadlineBatch.Load() {
		p.t.Fatalf("counts do not add up: responses %v; IF served %d, deadline %d at admission + %d at batch, overloaded %d, failed %d, arrivals %d",
			count, c.Served.Load(), c.DeadlineAdmission.Load(), c.DeadlineBatch.Load(), c.Overloaded.Load(), c.Failed.Load(), c.Arrivals.Load())
	}
	st := p.f.Status()
	if q := p.f.QueueDepth(); q != 0 || p.f.rtDepth.Load() != 0 || cand != 0 || p.loop.InFlight() != 0 ||
		p.port.Stats().BufInUse != 0 || st.OutBuffersInUse != 0 || p.loop.Table().Outstanding() != 0 || p.port.BadReleases() != 0 {
		p.t.Fatalf("not back to baseline: queue %d (rt %d), %d in flight, %d packet buffers, %d output buffers out, %d outstanding",
			q, p.f.rtDepth.Load(), p.loop.InFlight(), p.port.Stats().BufInUse, st.OutBuffersInUse, p.loop.Table().Outstanding())
	}
	return got
}

func wantStatuses(t *testing.T, got map[uint64]wire.Status, want map[uint64]wire.Status) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("answers %v, want %v", got, want)
	}
}

func wantBatches(t *testing.T, be *costBackend, want [][]int) {
	t.Helper()
	if got := be.ran(); !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
		t.Fatalf("batches run %v, want %v", got, want)
	}
}

const (
	rtFlag = wire.FlagRT
	dlFlag = wire.FlagDeadline
)

// A request with a 1 µs deadline is refused deadline_exceeded at
// admission, without running: a batch takes 10 ms. A request that sets no
// deadline (no flag, or the flag with deadline_us = 0) has the IF's SLO,
// none here, and is served.
func TestTinyDeadlineRefusedWithoutRunning(t *testing.T) {
	p := newDLPath(t, Config{MaxBatch: 1}, map[int]time.Duration{1: 10 * time.Millisecond},
		map[int]time.Duration{1: 10 * time.Millisecond})
	p.send(1, dlFlag, 1)
	p.send(2, 0, 0)
	p.send(3, dlFlag, 0)
	p.send(4, rtFlag|dlFlag, 1)
	got := p.settle(2)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusDeadline, 2: wire.StatusOK, 3: wire.StatusOK, 4: wire.StatusDeadline})
	wantBatches(t, p.be, [][]int{{2}, {3}})
	if p.f.C.DeadlineAdmission.Load() != 2 || p.f.C.DeadlineBatch.Load() != 0 {
		t.Fatalf("deadline refusals: %d at admission, %d at batch", p.f.C.DeadlineAdmission.Load(), p.f.C.DeadlineBatch.Load())
	}
}

// Before any batch has run the IF has no estimate: a deadline that has
// already passed when the batch is formed is refused there, without
// running.
func TestPassedDeadlineRefusedWithoutEstimate(t *testing.T) {
	p := newDLPath(t, Config{MaxBatch: 1}, map[int]time.Duration{1: 10 * time.Millisecond}, nil)
	release := p.hold()
	p.send(1, dlFlag, 1) // admitted: nothing known says it cannot finish
	p.send(2, 0, 0)
	p.clk.ns.Add(ms) // 1 ms later, the worker forms its batch
	release()
	got := p.settle(2)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusDeadline, 2: wire.StatusOK})
	wantBatches(t, p.be, [][]int{{2}})
	if p.f.C.DeadlineBatch.Load() != 1 {
		t.Fatalf("%d refused at batch formation, want 1", p.f.C.DeadlineBatch.Load())
	}
}

// An IF's first batch, which pages the model in, is not measured; the
// second is.
func TestFirstBatchNotMeasured(t *testing.T) {
	p := newDLPath(t, Config{MaxBatch: 1}, map[int]time.Duration{1: 10 * time.Millisecond}, nil)
	p.be.once = []time.Duration{500 * time.Millisecond}
	p.send(1, 0, 0)
	p.settle(1)
	if e := p.f.est.get(1); e != 0 {
		t.Fatalf("E(1) = %d after the first batch, want 0 (unknown)", e)
	}
	p.send(2, 0, 0)
	p.settle(1)
	if e := p.f.est.get(1); e != 10*ms {
		t.Fatalf("E(1) = %d after the second batch, want 10 ms", e)
	}
}

// Admission refuses the tail of a queue whose predicted finish is past
// the SLO. Batches of 2 take 15 ms, of 1 10 ms; the SLO is 40 ms. The
// requests arriving at 0 are predicted to finish at 10, 15 (the second
// joins the first's batch), 25, 30, 40 and 45 ms: the sixth is refused,
// the others are served, none late. With serve_late every one is served,
// and the sixth is late.
func TestQueueTailRefused(t *testing.T) {
	for _, late := range []bool{false, true} {
		p := newDLPath(t, Config{MaxBatch: 2, SLO: 40 * time.Millisecond, ServeLate: late},
			map[int]time.Duration{1: 10 * time.Millisecond, 2: 15 * time.Millisecond},
			map[int]time.Duration{1: 10 * time.Millisecond, 2: 15 * time.Millisecond})
		release := p.hold()
		for id := uint64(1); id <= 6; id++ {
			p.send(id, 0, 0)
		}
		release()
		want := map[uint64]wire.Status{1: wire.StatusOK, 2: wire.StatusOK, 3: wire.StatusOK, 4: wire.StatusOK, 5: wire.StatusOK, 6: wire.StatusDeadline}
		batches, answered, lateN := [][]int{{1, 2}, {3, 4}, {5}}, 5, uint64(0)
		if late {
			want[6] = wire.StatusOK
			batches, answered, lateN = [][]int{{1, 2}, {3, 4}, {5, 6}}, 6, 2 // 5 and 6 at 45 ms
		}
		got := p.settle(answered)
		wantStatuses(t, got, want)
		wantBatches(t, p.be, batches)
		if p.f.C.Late.Load() != lateN {
			t.Fatalf("serve_late %v: %d answered late, want %d", late, p.f.C.Late.Load(), lateN)
		}
	}
}

// A request that becomes hopeless while queued is dropped when the batch
// is formed, without running, and does not hold the others back. The SLO
// is 25 ms and a batch is estimated at 10 ms: both requests arriving at 0
// are admitted (predicted 10 and 20 ms). The first batch takes 16 ms; at
// 16 ms the second request cannot finish by 25 ms (16 + the estimate, the
// median of 10 and 16 ms: 10) and is answered deadline_exceeded; the third, which came with
// a deadline of its own (100 ms), is served. With serve_late the second
// is served at 26 ms, late.
func TestHopelessDroppedAtBatch(t *testing.T) {
	for _, late := range []bool{false, true} {
		p := newDLPath(t, Config{MaxBatch: 1, SLO: 25 * time.Millisecond, ServeLate: late},
			map[int]time.Duration{1: 10 * time.Millisecond}, map[int]time.Duration{1: 10 * time.Millisecond})
		p.be.once = []time.Duration{16 * time.Millisecond}
		release := p.hold()
		p.send(1, 0, 0)
		p.send(2, 0, 0)
		p.send(3, dlFlag, 100_000)
		release()
		if !late {
			got := p.settle(3)
			wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusOK, 2: wire.StatusDeadline, 3: wire.StatusOK})
			wantBatches(t, p.be, [][]int{{1}, {3}})
			if p.f.C.DeadlineBatch.Load() != 1 || p.f.C.DeadlineAdmission.Load() != 0 || p.f.C.Late.Load() != 0 {
				t.Fatalf("deadline refusals %d at batch, %d at admission, %d late", p.f.C.DeadlineBatch.Load(), p.f.C.DeadlineAdmission.Load(), p.f.C.Late.Load())
			}
			continue
		}
		got := p.settle(3)
		wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusOK, 2: wire.StatusOK, 3: wire.StatusOK})
		wantBatches(t, p.be, [][]int{{1}, {2}, {3}})
		if p.f.C.Late.Load() != 1 || p.f.C.DeadlineBatch.Load() != 0 {
			t.Fatalf("serve_late: %d late, %d refused", p.f.C.Late.Load(), p.f.C.DeadlineBatch.Load())
		}
	}
}

// RT requests are served ahead of every queued BE request, and admission
// predicts them so. Without deadlines: BE 1, BE 2, RT 3, RT 4 run as 3,
// 4, 1, 2. With a 15 ms SLO and 10 ms batches: BE 1 is admitted
// (predicted 10 ms), BE 2 refused (20 ms), RT 3 admitted (nothing RT
// ahead of it: 10 ms) and served first, and BE 1, which can no longer
// finish by 15 ms once RT 3 has run, is refused at batch formation.
func TestRTAheadOfBE(t *testing.T) {
	cost := map[int]time.Duration{1: 10 * time.Millisecond}
	p := newDLPath(t, Config{MaxBatch: 1}, cost, cost)
	release := p.hold()
	p.send(1, 0, 0)
	p.send(2, 0, 0)
	p.send(3, rtFlag, 0)
	p.send(4, rtFlag, 0)
	if p.f.rtDepth.Load() != 2 || p.f.QueueDepth() != 4 {
		t.Fatalf("queued %d, %d RT; want 4, 2", p.f.QueueDepth(), p.f.rtDepth.Load())
	}
	release()
	p.settle(4)
	wantBatches(t, p.be, [][]int{{3}, {4}, {1}, {2}})

	p = newDLPath(t, Config{MaxBatch: 1, SLO: 15 * time.Millisecond}, cost, cost)
	release = p.hold()
	p.send(1, 0, 0)
	p.send(2, 0, 0)
	p.send(3, rtFlag, 0)
	release()
	got := p.settle(2)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusDeadline, 2: wire.StatusDeadline, 3: wire.StatusOK})
	wantBatches(t, p.be, [][]int{{3}})
	if p.f.C.DeadlineAdmission.Load() != 1 || p.f.C.DeadlineBatch.Load() != 1 {
		t.Fatalf("deadline refusals: %d at admission (want 1: BE 2), %d at batch (want 1: BE 1)", p.f.C.DeadlineAdmission.Load(), p.f.C.DeadlineBatch.Load())
	}
}

// A BE request that becomes hopeless while RT requests fill the batches
// is answered when the first batch after that is formed, not when its
// turn comes. Batches of 1 take 10 ms. BE 1 (due in 15 ms) and BE 2 (25
// ms) are admitted, then RT 3, 4, 5 (no deadline): they run first, at 0,
// 10 and 20 ms. BE 1 cannot finish by 15 ms from 10 ms on, BE 2 by 25 ms
// from 20 ms on: each is answered deadline_exceeded then (10 and 20 ms
// after it arrived), while RT requests still wait, and neither runs.
func TestHopelessAnsweredBehindRT(t *testing.T) {
	cost := map[int]time.Duration{1: 10 * time.Millisecond}
	p := newDLPath(t, Config{MaxBatch: 1}, cost, cost)
	release := p.hold()
	p.send(1, dlFlag, 15_000)
	p.send(2, dlFlag, 25_000)
	for id := uint64(3); id <= 5; id++ {
		p.send(id, rtFlag, 0)
	}
	release()
	got := p.settle(5)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusDeadline, 2: wire.StatusDeadline, 3: wire.StatusOK, 4: wire.StatusOK, 5: wire.StatusOK})
	wantBatches(t, p.be, [][]int{{3}, {4}, {5}})
	p.obs.mu.Lock()
	defer p.obs.mu.Unlock()
	want := []dlAnswer{{wire.StatusOK, 10 * time.Millisecond}, {wire.StatusDeadline, 10 * time.Millisecond},
		{wire.StatusOK, 20 * time.Millisecond}, {wire.StatusDeadline, 20 * time.Millisecond}, {wire.StatusOK, 30 * time.Millisecond}}
	if !reflect.DeepEqual(p.obs.log, want) {
		t.Fatalf("answers (status, time from arrival) %v, want %v", p.obs.log, want)
	}
}

// A full queue answers overloaded, before any deadline is looked at.
// The running batch counts in the prediction: 4 ms into a batch estimated
// at 10 ms, a request waits 6 ms for it, then 10 ms for its own batch; due
// in 15 ms (the SLO) it is refused, due in 17 ms (its header's) it is
// admitted.
func TestQueueFullAndRunningBatch(t *testing.T) {
	cost := map[int]time.Duration{1: 10 * time.Millisecond}
	p := newDLPath(t, Config{MaxBatch: 1, QueueLen: 2, SLO: 15 * time.Millisecond}, cost, cost)
	release := p.hold()
	p.send(1, 0, 0)
	p.send(2, dlFlag, 50_000)
	p.send(3, dlFlag, 1) // the queue is full: overloaded, not deadline_exceeded
	release()
	got := p.settle(2)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusOK, 2: wire.StatusOK, 3: wire.StatusOverloaded})

	p = newDLPath(t, Config{MaxBatch: 1, SLO: 15 * time.Millisecond}, cost, cost)
	release = p.hold()
	p.f.busyUntil.Store(p.clk.now() + 10*ms) // as if a batch had started now
	p.clk.ns.Add(4 * ms)
	p.send(1, 0, 0)
	p.send(2, dlFlag, 17_000)
	p.f.busyUntil.Store(0)
	release()
	got = p.settle(1)
	wantStatuses(t, got, map[uint64]wire.Status{1: wire.StatusDeadline, 2: wire.StatusOK})
	wantBatches(t, p.be, [][]int{{2}})
}

// A batch is no larger than its members' deadlines allow, and the most
// urgent request keeps its place when the others can wait. Batches of 1,
// 2, 3 and 4 take 10, 12, 14 and 16 ms; an RT request due in 11 ms comes
// after three BE requests. When those are due in 100 ms, the RT request
// runs alone first (it would be late in a batch of 2 or more) and the
// three follow in one batch, all in time. When they are due in 20 ms,
// running the RT request first would make all three late (10 + 14 ms), so
// they run together, and the RT request, which can then no longer finish
// by 11 ms, is refused at batch formation.
func TestBatchFitsDeadlines(t *testing.T) {
	cost := map[int]time.Duration{1: 10 * time.Millisecond, 2: 12 * time.Millisecond, 3: 14 * time.Millisecond, 4: 16 * time.Millisecond}
	for _, tc := range []struct {
		others  uint32 // the three BE requests' deadline_us
		batches [][]int
		want    wire.Status // the RT request's answer
	}{
		{100_000, [][]int{{4}, {1, 2, 3}}, wire.StatusOK},
		{20_000, [][]int{{1, 2, 3}}, wire.StatusDeadline},
	} {
		// size 3's estimate is interpolated between 2 and 4
		p := newDLPath(t, Config{MaxBatch: 4}, cost, map[int]time.Duration{1: 10 * time.Millisecond, 2: 12 * time.Millisecond, 4: 16 * time.Millisecond})
		release := p.hold()
		for id := uint64(1); id <= 3; id++ {
			p.send(id, dlFlag, tc.others)
		}
		p.send(4, rtFlag|dlFlag, 11_000)
		release()
		got := p.settle(4)
		if got[4] != tc.want || p.f.C.Late.Load() != 0 {
			t.Fatalf("BE due in %d µs: the RT request answered %v, want %v; %d late", tc.others, got[4], tc.want, p.f.C.Late.Load())
		}
		wantBatches(t, p.be, tc.batches)
	}
}

// The pure parts, on explicit numbers.

func TestPredictFinish(t *testing.T) {
	est := func(n int) int64 { return map[int]int64{1: 10, 2: 15, 3: 18, 4: 20}[n] }
	for _, tc := range []struct {
		now, busy    int64
		ahead, limit int
		want         int64
	}{
		{100, 0, 0, 4, 110},   // alone
		{100, 0, 3, 4, 120},   // joins the batch of 4 of the three ahead
		{100, 0, 4, 4, 130},   // one full batch ahead (20), then alone (10)
		{100, 0, 9, 4, 155},   // two full batches (40), then with the ninth in a batch of 2 (15)
		{100, 130, 0, 4, 140}, // after the running batch
		{100, 90, 0, 4, 110},  // the running batch overran its estimate: from now
		{100, 0, 2, 0, 130},   // limit 0 counts as 1: two batches of 1 ahead
	} {
		if got := predictFinish(tc.now, tc.busy, tc.ahead, tc.limit, est); got != tc.want {
			t.Errorf("predictFinish(now %d, busy until %d, %d ahead, limit %d) = %d, want %d", tc.now, tc.busy, tc.ahead, tc.limit, got, tc.want)
		}
	}
}

func TestBatchEstimate(t *testing.T) {
	var e batchEstimate
	e.publish(8)
	if e.get(1) != 0 || e.get(8) != 0 {
		t.Fatal("an estimate before any observation")
	}
	t0 := int64(time.Hour)
	e.observe(2, 20*time.Millisecond, t0)
	// only size 2 seen: below it its value, above it in proportion
	for n, want := range map[int]int64{1: 20 * ms, 2: 20 * ms, 4: 40 * ms, 8: 80 * ms} {
		if got := e.get(n); got != want {
			t.Errorf("after one batch of 2: E(%d) = %d, want %d", n, got, want)
		}
	}
	e.observe(6, 40*time.Millisecond, t0)
	for n, want := range map[int]int64{4: 30 * ms, 5: 35 * ms, 7: 40 * ms * 7 / 6} {
		if got := e.get(n); got != want {
			t.Errorf("with batches of 2 and 6: E(%d) = %d, want %d", n, got, want)
		}
	}
	// the median of the last 32: a stall now and then does not move it
	// (16 of 32 do not), a lasting change does (17), and 17 batches later
	// it is back
	for range 32 {
		e.observe(3, 10*time.Millisecond, t0)
	}
	for range 16 {
		e.observe(3, time.Second, t0)
	}
	if got := e.get(3); got != 10*ms {
		t.Errorf("E(3) with 16 of the last 32 batches at 1 s, the others at 10 ms: %d, want 10 ms", got)
	}
	e.observe(3, time.Second, t0)
	if got := e.get(3); got != int64(time.Second) {
		t.Errorf("E(3) with 17 of the last 32 at 1 s: %d, want 1 s", got)
	}
	for range 17 {
		e.observe(3, 10*time.Millisecond, t0)
	}
	if got := e.get(3); got != 10*ms {
		t.Errorf("E(3) after 17 more of 10 ms: %d, want 10 ms", got)
	}
	// stale while idle for max(1 s, 4 E(1)), at most 10 s, after the
	// last batch (E(1) is E(2)'s here, 20 ms); never while a batch runs
	sec := int64(time.Second)
	if e.stale(t0+sec, false) || !e.stale(t0+sec+1, false) || e.stale(t0+int64(time.Hour), true) {
		t.Error("staleness after 1 s idle")
	}
	e.observe(1, 500*time.Millisecond, t0)
	if e.stale(t0+2*sec, false) || !e.stale(t0+2*sec+1, false) {
		t.Error("staleness after 4 E(1) = 2 s idle")
	}
	for range 2 {
		e.observe(1, 5*time.Second, t0)
	}
	if e.stale(t0+10*sec, false) || !e.stale(t0+10*sec+1, false) {
		t.Errorf("staleness with E(1) = %d: after 10 s idle", e.get(1))
	}
}

func TestPickBatch(t *testing.T) {
	est := func(n int) int64 { return map[int]int64{1: 10, 2: 12, 3: 14, 4: 16}[n] }
	mk := func(deadlines ...int64) []item {
		c := make([]item, len(deadlines))
		for i, d := range deadlines {
			c[i] = item{deadline: d, queued: int64(i)}
		}
		return c
	}
	for _, tc := range []struct {
		name   string
		cand   []item
		limit  int
		n      int
		prefix bool
	}{
		{"no deadlines: a full batch", mk(0, 0, 0, 0, 0), 4, 4, true},
		{"all in time in a full batch", mk(120, 120, 120, 120), 4, 4, true},
		{"the urgent one first, the others can wait", mk(111, 200, 200, 200), 4, 1, true},
		{"the others cannot wait: the fullest", mk(111, 120, 120, 120), 4, 3, false},
		{"a prefix of 2", mk(112, 113, 200, 200), 4, 2, true},
		{"fewer candidates than the limit", mk(0, 0), 4, 2, true},
		{"none", nil, 4, 0, true},
	} {
		n, prefix, _ := pickBatch(tc.cand, tc.limit, 100, est)
		if n != tc.n || prefix != tc.prefix {
			t.Errorf("%s: batch of %d (prefix %v), want %d (prefix %v)", tc.name, n, prefix, tc.n, tc.prefix)
		}
	}
}

// The timeout action is part of the spec; serve_late reaches the IF.
func TestTimeoutActionSpec(t *testing.T) {
	s := Spec{Name: "a", Model: "zoo:x", TimeoutAction: TimeoutServeLate}
	if err := s.Resolve(""); err != nil || !s.Config().ServeLate {
		t.Fatalf("serve_late: %v, config %+v", err, s.Config())
	}
	d := Spec{Name: "a", Model: "zoo:x"}
	if err := d.Resolve(""); err != nil || d.TimeoutAction != TimeoutReject || d.Config().ServeLate {
		t.Fatalf("default: %v, %q", err, d.TimeoutAction)
	}
}

// A backend that reads the payload until its batch is done (Loaded when
// the input is in place, Gathered at the end: a scheduler job) has the
// batch's time counted as compute, not as gather: the split the IF
// reports (if_compute_seconds, its bottleneck) follows Loaded.
func TestLoadedSplitsGatherFromCompute(t *testing.T) {
	for _, keep := range []bool{false, true} {
		p := newDLPath(t, Config{MaxBatch: 1}, map[int]time.Duration{1: 7 * time.Millisecond}, nil)
		p.be.keep = keep
		p.send(1, 0, 0)
		wantStatuses(t, p.settle(1), map[uint64]wire.Status{1: wire.StatusOK})
		if g, c := p.f.C.GatherNS.Load(), p.f.C.ComputeNS.Load(); g != 0 || c != uint64(7*time.Millisecond) {
			t.Fatalf("keep %v: gather %v, compute %v; want 0 and 7ms", keep, time.Duration(g), time.Duration(c))
		}
	}
}

package sched

import (
	"context"
	"math/rand"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

func newTestBackend(t *testing.T, p Policy) *Backend {
	t.Helper()
	b := NewBackend(BackendOptions{Config: Config{Policy: p, PadBudgetMBs: -1}, ProfileRuns: 1})
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Deinit() })
	return b
}

func testGraph(t *testing.T, key string) *graph.Graph {
	t.Helper()
	tm := testModels[key]
	g, err := zoo.Build(tm.name, tm.opt)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func randInput(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = r.Float32()*2 - 1
	}
	return x
}

// requireSameBits fails unless got equals want bit for bit: the scheduler
// runs the cpu backend's kernels (in any version, preempted or padded) and
// a model's output depends on its input and batch size only.
func requireSameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if d := sameBits(got, want); d != "" {
		t.Fatalf("%s: %s", what, d)
	}
}

// cpuReference runs g on the cpu backend at batch n.
func cpuReference(t *testing.T, g *graph.Graph, n int, in []float32) []float32 {
	t.Helper()
	ctx := context.Background()
	cb := cpu.New()
	if err := cb.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer cb.Deinit()
	inst, err := cb.LoadModel(ctx, "ref", g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := cb.ConfigureBatch(inst, n); err != nil {
		t.Fatal(err)
	}
	out := make([]float32, n*inst.OutputSize())
	if err := cb.InferBatch(ctx, inst, n, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every batch size runs in the smallest bucket that holds it and gives the
// cpu backend's result, for RT and BE instances, under every policy.
func TestBackendBucketsMatchCPU(t *testing.T) {
	g := testGraph(t, "resnet")
	r := rand.New(rand.NewSource(7))
	const maxB = 5
	in := randInput(r, maxB*3*32*32)
	want := cpuReference(t, g, maxB, in)
	for _, p := range []Policy{PolicyREEF, PolicySeq, PolicySplit} {
		t.Run(string(p), func(t *testing.T) {
			b := newTestBackend(t, p)
			ctx := context.Background()
			inst, err := b.LoadModel(ctx, "resnet", g)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			if got := inst.InputShape(); len(got) != 3 || got[0] != 3 || got[1] != 32 {
				t.Fatalf("input shape %v", got)
			}
			if err := b.ConfigureBatch(inst, maxB); err != nil {
				t.Fatal(err)
			}
			if got := inst.(*Instance).Buckets(); len(got) != 4 || got[0] != 1 || got[1] != 2 || got[2] != 4 || got[3] != 5 {
				t.Fatalf("buckets %v, want [1 2 4 5]", got)
			}
			is, os := inst.InputSize(), inst.OutputSize()
			for n := 1; n <= maxB; n++ {
				for _, rt := range []bool{false, true} {
					inst.(*Instance).SetRealTime(rt)
					out := make([]float32, n*os+3)
					for i := range out {
						out[i] = 42
					}
					if err := b.InferBatch(ctx, inst, n, in[:n*is], out); err != nil {
						t.Fatal(err)
					}
					requireSameBits(t, "output", out[:n*os], want[:n*os])
					for _, v := range out[n*os:] {
						if v != 42 {
							t.Fatalf("batch %d wrote past its outputs", n)
						}
					}
				}
			}
			if err := b.InferBatch(ctx, inst, maxB+1, in, make([]float32, (maxB+1)*os)); err == nil {
				t.Fatal("a batch over the configured maximum was accepted")
			}
			st := b.Scheduler().Stats()
			if st.Jobs[RT] != maxB || st.Jobs[BE] != maxB {
				t.Fatalf("jobs RT %d BE %d, want %d each", st.Jobs[RT], st.Jobs[BE], maxB)
			}
		})
	}
}

// Under reef, an RT instance's batches preempt a BE instance's running
// batches; both stay correct, and the preemption latencies are handed out
// once. Each RT batch arrives while a BE batch's kernel is held past its
// prologue (the runtime's test hook), so each one preempts.
func TestBackendRTPreemptsBE(t *testing.T) {
	var mu sync.Mutex
	var hooked []int64
	b := NewBackend(BackendOptions{Config: Config{Policy: PolicyREEF, PadBudgetMBs: -1, OnPreempt: func(ns int64) {
		mu.Lock()
		hooked = append(hooked, ns)
		mu.Unlock()
	}}, ProfileRuns: 1})
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Deinit() })
	ctx := context.Background()
	gBE, gRT := testGraph(t, "resnet"), testGraph(t, "squeeze")
	be, err := b.LoadModel(ctx, "be", gBE)
	if err != nil {
		t.Fatal(err)
	}
	defer be.Close()
	rt, err := b.LoadModel(ctx, "rt", gRT)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	rt.(*Instance).SetRealTime(true)
	if err := b.ConfigureBatch(be, 4); err != nil {
		t.Fatal(err)
	}
	if err := b.ConfigureBatch(rt, 1); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(9))
	beIn := randInput(r, 4*be.InputSize())
	rtIn := randInput(r, rt.InputSize())
	beWant := cpuReference(t, gBE, 4, beIn)
	rtWant := cpuReference(t, gRT, 1, rtIn)

	s := b.Scheduler()
	lane := s.lanes[1+be.(*Instance).g.queue]
	defer lane.st.ReleaseHold()
	live := liveKernels(be.(*Instance).g.bucket(4))
	const rounds = 3
	out := make([]float32, rt.OutputSize())
	beOut := make([]float32, 4*be.OutputSize())
	for k := 0; k < rounds; k++ {
		h := lane.st.Holds()
		lane.st.HoldAt(int64(live[1+k*len(live)/(rounds+1)]), 0, true)
		beDone := make(chan error, 1)
		go func() { beDone <- b.InferBatch(ctx, be, 4, beIn, beOut) }()
		waitFor(t, "a BE batch's kernel", func() bool { return lane.st.Holds() > h })
		if err := b.InferBatch(ctx, rt, 1, rtIn, out); err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, "RT output", out, rtWant)
		if err := <-beDone; err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, "BE output", beOut, beWant)
	}
	st := s.Stats()
	if st.Preemptions != rounds || st.Jobs[RT] != rounds || st.Jobs[BE] != rounds {
		t.Fatalf("%d preemptions, %d RT and %d BE jobs: want %d of each", st.Preemptions, st.Jobs[RT], st.Jobs[BE], rounds)
	}
	p := st.PreemptNs
	if int64(len(p)) != st.Preemptions {
		t.Fatalf("%d preemption latencies for %d preemptions", len(p), st.Preemptions)
	}
	// the OnPreempt hook saw each one as it was measured
	mu.Lock()
	seen := slices.Clone(hooked)
	mu.Unlock()
	if !slices.Equal(seen, p) {
		t.Fatalf("OnPreempt saw %v, the stats hold %v", seen, p)
	}
	t.Logf("%d preemptions, first latency %d ns", st.Preemptions, p[0])
}

// Linked instances share the model; the last Close unloads its buckets
// from the scheduler; Deinit with a model still loaded is an error.
func TestBackendLinkAndUnload(t *testing.T) {
	b := newTestBackend(t, PolicySeq)
	ctx := context.Background()
	s := b.Scheduler()
	models := func() int {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.models)
	}
	g := testGraph(t, "squeeze")
	a, err := b.LoadModel(ctx, "sq", g)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ConfigureBatch(a, 3); err != nil {
		t.Fatal(err)
	}
	if n := models(); n != 3 {
		t.Fatalf("%d models loaded, want 3 buckets (1, 2, 3)", n)
	}
	a.(*Instance).SetRealTime(true)
	l, err := b.LinkModel(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if !l.(*Instance).RealTime() {
		t.Fatal("a linked instance lost its class")
	}
	if err := b.ConfigureBatch(l, 2); err != nil {
		t.Fatal(err)
	}
	if n := models(); n != 3 {
		t.Fatalf("linking loaded buckets again: %d models", n)
	}
	r := rand.New(rand.NewSource(3))
	in := randInput(r, 2*l.InputSize())
	want := cpuReference(t, g, 2, in)
	out := make([]float32, 2*l.OutputSize())
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.InferBatch(ctx, a, 1, in, out); err == nil {
		t.Fatal("a closed instance ran a batch")
	}
	if err := b.InferBatch(ctx, l, 2, in, out); err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "linked output", out, want)
	if n := models(); n != 3 {
		t.Fatalf("closing one of two instances unloaded the model: %d models", n)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if n := models(); n != 0 {
		t.Fatalf("%d models left after the last instance closed", n)
	}
	if _, err := b.LinkModel(ctx, l); err == nil {
		t.Fatal("linked to an unloaded model")
	}

	// Deinit with a model loaded frees it and says so.
	b2 := NewBackend(BackendOptions{Config: Config{Policy: PolicyConc, PadBudgetMBs: -1}, ProfileRuns: 1})
	if err := b2.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.LoadModel(ctx, "sq", g); err != nil {
		t.Fatal(err)
	}
	if err := b2.Deinit(); err == nil {
		t.Fatal("deinit with a loaded model gave no error")
	}
}

// A model without a batch dimension runs one job per request.
func TestBackendFixedBatchModel(t *testing.T) {
	g := testGraph(t, "squeeze")
	g.Inputs[0].Dims[0] = 1
	g.Inputs[0].DimParams = nil
	b := newTestBackend(t, PolicyREEF)
	ctx := context.Background()
	inst, err := b.LoadModel(ctx, "fixed", g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if err := b.ConfigureBatch(inst, 3); err != nil {
		t.Fatal(err)
	}
	if got := inst.(*Instance).Buckets(); len(got) != 1 {
		t.Fatalf("buckets %v for a fixed-batch model", got)
	}
	r := rand.New(rand.NewSource(5))
	is, os := inst.InputSize(), inst.OutputSize()
	in := randInput(r, 3*is)
	out := make([]float32, 3*os)
	if err := b.InferBatch(ctx, inst, 3, in, out); err != nil {
		t.Fatal(err)
	}
	for k := 0; k < 3; k++ {
		want := cpuReference(t, g, 1, in[k*is:(k+1)*is])
		requireSameBits(t, "request", out[k*os:(k+1)*os], want)
	}
	if st := b.Scheduler().Stats(); st.Jobs[BE] != 3 {
		t.Fatalf("%d BE jobs, want 3", st.Jobs[BE])
	}
}

// A linked instance configured for larger batches (a swap's shadow) adds
// buckets while the active instance keeps serving from the same model
// (run under the race detector by make test).
func TestBackendBucketsGrowWhileServing(t *testing.T) {
	b := newTestBackend(t, PolicySeq)
	ctx := context.Background()
	g := testGraph(t, "squeeze")
	a, err := b.LoadModel(ctx, "sq", g)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := b.ConfigureBatch(a, 2); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(11))
	in := randInput(r, 2*a.InputSize())
	want := cpuReference(t, g, 2, in)
	done := make(chan error, 1)
	var stop atomic.Bool
	go func() {
		out := make([]float32, 2*a.OutputSize())
		for k := 0; !stop.Load(); k++ {
			if err := b.InferBatch(ctx, a, 1+k%2, in, out); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	l, err := b.LinkModel(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	err = b.ConfigureBatch(l, 6)
	stop.Store(true)
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := l.(*Instance).Buckets(); len(got) != 4 || got[3] != 6 {
		t.Fatalf("buckets %v, want [1 2 4 6]", got)
	}
	out := make([]float32, 2*a.OutputSize())
	if err := b.InferBatch(ctx, a, 2, in, out); err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "after the buckets grew", out, want)
}

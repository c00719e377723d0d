package sched

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/kprof"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
	ncpu "sluice/native/cpu"
)

// Test models: small enough for a 2-core machine, with narrow kernels
// (padding) and, for BERT, in-place kernels (idempotent groups).
var testModels = map[string]struct {
	name string
	opt  zoo.Options
	int8 bool // quantised statically (libml/quantize), calibrated on the cpu backend
}{
	"squeeze": {"squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}, false},
	"resnet":  {"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 2}, false},
	"bert":    {"bert", zoo.Options{Layers: 2, SeqLen: 16, Hidden: 64, Heads: 2, FF: 128, Seed: 3}, false},
	// int8 activations stored as bytes
	"mnet8": {"mobilenetv2", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 4}, true},
}

// quantized quantises g statically on the cpu backend.
func quantized(t testing.TB, g *graph.Graph) (*graph.Graph, error) {
	be := cpu.New()
	if err := be.Init(context.Background(), libml.BackendConfig{Units: 1}); err != nil {
		return nil, err
	}
	defer be.Deinit()
	sets, err := quantize.Samples(g, 2, 1, zoo.Input)
	if err != nil {
		return nil, err
	}
	q, _, err := quantize.Model(context.Background(), g, be.RunGraph, sets)
	return q, err
}

var (
	profMu sync.Mutex
	profs  = map[string]*kprof.Model{}
	graphs = map[string]*graph.Graph{}
)

// load loads a test model on s, profiling it once per test binary.
func load(t testing.TB, s *Scheduler, key string, opt ModelOptions) *Model {
	t.Helper()
	tm, ok := testModels[key]
	if !ok {
		t.Fatalf("no test model %q", key)
	}
	profMu.Lock()
	g := graphs[key]
	if g == nil {
		var err error
		if g, err = zoo.Build(tm.name, tm.opt); err == nil && tm.int8 {
			g, err = quantized(t, g)
		}
		if err != nil {
			profMu.Unlock()
			t.Fatal(err)
		}
		graphs[key] = g
	}
	if opt.Profile == nil && opt.Versions == nil && !opt.NoInPlace {
		opt.Profile = profs[key]
	}
	profMu.Unlock()
	if opt.ProfileRuns == 0 {
		opt.ProfileRuns = 2
	}
	m, err := s.Load(key, g, opt)
	if err != nil {
		t.Fatal(err)
	}
	profMu.Lock()
	if profs[key] == nil && opt.Versions == nil && !opt.NoInPlace {
		profs[key] = m.Profile()
	}
	profMu.Unlock()
	if pinVersions {
		pin(m)
	}
	return m
}

func newSched(t testing.TB, cfg Config) *Scheduler {
	t.Helper()
	if cfg.Units == 0 {
		cfg.Units = 2
	}
	if cfg.PadBudgetMBs == 0 {
		cfg.PadBudgetMBs = -1
	}
	if cfg.PadBackoffTol == 0 {
		// the tests script padding (rtIntoBE waits for it): the
		// back-off's unpadded probes would leave some RT modes without
		// it; TestPadGuard and TestPadGuardGatesPadding test the guard
		cfg.PadBackoffTol = -1
	}
	if pinVersions {
		cfg.PreemptSlack, cfg.PreemptCheckNs = -1, -1
		cfg.PreemptCheckFlops, cfg.PreemptCheckBytes = -1, -1
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func job(m *Model, c Class, q int, seed uint64) *Job {
	return &Job{Model: m, Class: c, Queue: q, In: fillInput(m.InputSize(), seed), Out: make([]float32, m.OutputSize())}
}

// reference runs each input alone (seq policy, one job at a time).
func reference(t testing.TB, key string, seeds ...uint64) map[uint64][]float32 {
	t.Helper()
	s := newSched(t, Config{Policy: PolicySeq})
	m := load(t, s, key, ModelOptions{})
	out := map[uint64][]float32{}
	for _, sd := range seeds {
		j := job(m, BE, 0, sd)
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
		if err := j.Wait(); err != nil {
			t.Fatal(err)
		}
		out[sd] = j.Out
	}
	s.Close()
	return out
}

func maxRelDiff(a, b []float32) float64 {
	var d float64
	for i := range a {
		x, y := float64(a[i]), float64(b[i])
		e := math.Abs(x-y) / math.Max(1e-3, math.Max(math.Abs(x), math.Abs(y)))
		if math.IsNaN(x) != math.IsNaN(y) {
			e = math.Inf(1)
		}
		d = math.Max(d, e)
	}
	return d
}

// TestPoliciesMatchReference: under every policy, jobs of two models
// submitted concurrently (RT and BE) produce the outputs they produce
// alone, bit for bit: preemption, restore, padding, the kernel versions
// and the preemptible copies reef's BE streams run never change a bit
// (ARCHITECTURE.md §3, determinism).
func TestPoliciesMatchReference(t *testing.T) {
	seeds := []uint64{1, 2, 3, 4, 5, 6}
	refs := map[string]map[uint64][]float32{
		"squeeze": reference(t, "squeeze", seeds...),
		"bert":    reference(t, "bert", seeds...),
	}
	type variant struct {
		name string
		cfg  Config
	}
	var vs []variant
	for _, p := range Policies() {
		vs = append(vs, variant{string(p), Config{Policy: p, BEQueues: 3}})
	}
	vs = append(vs, variant{"reef-nopad", Config{Policy: PolicyREEF, BEQueues: 3, NoPadding: true}})
	for _, v := range vs {
		t.Run(v.name, func(t *testing.T) {
			s := newSched(t, v.cfg)
			ms := map[string]*Model{"squeeze": load(t, s, "squeeze", ModelOptions{}), "bert": load(t, s, "bert", ModelOptions{})}
			var jobs []*Job
			var keys []string
			var sds []uint64
			for r := 0; r < 3; r++ {
				for i, key := range []string{"squeeze", "bert", "squeeze", "bert"} {
					sd := seeds[(r*4+i)%len(seeds)]
					c := BE
					if i == 1 && r != 1 || i == 2 && r == 1 {
						c = RT
					}
					j := job(ms[key], c, i%3, sd)
					if err := s.Submit(j); err != nil {
						t.Fatal(err)
					}
					jobs, keys, sds = append(jobs, j), append(keys, key), append(sds, sd)
				}
				time.Sleep(200 * time.Microsecond)
			}
			for i, j := range jobs {
				if err := j.Wait(); err != nil {
					t.Fatal(err)
				}
				if d := sameBits(j.Out, refs[keys[i]][sds[i]]); d != "" {
					t.Errorf("job %d (%s %s seed %d, %d preemptions, %d padded blocks): %s", i, keys[i], j.Class, sds[i], j.Preemptions, j.PadBlocks, d)
				}
				if j.Finished < j.Started || j.Started < j.Submitted {
					t.Fatalf("job %d: submitted %d started %d finished %d", i, j.Submitted, j.Started, j.Finished)
				}
			}
			st := s.Stats()
			if st.Jobs[RT]+st.Jobs[BE] != int64(len(jobs)) {
				t.Fatalf("stats count %v jobs, want %d", st.Jobs, len(jobs))
			}
		})
	}
}

// testLane is a lane of s without a waiter: the test reads its drain
// notifications itself.
func testLane(t testing.TB, s *Scheduler) *lane {
	t.Helper()
	l, err := s.newLane(-1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.st.SetNotify(-1)
		l.st.Close()
		l.efd.Close()
	})
	return l
}

// runSeg pushes job j's kernels [j.pos, to) on lane l and waits
// (synchronously, no policy).
func runSeg(s *Scheduler, l *lane, to int) ncpu.Status {
	s.push(l, to, lkFast)
	var b [8]byte
	l.efd.Read(b[:]) // the drain notification
	return l.st.Sync()
}

// finishJob completes job j, run to its end on lane l outside any policy:
// its output copied out, its instance released.
func finishJob(s *Scheduler, l *lane, j *Job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j.pos = len(j.Model.prog.Kernels)
	l.job = nil
	s.finish(j)
	s.takeFire()
}

// restoreCheck preempts a job at every (kernel, block) point chosen by
// points, restores it from the point restorePoint computes and checks the
// output equals the uninterrupted run's, bit for bit.
func restoreCheck(t *testing.T, s *Scheduler, m *Model, want []float32, points func(k int, grid int64) []int64) (checked int) {
	t.Helper()
	l := testLane(t, s)
	in := fillInput(m.InputSize(), 9)
	nk := len(m.prog.Kernels)
	for k := 0; k < nk; k++ {
		if m.prog.Kernels[k].Op == 0 {
			continue
		}
		grid := m.prof.Kernels[k].Versions[0].Grid
		for _, blk := range points(k, grid) {
			j := &Job{Model: m, Class: BE, In: in, Out: make([]float32, m.OutputSize())}
			s.mu.Lock()
			if err := s.begin(l, j); err != nil {
				s.mu.Unlock()
				t.Fatal(err)
			}
			s.mu.Unlock()
			l.st.PreemptAt(int64(k), blk)
			if st := runSeg(s, l, nk); st != ncpu.Preempted {
				t.Fatalf("kernel %d block %d: not preempted", k, blk)
			}
			l.st.PreemptAt(-1, 0)
			l.from, l.ver, l.blk, l.end, l.preempted = 0, 0, 0, 0, true
			ev, evBase, evGrid, evDone, evEnd := l.ds.evicted()
			s.mu.Lock()
			execIdx := -2
			debugRestore = func(_ *Model, idx int, _ *lane) { execIdx = idx }
			s.restorePoint(l)
			debugRestore = nil
			s.mu.Unlock()
			// what the restore saw, for a failure's message
			seen := fmt.Sprintf("execution index %d, evicted launch %d (blocks %d+%d, %d ran, from %d on too), restart at kernel %d version %d blocks %d to %d",
				execIdx, ev, evBase, evGrid, evDone, evEnd, j.pos, j.posVer, j.posBlk, j.posEnd)
			if j.pos > k {
				t.Fatalf("kernel %d block %d: restarts at %d (%s)", k, blk, j.pos, seen)
			}
			if st := runSeg(s, l, nk); st != ncpu.Done {
				t.Fatalf("kernel %d block %d: restored run preempted", k, blk)
			}
			finishJob(s, l, j)
			for i := range want {
				if j.Out[i] != want[i] && !(math.IsNaN(float64(j.Out[i])) && math.IsNaN(float64(want[i]))) {
					t.Fatalf("preempted at kernel %d (%s) block %d: out[%d] = %v, want %v (%s)",
						k, m.prog.Kernels[k].Ops, blk, i, j.Out[i], want[i], seen)
				}
			}
			checked++
		}
	}
	return checked
}

// TestRestoreExactAfterAnyPreemptionPoint: a model with in-place kernels
// (BERT: residual adds and activations run in place), and a quantised
// MobileNetV2 whose activations are stored as bytes, are preempted at the
// first, a middle and the last block of every kernel;
// restoring from the interrupted kernel, or from the first kernel of its
// idempotent group, gives the uninterrupted run's output exactly.
func TestRestoreExactAfterAnyPreemptionPoint(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	s := newSched(t, Config{Policy: PolicySeq})
	for _, key := range []string{"bert", "squeeze", "mnet8"} {
		m := load(t, s, key, ModelOptions{})
		if key == "bert" && m.prog.InPlace == 0 {
			t.Fatal("bert has no in-place kernel: the test would not cover idempotent groups")
		}
		if key == "mnet8" && !hasBytes(m) {
			t.Fatal("mnet8 stores no activation as bytes")
		}
		want := reference(t, key, 9)[9]
		n := restoreCheck(t, s, m, want, func(k int, g int64) []int64 {
			pts := []int64{0}
			if g > 2 {
				pts = append(pts, g/2)
			}
			if g > 1 {
				pts = append(pts, g-1)
			}
			return pts
		})
		groups := 0
		for i, e := range m.idem {
			if e != i {
				groups++
			}
		}
		t.Logf("%s: %d preemption points restored exactly (%d kernels in non-trivial idempotent groups)", key, n, groups)
	}
}

// TestRestoreSkipsFinishedBackBlocks: units claim a kernel's blocks from
// both ends, so a preempted kernel can leave finished blocks behind its
// unfinished ones; the restore runs only the unfinished range and the
// output is still the uninterrupted run's. Block 1 of a kernel is held
// until the flag while the other unit runs every block but it, then the
// job is preempted: it restarts at block 1 and ends before block 2.
func TestRestoreSkipsFinishedBackBlocks(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	s := newSched(t, Config{Policy: PolicySeq})
	m := load(t, s, "squeeze", ModelOptions{})
	want := reference(t, "squeeze", 9)[9]
	nk := len(m.prog.Kernels)
	k := -1
	for i := 1; i < nk && k < 0; i++ {
		if m.prog.Kernels[i].Op != 0 && m.idem[i] == i && m.prof.Kernels[i].Versions[0].Grid >= 4 {
			k = i
		}
	}
	if k < 0 {
		t.Fatal("no idempotent kernel of 4 or more blocks")
	}
	l := testLane(t, s)
	j := &Job{Model: m, Class: BE, In: fillInput(m.InputSize(), 9), Out: make([]float32, m.OutputSize())}
	s.mu.Lock()
	if err := s.begin(l, j); err != nil {
		s.mu.Unlock()
		t.Fatal(err)
	}
	s.mu.Unlock()
	l.st.HoldAt(int64(k), 1, true)
	defer l.st.ReleaseHold()
	s.push(l, nk, lkFast)
	grid := m.prof.Kernels[k].Versions[0].Grid
	waitFor(t, "kernel k's block 1 held, every other block finished", func() bool {
		f, b := l.st.Claims()
		return l.st.Holding() == 1 && l.st.ExecIndex() == int64(k) && f+b == grid && l.st.Running() == 1
	})
	l.ds.preempt()
	var b [8]byte
	l.efd.Read(b[:])
	if st := l.st.Sync(); st != ncpu.Preempted {
		t.Fatalf("sync: %v", st)
	}
	l.st.HoldAt(-1, 0, false)
	s.mu.Lock()
	s.restorePoint(l)
	s.mu.Unlock()
	if j.pos != k || j.posBlk != 1 || j.posEnd != 2 {
		t.Fatalf("restarts at kernel %d blocks [%d, %d), want kernel %d blocks [1, 2)", j.pos, j.posBlk, j.posEnd, k)
	}
	if st := runSeg(s, l, nk); st != ncpu.Done {
		t.Fatalf("restored run: %v", st)
	}
	finishJob(s, l, j)
	for i := range want {
		if j.Out[i] != want[i] {
			t.Fatalf("out[%d] = %v, want %v", i, j.Out[i], want[i])
		}
	}
}

// TestNaiveRestoreBreaksInPlace is the control: restarting at the last
// started kernel when that kernel ran in place (ignoring its idempotent
// group) gives a wrong output, so the exactness test above can fail.
func TestNaiveRestoreBreaksInPlace(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	s := newSched(t, Config{Policy: PolicySeq})
	m := load(t, s, "bert", ModelOptions{})
	want := reference(t, "bert", 9)[9]
	naive := make([]int, len(m.idem))
	for i := range naive {
		naive[i] = i
	}
	saved := m.idem
	m.idem = naive
	defer func() { m.idem = saved }()
	wrong, tried := 0, 0
	nk := len(m.prog.Kernels)
	for k := 0; k+1 < nk; k++ {
		if m.prog.Kernels[k].Idempotent() {
			continue
		}
		// preempt as the next kernel starts: the in-place kernel is the
		// last one that ran, and a naive restore runs it a second time
		tried++
		l := testLane(t, s)
		j := &Job{Model: m, Class: BE, In: fillInput(m.InputSize(), 9), Out: make([]float32, m.OutputSize())}
		s.mu.Lock()
		s.begin(l, j)
		s.mu.Unlock()
		l.st.PreemptAt(int64(k+1), 0)
		runSeg(s, l, nk)
		l.st.PreemptAt(-1, 0)
		s.mu.Lock()
		l.preempted = true
		s.restorePoint(l)
		s.mu.Unlock()
		if j.pos != k {
			t.Fatalf("naive restore after kernel %d restarts at %d", k, j.pos)
		}
		runSeg(s, l, nk)
		s.mu.Lock()
		l.job = nil
		s.finish(j)
		s.takeFire()
		s.mu.Unlock()
		if maxRelDiff(j.Out, want) > 0 {
			wrong++
		}
	}
	if wrong == 0 {
		t.Fatalf("re-running %d in-place kernels never changed the output: the restore test has no teeth", tried)
	}
	t.Logf("naive restore broke %d of %d in-place restart points", wrong, tried)
}

// order records the order jobs finish in.
type order struct {
	mu   sync.Mutex
	done []*Job
}

func (o *order) hook(j *Job) *Job {
	j.Done = func(j *Job) {
		o.mu.Lock()
		o.done = append(o.done, j)
		o.mu.Unlock()
	}
	return j
}

func (o *order) wait(t *testing.T, js ...*Job) []*Job {
	t.Helper()
	for _, j := range js {
		if err := j.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*Job(nil), o.done...)
}

func sameOrder(t *testing.T, got, want []*Job, names map[*Job]string) {
	t.Helper()
	var g, w []string
	for _, j := range got {
		g = append(g, names[j])
	}
	for _, j := range want {
		w = append(w, names[j])
	}
	if len(g) != len(w) {
		t.Fatalf("finish order %v, want %v", g, w)
	}
	for i := range g {
		if g[i] != w[i] {
			t.Fatalf("finish order %v, want %v", g, w)
		}
	}
}

// TestSeqOrder: one job at a time, the running one is never preempted,
// then RT jobs before BE jobs, BE queues in turn.
func TestSeqOrder(t *testing.T) {
	s := newSched(t, Config{Policy: PolicySeq, BEQueues: 2})
	m := load(t, s, "squeeze", ModelOptions{})
	var o order
	b1, b2, r1, b3 := o.hook(job(m, BE, 0, 1)), o.hook(job(m, BE, 1, 2)), o.hook(job(m, RT, 0, 3)), o.hook(job(m, BE, 0, 4))
	s.submitAll(b1, b2, r1, b3)
	got := o.wait(t, b1, b2, r1, b3)
	sameOrder(t, got, []*Job{b1, r1, b2, b3}, map[*Job]string{b1: "B1", b2: "B2", r1: "R1", b3: "B3"})
	for _, j := range got {
		if j.Preemptions != 0 {
			t.Fatalf("seq preempted a job")
		}
	}
}

// TestReefPreemptsBE: an RT job arriving while a BE job runs (its
// kernel in the middle of the model held past its prologue until the
// preemption: the arrival cannot come too late) preempts it (one
// preemption, measured), finishes first, and the BE job restores to the
// output it has alone, bit for bit.
func TestReefPreemptsBE(t *testing.T) {
	want := reference(t, "resnet", 5)[5]
	for _, pad := range []bool{false, true} {
		s := newSched(t, Config{Policy: PolicyREEF, BEQueues: 2, NoPadding: !pad})
		releaseHolds(t, s)
		big, small := load(t, s, "resnet", ModelOptions{}), load(t, s, "squeeze", ModelOptions{})
		live := liveKernels(big)
		at := live[len(live)/2]
		var o order
		b, r := o.hook(job(big, BE, 0, 5)), o.hook(job(small, RT, 0, 6))
		be := s.lanes[1]
		be.st.HoldAt(int64(at), 0, true)
		if err := s.Submit(b); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the BE job's kernel to run", func() bool { return be.st.Holds() == 1 })
		if err := s.Submit(r); err != nil {
			t.Fatal(err)
		}
		got := o.wait(t, b, r)
		sameOrder(t, got, []*Job{r, b}, map[*Job]string{b: "BE", r: "RT"})
		if b.Preemptions != 1 {
			t.Fatalf("padding %v: BE job preempted %d times, want 1", pad, b.Preemptions)
		}
		if d := sameBits(b.Out, want); d != "" {
			t.Errorf("padding %v: BE job preempted at kernel %d, restored (%d padded blocks): %s", pad, at, b.PadBlocks, d)
		}
		st := s.Stats()
		if st.Preemptions != 1 || len(st.PreemptNs) != 1 || st.PreemptNs[0] <= 0 || st.ModeSwitches != 1 {
			t.Fatalf("padding %v: stats %+v", pad, st)
		}
		t.Logf("padding %v: preemption latency %.1f us, BE padded blocks %d", pad, float64(st.PreemptNs[0])/1e3, b.PadBlocks)
	}
}

// TestConcNoPriority: conc starts both jobs at once on their own streams
// and never preempts.
func TestConcNoPriority(t *testing.T) {
	s := newSched(t, Config{Policy: PolicyConc, BEQueues: 2})
	s.logSegs = true
	big, small := load(t, s, "resnet", ModelOptions{}), load(t, s, "squeeze", ModelOptions{})
	b, r := job(big, BE, 1, 5), job(small, RT, 0, 6)
	s.submitAll(b, r)
	b.Wait()
	r.Wait()
	if b.Preemptions != 0 || r.Preemptions != 0 {
		t.Fatal("conc preempted a job")
	}
	s.mu.Lock()
	segs := append([]segEv(nil), s.segs...)
	s.mu.Unlock()
	if len(segs) != 2 || segs[0].lane == segs[1].lane || segs[0].to != big.Kernels() || segs[1].to != small.Kernels() {
		t.Fatalf("conc segments %+v: want each job whole on its own stream", segs)
	}
}

// loadLongShort loads resnet and squeeze with their kernel times given as
// data (100 us and 1 us a kernel): the orders srpt and split decide from
// profiled times are the same on any machine.
func loadLongShort(t *testing.T, s *Scheduler) (long, short *Model) {
	flat := func(key string, ns float64) *kprof.Model {
		return dataProfile(t, key, func(k, v int, vp *kprof.Version) {
			vp.KernNs, vp.BlockNs = ns, ns/2
		})
	}
	return load(t, s, "resnet", ModelOptions{Profile: flat("resnet", 100e3)}), load(t, s, "squeeze", ModelOptions{Profile: flat("squeeze", 1e3)})
}

// segNames renders a segment log as job names with kernel ranges.
func segNames(segs []segEv, names map[*Job]string) []string {
	var out []string
	for _, e := range segs {
		out = append(out, fmt.Sprintf("%s[%d:%d]", names[e.job], e.from, e.to))
	}
	return out
}

// TestSRPTOrder: the job with the shortest remaining time runs first at
// every decision; deficit counters let a starved user's oldest job run
// once its deficit passes the threshold.
func TestSRPTOrder(t *testing.T) {
	run := func(threshold float64, nshort int) ([]segEv, map[*Job]string, *Job, []*Job) {
		s := newSched(t, Config{Policy: PolicySRPT, FairThreshold: threshold, QuantumNs: 1})
		s.logSegs = true
		big, small := loadLongShort(t, s)
		long := job(big, BE, 0, 1)
		long.User = 1
		names := map[*Job]string{long: "L"}
		js := []*Job{long}
		var shorts []*Job
		for i := 0; i < nshort; i++ {
			sj := job(small, BE, 1, uint64(2+i))
			sj.User = 2
			names[sj] = fmt.Sprint("S", i)
			js = append(js, sj)
			shorts = append(shorts, sj)
		}
		s.submitAll(js...)
		for _, j := range js {
			if err := j.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return append([]segEv(nil), s.segs...), names, long, shorts
	}
	// no fairness pressure: L's first kernel, then every S job, then L
	segs, names, long, shorts := run(1e9, 2)
	if segs[0].job != long || segs[0].to != segs[0].from+1 {
		t.Fatalf("first segment %v: want L's first kernel", segNames(segs[:1], names))
	}
	last := map[*Job]int{}
	first := map[*Job]int{}
	for i, e := range segs {
		last[e.job] = i
		if _, ok := first[e.job]; !ok {
			first[e.job] = i
		}
	}
	for _, sj := range shorts {
		if first[sj] == 0 {
			t.Fatalf("short job ran first: %v", segNames(segs, names))
		}
		for i := 1; i < last[sj]; i++ {
			if segs[i].job == long {
				t.Fatalf("SRPT ran L before a shorter job finished: %v", segNames(segs, names))
			}
		}
	}
	// with a threshold of 2 kernels, L runs again before the short jobs
	// are all done
	segs, names, long, shorts = run(2, 6)
	lastShort := 0
	for i, e := range segs {
		if e.job != long {
			lastShort = i
		}
	}
	fair := false
	for i := 1; i < lastShort; i++ {
		fair = fair || segs[i].job == long
	}
	if !fair {
		t.Fatalf("deficit threshold never let L run between short jobs: %v", segNames(segs, names))
	}
}

// TestSplitOrder: SPLIT runs models block by block; a short job arriving
// while a long one runs moves ahead of it at the next block boundary
// (greedy response ratio), jobs of one model stay in FIFO order.
func TestSplitOrder(t *testing.T) {
	s := newSched(t, Config{Policy: PolicySplit})
	s.logSegs = true
	big, small := loadLongShort(t, s)
	if len(big.cuts) == 0 {
		t.Fatal("split computed no cuts for resnet")
	}
	var o order
	l1, s1, l2, s2 := o.hook(job(big, BE, 0, 1)), o.hook(job(small, RT, 0, 2)), o.hook(job(big, BE, 0, 3)), o.hook(job(small, RT, 0, 4))
	names := map[*Job]string{l1: "L1", s1: "S1", l2: "L2", s2: "S2"}
	s.submitAll(l1, s1, l2, s2)
	got := o.wait(t, l1, s1, l2, s2)
	sameOrder(t, got, []*Job{s1, s2, l1, l2}, names)
	s.mu.Lock()
	segs := append([]segEv(nil), s.segs...)
	s.mu.Unlock()
	// L1's first block ran first, then the short jobs, at block boundaries
	if segs[0].job != l1 || segs[0].from != 0 || segs[0].to != big.cuts[0] {
		t.Fatalf("segments %v: want L1's first block [0:%d] first", segNames(segs, names), big.cuts[0])
	}
	for _, e := range segs {
		if e.to != nextCut(e.job.Model, e.from) {
			t.Fatalf("segment %s[%d:%d] does not end at a block boundary (cuts %v)", names[e.job], e.from, e.to, e.job.Model.cuts)
		}
	}
}

// TestCloseDropsJobs: closing ends queued and running jobs with ErrClosed.
// The first job is held inside its second kernel until Close preempts
// it: every job is still queued or running when Close comes.
func TestCloseDropsJobs(t *testing.T) {
	s, err := New(Config{Policy: PolicySeq, Units: 2, PadBudgetMBs: -1})
	if err != nil {
		t.Fatal(err)
	}
	m := load(t, s, "resnet", ModelOptions{})
	l := s.lanes[0]
	l.st.HoldAt(int64(liveKernels(m)[1]), 0, true) // Close's preemption lets it go
	var js []*Job
	for i := 0; i < 5; i++ {
		j := job(m, BE, 0, uint64(i))
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
		js = append(js, j)
	}
	waitFor(t, "the first job's second kernel", func() bool { return l.st.Holds() == 1 })
	s.Close()
	closed := 0
	for _, j := range js {
		if err := j.Wait(); err == ErrClosed {
			closed++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if closed != len(js) {
		t.Fatalf("%d of %d jobs ended with ErrClosed", closed, len(js))
	}
	if err := s.Submit(job(m, BE, 0, 1)); err != ErrClosed {
		t.Fatalf("submit after close: %v", err)
	}
}

// TestSubmitErrors: bad jobs are refused with clear errors.
func TestSubmitErrors(t *testing.T) {
	s := newSched(t, Config{Policy: PolicySeq, BEQueues: 2})
	m := load(t, s, "squeeze", ModelOptions{})
	for _, j := range []*Job{
		{Class: BE, In: make([]float32, m.InputSize())},
		{Model: m, Class: BE, In: make([]float32, 3)},
		{Model: m, Class: BE, In: make([]float32, m.InputSize()), Out: make([]float32, 1)},
		{Model: m, Class: BE, Queue: 2, In: make([]float32, m.InputSize())},
		{Model: m, Class: 7, In: make([]float32, m.InputSize())},
		// a payload input is a segment device's (the cpu copies In)
		{Model: m, Class: BE, Input: &libml.Input{Ends: []int{0}}},
	} {
		if err := s.Submit(j); err == nil {
			t.Fatalf("job %+v accepted", j)
		}
	}
	if _, err := New(Config{Policy: "fifo"}); err == nil {
		t.Fatal("unknown policy accepted")
	}
	if _, err := s.Load("x", graphs["squeeze"], ModelOptions{Batch: 1, Cuts: []int{5, 3}}); err == nil {
		t.Fatal("unsorted cuts accepted")
	}
}

// TestIdemTrace: the traced groups (tools/idemcheck) flag every in-place
// kernel the compiler made, the scheduler loads them, and restores from
// them are exact at every preemption point.
func TestIdemTrace(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	load(t, newSched(t, Config{Policy: PolicySeq}), "bert", ModelOptions{}) // builds the graph
	meta, rep, err := TraceIdempotence("bert", graphs["bert"], ModelOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("trace: %s", rep)
	if len(rep.Undeclared) > 0 {
		t.Fatalf("kernels %v wrote outside their declared buffers", rep.Undeclared)
	}
	s := newSched(t, Config{Policy: PolicySeq})
	m := load(t, s, "bert", ModelOptions{Idem: meta})
	inPlace := 0
	for i := range m.prog.Kernels {
		if !m.prog.Kernels[i].Idempotent() {
			inPlace++
			if meta.Idempotent[i] {
				t.Fatalf("kernel %d (%s) runs in place but the trace calls it idempotent", i, m.prog.Kernels[i].Ops)
			}
		}
	}
	if inPlace == 0 || len(rep.NonIdempotent) < inPlace {
		t.Fatalf("trace found %d non-idempotent kernels, the compiler made %d in place", len(rep.NonIdempotent), inPlace)
	}
	for i, e := range m.idem {
		if e != meta.Entry[i] {
			t.Fatalf("model restarts kernel %d at %d, metadata says %d", i, e, meta.Entry[i])
		}
	}
	want := reference(t, "bert", 9)[9]
	n := restoreCheck(t, s, m, want, func(k int, g int64) []int64 { return []int64{0, g - 1} })
	t.Logf("%d preemption points restored exactly from traced groups", n)
	// metadata for another model or program is refused
	bad := *meta
	bad.Entry = append([]int(nil), meta.Entry...)
	bad.Entry[len(bad.Entry)-1] = len(bad.Entry)
	if _, err := s.Load("bert", graphs["bert"], ModelOptions{Idem: &bad}); err == nil {
		t.Fatal("metadata with a forward restart point accepted")
	}
	bad = *meta
	bad.Ops = append([]string(nil), meta.Ops...)
	bad.Ops[0] = "Nope"
	if _, err := s.Load("bert", graphs["bert"], ModelOptions{Idem: &bad}); err == nil {
		t.Fatal("metadata for another program accepted")
	}
}

// synthProfile is a profile with the given kernel times (ns).
func synthProfile(ts ...float64) *kprof.Model {
	p := &kprof.Model{Model: "synth"}
	for i, x := range ts {
		p.Kernels = append(p.Kernels, kprof.Kernel{Index: i, Versions: []kprof.Version{{KernNs: x, BlockNs: x, Grid: 1}}})
		p.TotalNs += x
	}
	return p
}

// TestSplitModel: the genetic algorithm finds cuts at least as even as a
// greedy time-balanced split, its fitness is SPLIT eq. 2, cuts are sorted
// and in range, and SplitBest splits a long model.
func TestSplitModel(t *testing.T) {
	var ts []float64
	for i := 0; i < 60; i++ {
		ts = append(ts, float64(1000+(i*7919)%9000))
	}
	p := synthProfile(ts...)
	r := SplitModel(p, 4, GAConfig{Seed: 3})
	if len(r.Cuts) != 3 || len(r.BlockNs) != 4 {
		t.Fatalf("cuts %v blocks %v", r.Cuts, r.BlockNs)
	}
	for i, c := range r.Cuts {
		if c < 1 || c >= len(ts) || (i > 0 && c <= r.Cuts[i-1]) {
			t.Fatalf("bad cuts %v", r.Cuts)
		}
	}
	cfg := GAConfig{}
	cfg.defaults()
	want := -(math.Exp(r.StdNs/p.TotalNs) - 1 + math.Exp(r.Overhead/4) - 1)
	if math.Abs(r.Fitness-want) > 1e-12 || math.Abs(r.Overhead-3*cfg.CutNs/p.TotalNs) > 1e-12 {
		t.Fatalf("fitness %v, eq. 2 gives %v", r.Fitness, want)
	}
	// the greedy balanced split (the GA's first seed) is never better
	var sum float64
	for _, x := range ts {
		sum += x
	}
	var greedy []int
	acc, next := 0.0, sum/4
	for i, x := range ts {
		acc += x
		if acc >= next && len(greedy) < 3 {
			greedy = append(greedy, i+1)
			next += sum / 4
		}
	}
	g := evalSplit(ts, sum, greedy, &cfg)
	if r.Fitness < g.Fitness-1e-12 {
		t.Fatalf("GA fitness %v below the greedy split's %v", r.Fitness, g.Fitness)
	}
	if again := SplitModel(p, 4, GAConfig{Seed: 3}); again.Fitness != r.Fitness {
		t.Fatal("same seed, different result")
	}
	best := SplitBest(p, 8, GAConfig{Seed: 1})
	if len(best.BlockNs) < 2 {
		t.Fatalf("SplitBest kept one block for a %.0f us model", sum/1e3)
	}
}

// TestPaddingFillsIdleUnits: a BE job preempted by an RT job is
// finished by padding alone, on the unit the RT job leaves idle, with the
// output it has alone. The script makes padding certain: the RT job's
// profile is given as data with kernels far longer than any BE block, so
// rule 1 admits the BE blocks on any machine, and one of the RT job's
// kernels is held until padding has finished the BE job. Selection
// respects rule 1 (checked in C by TestPadSelectRules).
func TestPaddingFillsIdleUnits(t *testing.T) {
	s := newSched(t, Config{Policy: PolicyREEF, BEQueues: 1})
	releaseHolds(t, s)
	rt := load(t, s, "resnet", ModelOptions{Profile: rtData(t, "resnet")})
	be := load(t, s, "bert", ModelOptions{})
	want := reference(t, "bert", 4)[4]
	b, r := job(be, BE, 0, 4), job(rt, RT, 0, 10)
	live, rtLive := liveKernels(be), liveKernels(rt)
	nk := len(be.prog.Kernels)
	rtIntoBE(t, s, b, r, live[1], 0, rtLive[len(rtLive)/2], func(c ncpu.Cursor) bool { return c.K >= nk })
	st := s.Stats()
	if b.PadBlocks == 0 || st.PadJobs != 1 || b.Preemptions != 1 {
		t.Fatalf("BE job: %d padded blocks, %d preemptions; stats %+v", b.PadBlocks, b.Preemptions, st)
	}
	if d := sameBits(b.Out, want); d != "" {
		t.Errorf("BE job finished by padding (%d blocks): %s", b.PadBlocks, d)
	}
	// Selection time is a benchmark's business (BenchmarkPadSelect, the
	// DISB report): logged here, not asserted.
	mean := float64(st.PadSelect.Ns) / float64(max(st.PadSelect.Calls, 1))
	t.Logf("BE job: %d padded blocks, %d preemptions; %d selections, mean %.0f ns, %d over 2 us, rule rejections %d/%d",
		b.PadBlocks, b.Preemptions, st.PadSelect.Calls, mean, st.PadSelect.Over2us, st.PadSelect.Rule1, st.PadSelect.Rule2)
}

// TestRestoreAfterRandomPreemptions: jobs preempted by HQPreempt at
// random (seeded) points, several times each, restored at block level
// where the kernel allows it (the blocks that ran to their end are kept),
// give the uninterrupted run's output exactly, in the fast and in the
// preemptible versions. Each preemption comes while a unit holds the
// chosen block of the chosen kernel (the runtime's test hook) past its
// prologue; the first one of a run picks an idempotent kernel, whose
// restore is block-level.
func TestRestoreAfterRandomPreemptions(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	s := newSched(t, Config{Policy: PolicySeq})
	rng := uint64(99)
	rnd := func(n int64) int64 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return int64(rng % uint64(max(n, 1)))
	}
	l := testLane(t, s)
	t.Cleanup(l.st.ReleaseHold)
	for _, key := range []string{"bert", "resnet"} {
		m := load(t, s, key, ModelOptions{})
		// short check spacing: most kernels run in copies with added checks
		m.choosePreempt(50e3, 0.25, 5e3)
		nk := len(m.prog.Kernels)
		live := liveKernels(m)
		for _, kind := range []launchKind{lkFast, lkPreempt} {
			// point picks a kernel after the job's position (an idempotent
			// one for the first preemption) and a block of it in the
			// version it launches in; k < 0: none left
			point := func(j *Job, first bool) (k int, blk int64) {
				var cand []int
				for _, c := range live {
					if c > j.pos && (!first || m.idem[c] == c) {
						cand = append(cand, c)
					}
				}
				if len(cand) == 0 {
					return -1, 0
				}
				k = cand[rnd(int64(len(cand)))]
				v := 0
				if kind == lkPreempt {
					v = m.prVer[k]
				}
				return k, rnd(m.prof.Kernels[k].Versions[v].Grid)
			}
			run := func(preempt bool) (*Job, int) {
				j := &Job{Model: m, Class: BE, In: fillInput(m.InputSize(), 5), Out: make([]float32, m.OutputSize())}
				s.mu.Lock()
				s.begin(l, j)
				s.mu.Unlock()
				n := 0
				for j.pos < nk {
					k, blk := -1, int64(0)
					if preempt && n < 6 {
						k, blk = point(j, n == 0)
					}
					h := l.st.Holds()
					if k >= 0 {
						l.st.HoldAt(int64(k), blk, true)
					}
					s.push(l, nk, kind)
					if k >= 0 {
						waitFor(t, fmt.Sprintf("kernel %d block %d", k, blk), func() bool { return l.st.Holds() > h })
						l.preempted = true
						l.st.HQPreempt()
					}
					var b [8]byte
					l.efd.Read(b[:])
					if st := l.st.Sync(); st == ncpu.Preempted {
						s.mu.Lock()
						s.restorePoint(l)
						s.mu.Unlock()
						n++
					} else {
						j.pos = nk
					}
				}
				s.mu.Lock()
				l.job = nil
				s.finish(j)
				s.takeFire()
				s.mu.Unlock()
				return j, n
			}
			ref, _ := run(false)
			before := s.stats.BlockRestores
			restores := 0
			for trial := 0; trial < 12; trial++ {
				j, n := run(true)
				restores += n
				if n == 0 {
					t.Fatalf("%s kind %d trial %d: no preemption", key, kind, trial)
				}
				if d := sameBits(j.Out, ref.Out); d != "" {
					t.Fatalf("%s kind %d trial %d: %d preemptions: %s", key, kind, trial, n, d)
				}
			}
			if s.stats.BlockRestores-before < 12 {
				t.Fatalf("%s kind %d: %d of %d restores were block-level, want at least one a run", key, kind, s.stats.BlockRestores-before, restores)
			}
			t.Logf("%s kind %d: %d restores, %d block-level", key, kind, restores, s.stats.BlockRestores-before)
		}
	}
}

// A job preempted before any block of its segment passed the prologue
// restarts where it stood, whatever the lane ran before: the execution
// index is the segment's own, not the last kernel of the job the lane
// finished earlier (which would restore from that job's last group and
// skip the kernels before it).
func TestRestoreIgnoresPreviousJobsIndex(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	s := newSched(t, Config{Policy: PolicySeq})
	m := load(t, s, "squeeze", ModelOptions{})
	want := reference(t, "squeeze", 9)[9]
	l := testLane(t, s)
	in := fillInput(m.InputSize(), 9)
	nk := len(m.prog.Kernels)
	first := 0
	for m.prog.Kernels[first].Op == 0 {
		first++
	}
	run := func(preempt bool) *Job {
		j := &Job{Model: m, Class: BE, In: in, Out: make([]float32, m.OutputSize())}
		s.mu.Lock()
		if err := s.begin(l, j); err != nil {
			s.mu.Unlock()
			t.Fatal(err)
		}
		s.mu.Unlock()
		if preempt {
			// the flag goes up as the segment's first block is claimed:
			// no block passes its prologue
			l.st.PreemptAt(int64(first), 0)
			if st := runSeg(s, l, nk); st != ncpu.Preempted {
				t.Fatal("not preempted")
			}
			l.st.PreemptAt(-1, 0)
			l.from, l.ver, l.blk, l.preempted = 0, 0, 0, true
			s.mu.Lock()
			s.restorePoint(l)
			s.mu.Unlock()
			if j.pos != 0 {
				t.Fatalf("preempted before its first block ran, the job restarts at kernel %d, not 0", j.pos)
			}
		}
		if st := runSeg(s, l, nk); st != ncpu.Done {
			t.Fatal("run preempted")
		}
		s.mu.Lock()
		j.pos = nk
		l.job = nil
		s.finish(j)
		s.takeFire()
		s.mu.Unlock()
		return j
	}
	run(false) // the lane's index named the job's last kernel
	j := run(true)
	for i := range want {
		if j.Out[i] != want[i] {
			t.Fatalf("out[%d] = %v, want %v", i, j.Out[i], want[i])
		}
	}
}

// hasBytes reports whether a kernel of m reads or writes bytes.
func hasBytes(m *Model) bool {
	for _, k := range m.prog.Kernels {
		if k.P[engine.PStore] != 0 {
			return true
		}
	}
	return false
}

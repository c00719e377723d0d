//go:build linux && cgo

package cuda

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// disbEmuModels are DISB's roles played by models the emulator runs in
// about 10 ms a job (2 cores): chains of fully connected layers (Gemm
// with a fused Tanh), one kernel each, of different depths and widths.
func disbEmuModels(t testing.TB) []DISBModel {
	t.Helper()
	specs := []struct {
		role          string
		layers, width int
	}{
		{"RNET", 12, 48},
		{"VGG", 8, 64},
		{"YOLO", 10, 32},
		{"BERT", 14, 32},
		{"GPT2", 6, 48},
	}
	var out []DISBModel
	for k, s := range specs {
		out = append(out, DISBModel{Role: s.role, Name: "mlp", Size: fmt.Sprintf("%d x fc %d", s.layers, s.width),
			Graph: mlpGraph(s.layers, s.width, uint64(k+1))})
	}
	return out
}

// mlpGraph is layers fully connected layers of width inputs and outputs,
// each followed by Tanh, with seeded weights scaled to keep the values
// in range.
func mlpGraph(layers, width int, seed uint64) *graph.Graph {
	g := &graph.Graph{Name: "mlp", Opset: 13}
	x := "x"
	for l := 0; l < layers; l++ {
		w := zoo.Input(seed*1000+uint64(l), width*width)
		for k := range w {
			w[k] /= float32(width)
		}
		wn, bn, y, z := fmt.Sprint("w", l), fmt.Sprint("b", l), fmt.Sprint("y", l), fmt.Sprint("z", l)
		g.Initializers = append(g.Initializers,
			&graph.Tensor{Name: wn, DType: graph.Float32, Dims: []int64{int64(width), int64(width)}, F32: w},
			&graph.Tensor{Name: bn, DType: graph.Float32, Dims: []int64{int64(width)}, F32: w[:width]})
		g.Nodes = append(g.Nodes,
			graph.Node{Name: y, Op: "Gemm", Inputs: []string{x, wn, bn}, Outputs: []string{y},
				Attrs: []graph.Attr{{Name: "transB", Kind: graph.AttrInt, I: 1}}},
			graph.Node{Name: z, Op: "Tanh", Inputs: []string{y}, Outputs: []string{z}})
		x = z
	}
	g.Inputs = []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, int64(width)}}}
	g.Outputs = []graph.ValueInfo{{Name: x, DType: graph.Float32, Dims: []int64{-1, int64(width)}}}
	return g
}

// GPU DISB on the emulated device, end to end (calibration, every
// policy, the restore measurement, the report): every job of every
// client finishes with the unpreempted output, and the policies order
// the runs as they must: seq never overlaps two runs and never preempts;
// conc never preempts; reef starts no BE run while an RT job runs and
// never preempts an RT run; rt-only has no BE client (checkDISB). What
// the window got done is not checked here (see checkDISB); that conc
// runs RT beside BE and that reef preempts and restores are asserted by
// the scripted runs (disb_script_test.go).
func TestDISBEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	var wls []DISBWorkload
	for _, w := range DISBWorkloads() {
		if w.Name == "A" || w.Name == "D" {
			f := 0.4 // A: RT VGG at 20%
			if w.Name == "D" {
				f = 0.6 // five RT clients at 6% each
			}
			wls = append(wls, scaleRates(w, f))
		}
	}
	// reef-pad has a test of its own (TestDISBPadEmu): on the emulator
	// sg_pad's occupancy x SMs blocks cost as many emulated blocks per
	// RT kernel, which at workload D's five RT clients overloads the RT
	// queue of a 2-core machine
	pols := slices.DeleteFunc(DISBPolicies(), func(p string) bool { return p == PolicyReefPad })
	// checkDISB counts nothing the window got done, so the window is
	// only as long as it takes to exercise every policy's paths
	cfg := DISBConfig{Workloads: wls, Policies: pols, Duration: 500 * time.Millisecond,
		Warmup: 100 * time.Millisecond, Calibrate: 150 * time.Millisecond, RestoreJobs: 6, Seed: 3,
		Command: "TestDISBEmu", Logf: t.Logf, trace: true}
	rep, err := RunDISB(context.Background(), b, disbEmuModels(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDISB(t, rep, cfg, 5)
}

// GPU DISB on the GPU (SLUICE_GPU=1): workload A (RT VGG-16 at 50% of
// its maximum throughput, BE ResNet-50, full size) under every policy,
// with the checks of TestDISBEmu. SLUICE_GPU=emu runs it on the emulator
// with the stand-ins of TestDISBEmu.
func TestGPUBackendDISB(t *testing.T) {
	b := gpuBackend(t)
	var models []DISBModel
	if gpuSmoke() {
		models = disbEmuModels(t)
	} else {
		for _, m := range []struct{ role, name string }{{"RNET", "resnet50"}, {"VGG", "vgg16"}} {
			g, err := zoo.Build(m.name, zoo.Options{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			models = append(models, DISBModel{Role: m.role, Name: m.name, Size: "224x224, 1000 classes", Graph: g})
		}
	}
	cfg := DISBConfig{Workloads: DISBWorkloads()[:1], Policies: DISBPolicies(), Duration: 2 * time.Second,
		Warmup: 300 * time.Millisecond, Calibrate: time.Second, RestoreJobs: 10, Seed: 5,
		Command: "TestGPUBackendDISB", Logf: t.Logf, trace: true}
	if gpuSmoke() {
		cfg.Duration, cfg.Calibrate, cfg.RestoreJobs = 700*time.Millisecond, 150*time.Millisecond, 4
		cfg.Workloads[0] = scaleRates(cfg.Workloads[0], 0.4)
	}
	rep, err := RunDISB(context.Background(), b, models, cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkDISB(t, rep, cfg, 2)
}

// scaleRates returns w with its RT rates times f. The emulator shares 2
// cores with whatever else runs: a machine twice as loaded as when the
// models were calibrated doubles the RT load, and at REEF's rates seq
// would then rarely get to a BE job (nothing fails then: checkDISB does
// not count jobs, but the run would exercise less).
func scaleRates(w DISBWorkload, f float64) DISBWorkload {
	w.Clients = slices.Clone(w.Clients)
	for i := range w.Clients {
		w.Clients[i].Rate *= f
	}
	w.Desc += fmt.Sprintf(" (RT rates x %g)", f)
	return w
}

// checkDISB checks a DISB report made with cfg (trace on) over nModels
// models. It checks only what holds whatever the machine got done in the
// window: every output exact, the counters consistent with each other,
// and each policy's ordering of the runs (seq never overlaps two runs;
// no policy but reef and reef-pad preempts; reef starts no BE run inside
// an RT run; no RT run is ever preempted).
//
// How much got done is a benchmark figure, not a test: jobs finished per
// client, RT runs beside BE runs under conc, preempting arrivals and
// relaunched kernels under reef, padded blocks and gain under reef-pad,
// jobs preempted by the restore measurement. On a loaded or slow machine
// any of them can be 0 in a short window (an RT queue that does not
// drain starves seq's BE client; a BE run that no arrival finds is never
// preempted), so they are reported by tools/gpubench disb and
// tools/disb (make bench-sched), and asserted for certain, with the
// interleaving held in place, by the scripted runs of
// disb_script_test.go (TestDISBScriptConc, TestDISBScriptReef,
// TestDISBPadEmu, TestDISBPadVersionEmu).
func checkDISB(t *testing.T, rep *DISBReport, cfg DISBConfig, nModels int) {
	t.Helper()
	wls := cfg.Workloads
	if len(rep.Rows) != len(wls)*len(cfg.Policies) {
		t.Fatalf("%d rows, want %d", len(rep.Rows), len(wls)*len(cfg.Policies))
	}
	if len(rep.Models) != nModels {
		t.Errorf("%d models in the report, want %d", len(rep.Models), nModels)
	}
	// calibration runs at least 5 jobs whatever its duration
	for _, m := range rep.Models {
		if m.Kernels == 0 || m.MaxPerSec <= 0 || m.AloneMs <= 0 || m.AloneP99Ms < m.AloneMs {
			t.Errorf("model %s not calibrated: %+v", m.Role, m)
		}
	}
	maxThr := map[string]float64{}
	for _, m := range rep.Models {
		maxThr[m.Role] = m.MaxPerSec
	}
	spec := map[string]DISBClient{}
	for _, w := range wls {
		for _, c := range w.Clients {
			spec[w.Name+" "+c.Name] = c
		}
	}
	for _, row := range rep.Rows {
		what := row.Workload + " " + row.Policy
		if row.Wrong != 0 {
			t.Errorf("%s: %d jobs with a wrong output", what, row.Wrong)
		}
		rtDone, bePre := 0, 0
		for _, c := range row.Clients {
			cs := spec[row.Workload+" "+c.Name]
			if c.WrongJobs != 0 {
				t.Errorf("%s: client %s: %d wrong outputs (max diff %g)", what, c.Name, c.WrongJobs, c.MaxWrongDiff)
			}
			// the arrivals are a schedule, not something run: uniform
			// gaps leave at least one in a window of two gaps
			if c.RT && !cs.Poisson && c.Arrived == 0 && cs.Rate*maxThr[c.Role]*cfg.Duration.Seconds() >= 2 {
				t.Errorf("%s: client %s had no arrival", what, c.Name)
			}
			if !c.RT && c.Arrived != 0 {
				t.Errorf("%s: BE client %s has %d arrivals", what, c.Name, c.Arrived)
			}
			// every finished job launched its whole plan at least
			// (under reef-pad, padding runs some of a BE job's kernels)
			if c.Done > 0 && c.LaunchesPerJob < float64(c.PlannedPerJob) && (c.RT || row.Policy != PolicyReefPad) {
				t.Errorf("%s: client %s launched %.1f kernels per job, its plan has %d", what, c.Name, c.LaunchesPerJob, c.PlannedPerJob)
			}
			if c.Done < 0 || c.NormThr < 0 || (c.Done == 0) != (c.NormThr == 0) {
				t.Errorf("%s: client %s: %d done, normalized thr %v", what, c.Name, c.Done, c.NormThr)
			}
			if c.RT {
				rtDone += c.Done
				if c.Preemptions != 0 {
					t.Errorf("%s: RT client %s was preempted %d times", what, c.Name, c.Preemptions)
				}
			} else {
				bePre += c.Preemptions
			}
		}
		if row.RTDone != rtDone || row.Preemptions != bePre {
			t.Errorf("%s: RT done %d (clients %d), BE preemptions %d (clients %d)", what, row.RTDone, rtDone, row.Preemptions, bePre)
		}
		if row.RTDone > 0 && (row.RTMeanMs <= 0 || row.RTP50Ms <= 0 || row.RTP99Ms < row.RTP50Ms) {
			t.Errorf("%s: RT done %d, mean %.3f ms, p50 %.3f p99 %.3f", what, row.RTDone, row.RTMeanMs, row.RTP50Ms, row.RTP99Ms)
		}
		if row.Thr < 0 || row.JobsPerSec < row.BEPerSec || row.BEPerSec < 0 {
			t.Errorf("%s: thr %v, jobs/s %v, BE jobs/s %v", what, row.Thr, row.JobsPerSec, row.BEPerSec)
		}
		if row.ViolRate < 0 || row.ViolRate > 1 || row.RTJitterMs < 0 {
			t.Errorf("%s: violation rate %v, jitter %v ms", what, row.ViolRate, row.RTJitterMs)
		}
		if row.PreemptN > 0 && (row.PreemptP50Us < 0 || row.PreemptP99Us < row.PreemptP50Us || row.PreemptMaxUs < row.PreemptP99Us) {
			t.Errorf("%s: %d preempting arrivals, preemption p50 %.1f p99 %.1f max %.1f µs", what, row.PreemptN, row.PreemptP50Us, row.PreemptP99Us, row.PreemptMaxUs)
		}
		if row.ReexecShare < 0 || row.ReexecShare > 1 || row.RelaunchPerPreempt < 0 {
			t.Errorf("%s: re-exec share %v, relaunches per preemption %v", what, row.ReexecShare, row.RelaunchPerPreempt)
		}
		// padding's counters: only reef-pad pads; a padded launch
		// carries at least one BE kernel, and BE blocks run only in one
		if row.Policy != PolicyReefPad && (row.PadRTKernels != 0 || row.PadLaunches != 0 || row.PadBEBlocks != 0) {
			t.Errorf("%s padded: %d RT kernels, %d padded", what, row.PadRTKernels, row.PadLaunches)
		}
		if row.PadLaunches > row.PadRTKernels || row.PadBEKernels < row.PadLaunches || row.PadBEVersioned > row.PadBEKernels ||
			row.PadBEBlocks > 0 && row.PadLaunches == 0 {
			t.Errorf("%s: %d RT kernels, %d padded, %d BE kernels (%d not version 0), %d BE blocks", what,
				row.PadRTKernels, row.PadLaunches, row.PadBEKernels, row.PadBEVersioned, row.PadBEBlocks)
		}
		var rt, be []disbSpan
		spanPre := 0
		for _, s := range row.spans {
			if s.end < s.start {
				t.Errorf("%s: run of %s ends at %d before its start %d", what, s.client, s.end, s.start)
			}
			if s.rt {
				rt = append(rt, s)
			} else {
				be = append(be, s)
			}
			if s.preempted {
				spanPre++
				if s.rt {
					t.Errorf("%s: an RT run was preempted", what)
				}
			}
		}
		// the spans are every run, the window's and the others
		if spanPre < row.Preemptions {
			t.Errorf("%s: %d preempted runs traced, %d counted", what, spanPre, row.Preemptions)
		}
		switch row.Policy {
		case PolicyRTOnly:
			if len(be) != 0 || row.BEPerSec != 0 || slices.ContainsFunc(row.Clients, func(c DISBClientRow) bool { return !c.RT }) {
				t.Errorf("rt-only %s ran BE jobs", row.Workload)
			}
			if row.RTDone > 0 && row.RTMeanNorm != 1 {
				t.Errorf("rt-only %s: mean / RT-only = %v", row.Workload, row.RTMeanNorm)
			}
		case PolicySeq:
			all := slices.Clone(row.spans)
			slices.SortFunc(all, func(a, b disbSpan) int { return int(a.start - b.start) })
			for k := 1; k < len(all); k++ {
				if all[k].start < all[k-1].end {
					t.Fatalf("seq %s: run of %s [%d, %d] overlaps %s's [%d, %d]", row.Workload,
						all[k].client, all[k].start, all[k].end, all[k-1].client, all[k-1].start, all[k-1].end)
				}
			}
			if row.Thr > 0 && row.ThrNorm != 1 {
				t.Errorf("seq %s: thr / seq = %v", row.Workload, row.ThrNorm)
			}
		case PolicyReef, PolicyReefPad:
			for _, r := range rt {
				for _, s := range be {
					if s.start > r.start && s.start < r.end {
						t.Fatalf("%s: BE run of %s started at %d inside RT run of %s [%d, %d]",
							what, s.client, s.start, r.client, r.start, r.end)
					}
				}
			}
		}
		if row.Policy != PolicyReef && row.Policy != PolicyReefPad && (spanPre != 0 || row.Preemptions != 0 || row.PreemptN != 0) {
			t.Errorf("%s preempted: %d runs, %d arrivals", what, spanPre, row.PreemptN)
		}
	}
	if len(rep.Restore) != nModels && cfg.RestoreJobs > 0 {
		t.Errorf("restore: %d models, want %d", len(rep.Restore), nModels)
	}
	// every other job is preempted if its run is still going when the
	// preemption comes; a preempted job's output was checked (an error)
	for _, r := range rep.Restore {
		if r.Jobs != cfg.RestoreJobs || r.BaseMs <= 0 || r.Preempted > (r.Jobs+1)/2 || (r.Preempted > 0) != (r.PreemptedMs > 0) {
			t.Errorf("restore %s: %+v", r.Role, r)
		}
	}
	md := rep.Markdown()
	for _, row := range rep.Rows {
		if !strings.Contains(md, fmt.Sprintf("| %s | %s |", row.Workload, row.Policy)) {
			t.Errorf("markdown lacks the row %s %s", row.Workload, row.Policy)
		}
	}
	if _, err := json.Marshal(rep); err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", md)
}

// overlaps counts pairs of runs of a and b that overlap in time.
func overlaps(a, b []disbSpan) int {
	n := 0
	for _, x := range a {
		for _, y := range b {
			if x.start < y.end && y.start < x.end {
				n++
			}
		}
	}
	return n
}

// Misconfigurations are refused.
func TestDISBErrors(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	models := disbEmuModels(t)[:1]
	ctx := context.Background()
	wA := DISBWorkloads()[:1]
	if _, err := RunDISB(ctx, b, models, DISBConfig{Workloads: wA, Policies: []string{"fifo"}, Duration: time.Millisecond}); err == nil {
		t.Error("unknown policy accepted")
	}
	if _, err := RunDISB(ctx, b, models, DISBConfig{Workloads: wA, Policies: []string{PolicySeq}}); err == nil {
		t.Error("zero duration accepted")
	}
	// workload A needs VGG, which models lacks
	if _, err := RunDISB(ctx, b, models, DISBConfig{Workloads: wA, Policies: []string{PolicySeq}, Duration: time.Millisecond}); err == nil ||
		!strings.Contains(err.Error(), "no model for role VGG") {
		t.Errorf("missing role: %v", err)
	}
}

// SetPriority moves an instance to a stream of that priority, keeps its
// outputs and survives SetSMs.
func TestBackendSetPriority(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g, err := zoo.Build("squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	inst := load(t, b, "sq", g, 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(1, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	if err := inst.SetPriority(RTPriority); err != nil {
		t.Fatal(err)
	}
	if p := inst.ln.s.(*emuStream).prio; p != RTPriority || inst.Priority() != RTPriority {
		t.Fatalf("stream priority %d, Priority() %d, want %d", p, inst.Priority(), RTPriority)
	}
	closeTo(t, "after SetPriority", infer(t, b, inst, 1, in), want, 0)
	if err := inst.SetSMs(4); err != nil {
		t.Fatal(err)
	}
	if p := inst.ln.s.(*emuStream).prio; p != RTPriority {
		t.Fatalf("after SetSMs the stream has priority %d", p)
	}
	if err := inst.SetPriority(0); err != nil {
		t.Fatal(err)
	}
	if inst.SMs() != 4 {
		t.Errorf("SetPriority left the partition: %d SMs", inst.SMs())
	}
	closeTo(t, "after SetSMs and SetPriority(0)", infer(t, b, inst, 1, in), want, 0)
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"sluice/orchestrator/inss"
)

// The profiler end to end on two small models (times mean nothing here:
// the test checks what is measured and reported, not how fast): every
// profile has its grid, upload and result lines and a pressure; every
// held-out size and every pair has an observation and a prediction; the
// profiles load into the latency model; the report has its three tables.
func TestProfiler(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("co-location needs two CPUs")
	}
	o := options{device: "cpu", models: []string{"mlp", "squeezenet11"}, size: 32, batches: []int{1, 2, 4}, holdout: []int{3},
		units: 2, reps: 2}
	rep, err := runCPU(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.profiles) != 2 || len(rep.held) != 2*2 || len(rep.pairs) != 4 {
		t.Fatalf("%d profiles, %d held-out sizes, %d pairs", len(rep.profiles), len(rep.held), len(rep.pairs))
	}
	for _, p := range rep.profiles {
		if len(p.Points) != 3*2 || p.Device != "cpu" || p.Capacity != 2 || p.Pressure < 0 || p.Sensitivity < 0 {
			t.Errorf("profile %+v", p)
		}
	}
	for _, h := range rep.held {
		if !(h.observedNs > 0) || !(h.predictedNs > 0) || h.batch != 3 {
			t.Errorf("held out %+v", h)
		}
	}
	for _, p := range rep.pairs {
		if !(p.aloneNs > 0) || !(p.besideNs > 0) || !(p.predictedNs >= p.aloneNs) {
			t.Errorf("pair %+v", p)
		}
	}
	path := filepath.Join(t.TempDir(), "p.json")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := inss.WriteProfiles(f, rep.profiles); err != nil {
		t.Fatal(err)
	}
	f.Close()
	f, _ = os.Open(path)
	back, err := inss.ReadProfiles(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inss.NewModel(back, 0); err != nil {
		t.Fatalf("the profiles do not load: %v", err)
	}
	md := rep.markdown(o)
	for _, want := range []string{"held-out batch sizes", "| mlp | 1 | 3 |", "| squeezenet11 | mlp |", "error without the term", "| mlp |"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in the report:\n%s", want, md)
		}
	}
}

// The cuda device's profiler end to end on the kernel emulator (8 SMs in
// groups of 2): the grid over the distinct SM shares, held-out sizes,
// the probe, pairs on the two halves, profiles the latency model loads.
func TestProfilerEmu(t *testing.T) {
	o := options{device: "emu", models: []string{"mlp", "squeezenet11"}, size: 32, batches: []int{1, 2}, holdout: []int{3},
		units: 2, reps: 1, probeFloats: 1 << 16}
	rep, err := runCUDA(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	// shares 1/8 and 1/4 of 8 SMs both round up to one group of 2
	if len(rep.profiles) != 2 || len(rep.held) != 2*4 || len(rep.pairs) != 4 || !(rep.probeNs > 0) {
		t.Fatalf("%d profiles, %d held-out sizes, %d pairs, probe %v ns", len(rep.profiles), len(rep.held), len(rep.pairs), rep.probeNs)
	}
	for _, p := range rep.profiles {
		var shares []float64
		for _, pt := range p.Points {
			if !slices.Contains(shares, pt.Share) {
				shares = append(shares, pt.Share)
			}
		}
		if len(p.Points) != 4*2 || !slices.Equal(shares, []float64{2, 4, 6, 8}) || p.Device != "cuda" || p.Capacity != 8 ||
			p.Pressure < 0 || p.MemBytes <= 0 {
			t.Errorf("profile %+v (shares %v)", p, shares)
		}
	}
	for _, h := range rep.held {
		if !(h.observedNs > 0) || !(h.predictedNs > 0) {
			t.Errorf("held out %+v", h)
		}
	}
	for _, p := range rep.pairs {
		if !(p.aloneNs > 0) || !(p.besideNs > 0) {
			t.Errorf("pair %+v", p)
		}
	}
	if _, err := inss.NewModel(rep.profiles, 0); err != nil {
		t.Fatalf("the profiles do not load: %v", err)
	}
	md := rep.markdown(o)
	for _, want := range []string{"on the cuda device (the kernel emulator, 8 SMs)", "| model | share (SMs) |", "on half the SMs beside"} {
		if !strings.Contains(md, want) {
			t.Errorf("no %q in the report:\n%s", want, md)
		}
	}
}

// Bad flags: a batch size that is not a positive number.
func TestInts(t *testing.T) {
	if v, err := ints("1, 2,8"); err != nil || len(v) != 3 || v[2] != 8 {
		t.Errorf("ints: %v, %v", v, err)
	}
	for _, bad := range []string{"0", "x", "-2"} {
		if _, err := ints(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

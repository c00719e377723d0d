package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/libml/sched"
	"sluice/libml/zoo"
)

func TestReadTrace(t *testing.T) {
	dir := t.TempDir()
	specs := defaultModels(1)
	write := func(s string) string {
		p := filepath.Join(dir, "t.trace")
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	w, err := readTrace(write("# comment\n10 VGG\n5.5 yolo # inline\n\n20 resnet50\n30 VGG\n"), specs)
	if err != nil {
		t.Fatal(err)
	}
	rt := 0
	for _, c := range w.Clients {
		if c.Class == sched.RT {
			rt += len(c.Trace)
			for i := 1; i < len(c.Trace); i++ {
				if c.Trace[i] < c.Trace[i-1] {
					t.Fatalf("client %s: arrivals not sorted", c.Name)
				}
			}
		}
	}
	if rt != 4 || len(w.Clients) != 3+5 {
		t.Fatalf("%d RT requests in %d clients", rt, len(w.Clients))
	}
	for _, bad := range []string{"10\n", "x VGG\n", "-1 VGG\n", "10 nosuchmodel\n", "# nothing\n"} {
		if _, err := readTrace(write(bad), specs); err == nil {
			t.Fatalf("trace %q accepted", bad)
		} else if !strings.Contains(err.Error(), "t.trace") {
			t.Fatalf("error %q does not name the file", err)
		}
	}
	if _, err := readTrace("tools/disb/testdata/perception.trace", specs); err != nil {
		if _, err2 := readTrace("testdata/perception.trace", specs); err2 != nil {
			t.Fatal(err2)
		}
	}
}

// TestRunWorkload runs a scaled-down workload under reef and seq and
// checks the report's pieces.
func TestRunWorkload(t *testing.T) {
	specs := map[string]modelSpec{
		"VGG":  {"VGG", "squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}},
		"RNET": {"RNET", "resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}},
	}
	w := workload{Name: "A", Clients: []client{
		{Name: "rt0", Role: "VGG", Class: sched.RT, Rate: 0.3},
		{Name: "be0", Role: "RNET", Class: sched.BE},
	}}
	rows := runPolicies(t, specs, w, 400*time.Millisecond, 2, func(p sched.Policy) sched.Config {
		return sched.Config{Policy: p, Units: 2, BEQueues: 1}
	})
	rep := &report{Units: 2, Duration: "400ms", Window: 4, Alpha: 4, Rows: rows, Load: []float64{1}}
	md := markdown(rep)
	if !strings.Contains(md, "| A | reef |") || !strings.Contains(md, "| A | seq |") {
		t.Fatalf("report:\n%s", md)
	}
	svg := plot(rep, []string{"reef", "seq"})
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "</svg>") {
		t.Fatal("bad svg")
	}
}

// TestRunWorkloadCUDAEmu runs a scaled-down workload through the same
// scheduler on the cuda device (-device cuda -cuda emu: the kernel
// emulator) under reef and seq, and checks the report names the device.
func TestRunWorkloadCUDAEmu(t *testing.T) {
	dev, err := openDevice("cuda", "emu", 0, 4, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dev.close()
	specs := map[string]modelSpec{
		"BERT": {"BERT", "bert", zoo.Options{Layers: 2, SeqLen: 16, Hidden: 64, Heads: 2, FF: 128, Seed: 1}},
		"VGG":  {"VGG", "squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}},
	}
	w := workload{Name: "A", Clients: []client{
		{Name: "rt0", Role: "BERT", Class: sched.RT, Rate: 0.3},
		{Name: "be0", Role: "VGG", Class: sched.BE},
	}}
	rows := runPolicies(t, specs, w, 3*time.Second, 1, func(p sched.Policy) sched.Config {
		cfg := dev.config(p)
		cfg.BEQueues = 1
		return cfg
	})
	rep := &report{Device: dev.label, Units: dev.units(), Duration: "3s", Window: 4, Alpha: 4, Rows: rows, Load: []float64{1}}
	if md := markdown(rep); !strings.Contains(md, "DISB on the cuda-emu device") || !strings.Contains(md, "| A | reef |") {
		t.Fatalf("report:\n%s", md)
	}
}

// runPolicies runs workload w of models specs under reef and seq, on
// schedulers configured by cfg, for dur after a warm-up, and checks each
// row: RT requests done, a throughput, no wrong output.
func runPolicies(t *testing.T, specs map[string]modelSpec, w workload, dur time.Duration, profileRuns int, cfg func(sched.Policy) sched.Config) []*row {
	t.Helper()
	var rows []*row
	for _, p := range []sched.Policy{sched.PolicyREEF, sched.PolicySeq} {
		s, err := sched.New(cfg(p))
		if err != nil {
			t.Fatal(err)
		}
		ms := map[string]*sched.Model{}
		thr, alone := map[string]float64{}, map[string]float64{}
		for r, spec := range specs {
			g, err := zoo.Build(spec.Zoo, spec.Opt)
			if err != nil {
				t.Fatal(err)
			}
			if ms[r], err = s.Load(r, g, sched.ModelOptions{ProfileRuns: profileRuns}); err != nil {
				t.Fatal(err)
			}
			thr[r], alone[r] = 1e9/ms[r].StandaloneNs(), ms[r].StandaloneNs()
		}
		res := runWorkload(s, w, ms, thr, alone, false, dur/4, dur, 4, 1)
		st := s.Stats()
		dev := s.DeviceName()
		s.Close()
		r := summarize("A", string(p), res, st, 1, dur)
		if r.RTCount == 0 || r.RTMeanMs <= 0 || r.Thr <= 0 || r.Wrong != 0 {
			// which client's jobs differed from the model alone, and how
			// many of its jobs there were
			var who []string
			for _, c := range res {
				who = append(who, fmt.Sprintf("%s (%s, %s): %d wrong, %d done", c.Name, c.Role, c.Class, c.Wrong, c.Done))
			}
			t.Fatalf("%s on %s: %+v; clients: %s", p, dev, r, strings.Join(who, "; "))
		}
		rows = append(rows, r)
	}
	return rows
}

// Round-by-round ratios, and a disturbed RT-only baseline: a policy with
// BE work faster than RT-only in a round flags the workload, and the
// report prints no latency ratio built on that baseline.
func TestRoundRatios(t *testing.T) {
	rows := func() map[string]*row {
		return map[string]*row{"rt-only": {Workload: "A", Policy: "rt-only"}, "reef": {Workload: "A", Policy: "reef"}, "seq": {Workload: "A", Policy: "seq"}}
	}
	calm := map[string][]roundStat{
		"rt-only": {{10e6, 0.5}, {12e6, 0.5}},
		"reef":    {{10.5e6, 1.1}, {12.6e6, 1.0}},
		"seq":     {{15e6, 1.0}, {18e6, 1.0}},
	}
	byPol := rows()
	if roundRatios(byPol, calm) {
		t.Fatal("a calm run flagged as disturbed")
	}
	r := byPol["reef"]
	if len(r.RTMeanNormRounds) != 2 || math.Abs(r.RTMeanNormRounds[0]-1.05) > 1e-9 || math.Abs(r.ThrNormRounds[0]-1.1) > 1e-9 {
		t.Fatalf("reef's rounds: %v, %v", r.RTMeanNormRounds, r.ThrNormRounds)
	}
	if got := spread(r.RTMeanNormRounds); got != " (1.05-1.05)" {
		t.Fatalf("spread %q", got)
	}
	// round 2's RT-only ran slow: reef at 0.6x of it
	slow := map[string][]roundStat{
		"rt-only": {{10e6, 0.5}, {20e6, 0.5}},
		"reef":    {{10.5e6, 1.1}, {12e6, 1.0}},
		"seq":     {{15e6, 1.0}, {18e6, 1.0}},
	}
	byPol = rows()
	if !roundRatios(byPol, slow) {
		t.Fatal("a baseline slower than reef in a round was not flagged")
	}
	for _, x := range byPol {
		x.Disturbed = true
	}
	md := markdown(&report{Rows: []*row{byPol["rt-only"], byPol["reef"], byPol["seq"]}})
	if !strings.Contains(md, "| A | reef | – | – | baseline disturbed | baseline disturbed |") {
		t.Fatalf("report:\n%s", md)
	}
}

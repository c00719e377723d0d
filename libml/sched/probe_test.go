package sched

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"sluice/libml/kprof"
	"sluice/libml/zoo"
)

// TestPreemptProbe is a probe, not a check: with SCHED_PROBE=1 it runs a
// closed-loop BE stream of SCHED_PROBE_BE (a zoo model at 32x32: vgg16
// by default) under reef while RT jobs (resnet18) arrive at random
// moments, and prints the preemption latency's components (the preempt
// call to the preempted stream's idle moment, and to the RT job's first
// kernel), per kernel the BE job was in. It prints, asserts nothing.
// SCHED_PROBE_CHECK_NS sets Config.PreemptCheckNs.
func TestPreemptProbe(t *testing.T) {
	if os.Getenv("SCHED_PROBE") == "" {
		t.Skip("a probe: set SCHED_PROBE=1")
	}
	beName := os.Getenv("SCHED_PROBE_BE")
	if beName == "" {
		beName = "vgg16"
	}
	cfg := Config{Units: 2, UnitNice: 5, PadBudgetMBs: -1}
	if v := os.Getenv("SCHED_PROBE_CHECK_NS"); v != "" {
		fmt.Sscan(v, &cfg.PreemptCheckNs) // the time between checks asked of a BE block
	}
	s := newSched(t, cfg)
	gb, err := zoo.Build(beName, zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	be, err := s.Load(beName, gb, ModelOptions{ProfileRuns: 5})
	if err != nil {
		t.Fatal(err)
	}
	rt := load(t, s, "resnet", ModelOptions{})
	var mu sync.Mutex
	var idle, start, tot, ret []int64
	perK := map[int][]int64{}
	var lastIdx int
	debugRestore = func(m *Model, idx int, l *lane) {
		if m == be {
			lastIdx = idx
		}
	}
	t0s := map[int64]bool{}
	debugPreempt = func(t0, i, r int64) {
		mu.Lock()
		t0s[t0] = true
		idle = append(idle, i)
		start = append(start, r)
		tot = append(tot, max(i, r))
		perK[lastIdx] = append(perK[lastIdx], i)
		mu.Unlock()
	}
	defer func() { debugPreempt, debugRestore = nil, nil }()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for seed := uint64(1); ; seed++ {
			select {
			case <-stop:
				return
			default:
			}
			j := job(be, BE, 0, seed)
			if err := s.Submit(j); err != nil {
				t.Error(err)
				return
			}
			j.Wait()
		}
	}()
	n := 300
	if v := os.Getenv("SCHED_PROBE_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < n; i++ {
		time.Sleep(time.Duration(3e6 + rng.Int63n(4e6)))
		j := job(rt, RT, 0, uint64(i))
		if err := s.Submit(j); err != nil {
			t.Fatal(err)
		}
		tr := Now()
		j.Wait()
		mu.Lock()
		for t0 := range t0s {
			if t0 < tr && tr-t0 < 1e7 {
				ret = append(ret, tr-t0)
			}
			delete(t0s, t0)
		}
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	pct := func(v []int64) string {
		if len(v) == 0 {
			return "-"
		}
		v = append([]int64(nil), v...)
		sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
		q := func(p float64) float64 { return float64(v[min(len(v)-1, int(p*float64(len(v))))]) / 1e3 }
		return fmt.Sprintf("n %d p50 %.1f p90 %.1f p99 %.1f max %.1f us", len(v), q(0.5), q(0.9), q(0.99), q(1))
	}
	st := s.Stats()
	t.Logf("preempt (stats): %s", pct(st.PreemptNs))
	t.Logf("jobs: %d BE, %d RT; BE kernel time alone %.2f ms", st.Jobs[BE], st.Jobs[RT], be.StandaloneNs()/1e6)
	t.Logf("idle:     %s", pct(idle))
	t.Logf("rt start: %s", pct(start))
	t.Logf("max:      %s", pct(tot))
	t.Logf("submit returned: %s", pct(ret))
	var ks []int
	for k := range perK {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	for _, k := range ks {
		if k < 0 || k >= len(be.prVer) {
			t.Logf("kernel %2d (none started): idle %s", k, pct(perK[k]))
			continue
		}
		vp := be.prof.Kernels[k].Versions[be.prVer[k]]
		t.Logf("kernel %2d %-8s ver %d block %.1f us: idle %s", k, be.prog.Kernels[k].Op, be.prVer[k], vp.BlockNs/1e3, pct(perK[k]))
	}
}

// TestRestoreProbe is a probe, not a check: with SCHED_PROBE=1 it runs
// BE jobs of resnet18 (DISB's YOLO) and BERT alone under reef, each job
// either undisturbed, or with the probing thread waking at a random
// moment inside it and doing nothing (the wake's own cost on two cores),
// or waking and calling PreemptRestore, interleaved; it prints the median
// job times (start to finish) and restore gaps.
func TestRestoreProbe(t *testing.T) {
	if os.Getenv("SCHED_PROBE") == "" {
		t.Skip("a probe: set SCHED_PROBE=1")
	}
	n := 150
	if v := os.Getenv("SCHED_PROBE_N"); v != "" {
		fmt.Sscan(v, &n)
	}
	for _, key := range []string{"resnet", "bert"} {
		s := newSched(t, Config{Units: 2, UnitNice: 5, BEQueues: 1, NoPadding: true, PadBudgetMBs: -1, PinUnits: os.Getenv("SCHED_PROBE_PIN") != ""})
		m := load(t, s, key, ModelOptions{})
		rng := rand.New(rand.NewSource(2))
		var times [3][]int64
		var gaps []int64
		alone := m.StandaloneNs()
		for i := 0; i < 3*n+6; i++ {
			j := job(m, BE, 0, 1)
			if err := s.Submit(j); err != nil {
				t.Fatal(err)
			}
			mode := i % 3
			if mode > 0 {
				time.Sleep(time.Duration(rng.Float64() * 0.9 * alone))
				if mode == 2 {
					s.PreemptRestore()
				}
			}
			j.Wait()
			if i < 6 || (mode == 2 && j.Preemptions == 0) {
				continue
			}
			times[mode] = append(times[mode], j.Finished-j.Started)
			if mode == 2 {
				gaps = append(gaps, j.RestoreGapNs)
			}
		}
		med := func(v []int64) float64 {
			if len(v) == 0 {
				return 0
			}
			v = append([]int64(nil), v...)
			sort.Slice(v, func(a, b int) bool { return v[a] < v[b] })
			return float64(v[len(v)/2]) / 1e3
		}
		b := med(times[0])
		t.Logf("%s: undisturbed %.1f us; woken %.1f us (%+.1f%%); preempted %.1f us (%+.1f%%, n %d), gap %.1f us",
			key, b, med(times[1]), (med(times[1])/b-1)*100, med(times[2]), (med(times[2])/b-1)*100, len(times[2]), med(gaps))
	}
}

// TestChecksCostProbe is a probe, not a check: with SCHED_PROBE=1 it runs
// BE jobs of VGG-16 and ResNet-50 (32x32) alone under reef with
// PreemptCheckNs off, 20 us and 10 us (schedulers in turn, job by job)
// and prints the median job times: what the added in-block checks cost.
func TestChecksCostProbe(t *testing.T) {
	if os.Getenv("SCHED_PROBE") == "" {
		t.Skip("a probe: set SCHED_PROBE=1")
	}
	checks := []float64{-1, 20e3, 10e3}
	for _, name := range []string{"vgg16", "resnet50"} {
		g, err := zoo.Build(name, zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 5})
		if err != nil {
			t.Fatal(err)
		}
		var ss []*Scheduler
		var ms []*Model
		var prof *kprof.Model
		for _, c := range checks {
			s := newSched(t, Config{Units: 2, UnitNice: 5, BEQueues: 1, NoPadding: true, PadBudgetMBs: -1, PreemptCheckNs: c})
			m, err := s.Load(name, g, ModelOptions{ProfileRuns: 5, Profile: prof})
			if err != nil {
				t.Fatal(err)
			}
			prof = m.Profile()
			ss, ms = append(ss, s), append(ms, m)
		}
		times := make([][]int64, len(checks))
		for i := 0; i < 40*len(checks); i++ {
			v := i % len(checks)
			j := job(ms[v], BE, 0, 1)
			if err := ss[v].Submit(j); err != nil {
				t.Fatal(err)
			}
			j.Wait()
			if i >= 2*len(checks) {
				times[v] = append(times[v], j.Finished-j.Started)
			}
		}
		for v, c := range checks {
			x := append([]int64(nil), times[v]...)
			sort.Slice(x, func(a, b int) bool { return x[a] < x[b] })
			n := 0
			for _, k := range ms[v].prChecks {
				if k > 1 {
					n++
				}
			}
			t.Logf("%s check %.0f us: %d kernels with added checks, median job %.0f us", name, c/1e3, n, float64(x[len(x)/2])/1e3)
		}
		for _, s := range ss {
			s.Close()
		}
	}
}

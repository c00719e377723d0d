package sched

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"sync"
	"testing"
	"time"

	"sluice/libml/zoo"
)

// TestPreemptProbe is a probe, not a check: with SCHED_PROBE=1 it runs a
// closed-loop BE stream of SCHED_PROBE_BE (a zoo model at 32x32: vgg16
// by default) under reef while RT jobs (resnet18) arrive at random
// moments, and prints the preemption latency's components (the preempt
// call to the preempted stream's idle moment, and to the RT job's first
// kernel), per kernel the BE job was in. It prints, asserts nothing.
func TestPreemptProbe(t *testing.T) {
	if os.Getenv("SCHED_PROBE") == "" {
		t.Skip("a probe: set SCHED_PROBE=1")
	}
	beName := os.Getenv("SCHED_PROBE_BE")
	if beName == "" {
		beName = "vgg16"
	}
	s := newSched(t, Config{Units: 2, UnitNice: 5, PadBudgetMBs: -1})
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

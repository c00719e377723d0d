package ifmanager

import (
	"math"
	"testing"
	"time"
)

func TestMaxMinFair(t *testing.T) {
	for _, tc := range []struct {
		cap     float64
		demands []float64
		want    []float64
	}{
		{1, []float64{0.3, 0.3}, []float64{0.5, 0.5}},                    // under-used: spread by demand
		{1, []float64{0.2, 0.9}, []float64{0.2, 0.8}},                    // small one satisfied, big one gets the rest
		{1, []float64{0.6, 0.6, 0.6}, []float64{1. / 3, 1. / 3, 1. / 3}}, // equal weights, all unmet
		{1, []float64{0.1, 0.6, 1.2}, []float64{0.1, 0.9 * 0.6 / 1.8, 0.9 * 1.2 / 1.8}},
		{1, []float64{0, 0.5}, []float64{0, 1}},
	} {
		got := MaxMinFair(tc.cap, tc.demands)
		var sum float64
		for i := range got {
			sum += got[i]
			if math.Abs(got[i]-tc.want[i]) > 1e-9 {
				t.Errorf("MaxMinFair(%v, %v) = %v, want %v", tc.cap, tc.demands, got, tc.want)
				break
			}
		}
		if sum > tc.cap+1e-9 {
			t.Errorf("allocated %v of %v", sum, tc.cap)
		}
	}
}

func TestUnits(t *testing.T) {
	for _, tc := range []struct {
		shares []float64
		total  int
		want   []int
	}{
		{[]float64{0.5, 0.5}, 2, []int{1, 1}},
		{[]float64{0.75, 0.25}, 8, []int{6, 2}},
		{[]float64{0.9, 0.1}, 4, []int{3, 1}},
		{[]float64{0.2, 0.3, 0.5}, 2, []int{1, 1, 1}},
		{[]float64{1}, 16, []int{16}},
	} {
		got := Units(tc.shares, tc.total)
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("Units(%v, %d) = %v, want %v", tc.shares, tc.total, got, tc.want)
				break
			}
		}
	}
	m := UnitMasks([]int{3, 1}, 4)
	if m[0] != 0b0111 || m[1] != 0b1000 {
		t.Errorf("UnitMasks = %b", m)
	}
}

func TestShareTunerAlgorithm1(t *testing.T) {
	now := time.Unix(0, 0)
	// Under-provisioned: latency over the SLO and capacity under the
	// arrival rate -> grow.
	tu := NewShareTuner(50 * time.Millisecond)
	for i := 0; i < 5; i++ {
		tu.ObserveBatch(2, 65*time.Millisecond, 130*time.Millisecond) // 15 req/s
		tu.ObserveArrivals(35, time.Second)
	}
	s, ok := tu.Propose(0.3, now)
	if !ok || s <= 0.3 {
		t.Fatalf("under-provisioned IF: proposal %v ok=%v, want growth", s, ok)
	}
	// held down right after a change
	if _, ok := tu.Propose(s, now.Add(100*time.Millisecond)); ok {
		t.Fatal("changed again within the hold-down")
	}
	// Over-provisioned: fast and idle -> shrink.
	tu = NewShareTuner(50 * time.Millisecond)
	for i := 0; i < 5; i++ {
		tu.ObserveBatch(4, 10*time.Millisecond, 8*time.Millisecond) // 500 req/s
		tu.ObserveArrivals(35, time.Second)
	}
	s, ok = tu.Propose(0.3, now)
	if !ok || s >= 0.3 {
		t.Fatalf("over-provisioned IF: proposal %v ok=%v, want a smaller share", s, ok)
	}
	// Balanced within 5%: no change.
	tu = NewShareTuner(50 * time.Millisecond)
	for i := 0; i < 5; i++ {
		tu.ObserveBatch(1, 49*time.Millisecond, 28*time.Millisecond) // ~35.7 req/s
		tu.ObserveArrivals(35, time.Second)
	}
	if s, ok := tu.Propose(0.3, now); ok {
		t.Fatalf("balanced IF changed to %v", s)
	}
}

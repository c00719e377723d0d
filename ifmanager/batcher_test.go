package ifmanager

import (
	"math/rand/v2"
	"testing"
	"time"
)

// linearModel is a batch latency model: fixed + perItem·b, with optional
// multiplicative noise.
type linearModel struct {
	fixed, perItem time.Duration
	noise          float64
}

func (m linearModel) latency(b int, rng *rand.Rand) time.Duration {
	l := float64(m.fixed + time.Duration(b)*m.perItem)
	if m.noise > 0 {
		l *= 1 + m.noise*(2*rng.Float64()-1)
	}
	return time.Duration(l)
}

// best is the largest batch whose latency meets slo.
func (m linearModel) best(slo time.Duration, max int) int {
	b := 1
	for b < max && m.fixed+time.Duration(b+1)*m.perItem <= slo {
		b++
	}
	return b
}

// converge drives p under saturation (every batch is full) in virtual time
// and returns the virtual time until the limit enters [lo, hi] and stays
// there for the rest of the run, or -1.
func converge(p BatchPolicy, m linearModel, lo, hi, batches int, seed uint64) (time.Duration, int) {
	settled, _, limit := convergeFirst(p, m, lo, hi, batches, seed)
	return settled, limit
}

// convergeFirst also returns when the limit first reached the band (-1 if
// never).
func convergeFirst(p BatchPolicy, m linearModel, lo, hi, batches int, seed uint64) (settled, first time.Duration, limit int) {
	rng := rand.New(rand.NewPCG(seed, 1))
	var now, enteredAt time.Duration
	entered := -1
	first = -1
	for i := 0; i < batches; i++ {
		b := p.Limit()
		in := b >= lo && b <= hi
		if in && first < 0 {
			first = now
		}
		switch {
		case in && entered < 0:
			entered, enteredAt = i, now
		case !in:
			entered = -1
		}
		l := m.latency(b, rng)
		now += l
		p.Observe(b, l)
	}
	if entered < 0 {
		return -1, first, p.Limit()
	}
	return enteredAt, first, p.Limit()
}

func TestSLABConvergesFasterThanAIMD(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    linearModel
		slo  time.Duration
	}{
		{"resnet18-like", linearModel{fixed: 4 * time.Millisecond, perItem: 9 * time.Millisecond}, 100 * time.Millisecond},
		{"mobilenet-like", linearModel{fixed: 2 * time.Millisecond, perItem: 1500 * time.Microsecond}, 25 * time.Millisecond},
		{"vgg-like-50ms", linearModel{fixed: 3 * time.Millisecond, perItem: 2 * time.Millisecond}, 50 * time.Millisecond},
		{"light-100ms", linearModel{fixed: 1 * time.Millisecond, perItem: 700 * time.Microsecond}, 100 * time.Millisecond},
		{"noisy", linearModel{fixed: 2 * time.Millisecond, perItem: 1500 * time.Microsecond, noise: 0.05}, 50 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const max = 256
			best := tc.m.best(tc.slo, max)
			s := NewSLAB(tc.slo, 1, max)
			s.Margin = 0.1 + tc.m.noise
			lo := tc.m.best(time.Duration(float64(tc.slo)*(1-s.Margin-tc.m.noise)), max)
			ts, fs, ls := convergeFirst(s, tc.m, lo, best, 400, 1)
			ta, fa, la := convergeFirst(NewAIMD(tc.slo, 1, max), tc.m, lo, best, 4000, 1)
			t.Logf("best batch %d (band %d..%d): SLAB first in band after %v, settled after %v (limit %d); AIMD first %v, settled %v (limit %d; -1ns: never settles)",
				best, lo, best, fs, ts, ls, fa, ta, la)
			if ts < 0 || ts > 500*time.Millisecond {
				t.Fatalf("SLAB did not settle in the band %d..%d within 500 ms of virtual time (took %v, limit %d)", lo, best, ts, ls)
			}
			if fa >= 0 && fa <= fs {
				t.Fatalf("AIMD reached the band (%v) no later than SLAB (%v)", fa, fs)
			}
		})
	}
}

func TestSLABReadaptsWhenLatencyChanges(t *testing.T) {
	slo := 50 * time.Millisecond
	s := NewSLAB(slo, 1, 128)
	fast := linearModel{fixed: 2 * time.Millisecond, perItem: time.Millisecond}
	slow := linearModel{fixed: 2 * time.Millisecond, perItem: 4 * time.Millisecond} // a smaller share
	if _, l := converge(s, fast, fast.best(45*time.Millisecond, 128)-1, fast.best(slo, 128), 100, 1); l < 40 {
		t.Fatalf("fast phase: limit %d", l)
	}
	ts, l := converge(s, slow, slow.best(40*time.Millisecond, 128), slow.best(slo, 128), 100, 2)
	if ts < 0 || ts > 500*time.Millisecond {
		t.Fatalf("after slowing down: did not re-settle within 500 ms (took %v, limit %d)", ts, l)
	}
	ts, l = converge(s, fast, fast.best(40*time.Millisecond, 128), fast.best(slo, 128), 100, 3)
	if ts < 0 || ts > 500*time.Millisecond {
		t.Fatalf("after speeding up: did not re-settle within 500 ms (took %v, limit %d)", ts, l)
	}
}

func TestSLABReportsUnderProvisioning(t *testing.T) {
	calls := 0
	s := NewSLAB(10*time.Millisecond, 1, 8)
	s.UnderProvisioned = func() { calls++ }
	for i := 0; i < 4; i++ {
		s.Observe(1, 20*time.Millisecond)
	}
	if calls != 0 {
		t.Fatal("reported before five misses")
	}
	s.Observe(1, 20*time.Millisecond)
	s.Observe(1, 20*time.Millisecond)
	if calls != 1 || s.Misses() != 6 {
		t.Fatalf("calls %d misses %d, want one report", calls, s.Misses())
	}
	s.Observe(1, 5*time.Millisecond)
	if s.Misses() != 0 {
		t.Fatal("a met SLO did not reset the miss count")
	}
}

func TestSLABBoundsAndShortBatches(t *testing.T) {
	s := NewSLAB(100*time.Millisecond, 2, 4)
	if s.Limit() != 2 {
		t.Fatalf("start %d, want the minimum 2", s.Limit())
	}
	s.Observe(1, time.Millisecond) // short batch: no growth
	if s.Limit() != 2 {
		t.Fatalf("grew on a short batch: %d", s.Limit())
	}
	for i := 0; i < 10; i++ {
		s.Observe(s.Limit(), time.Millisecond)
	}
	if s.Limit() != 4 {
		t.Fatalf("limit %d, want the maximum 4", s.Limit())
	}
	s.SetBounds(1, 3)
	if s.Limit() != 3 {
		t.Fatalf("limit %d after lowering the bound, want 3", s.Limit())
	}
	s.SetSLO(0)
	if s.Limit() != 3 {
		t.Fatal("a zero SLO must pin the limit at the maximum")
	}
}

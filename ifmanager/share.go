package ifmanager

import (
	"math"
	"sort"
	"time"
)

// ShareTuner is GSLICE's self-tuning resource share for one IF
// (Algorithm 1): from EWMA latency and throughput against the SLO and the
// arrival rate it proposes a new share, in proportion to the larger of the
// two relative residuals. Changes under Threshold are ignored, and after a
// change the tuner holds down for HoldDown so the swap can take effect
// before it is judged.
type ShareTuner struct {
	SLO       time.Duration
	Threshold float64       // relative change ignored below this (default 0.05)
	HoldDown  time.Duration // minimum time between changes (default 1 s)
	Alpha     float64       // EWMA weight of a new sample (default 0.2)
	MinShare  float64       // floor of a proposal (default 0.01)

	lat, thr   float64 // EWMA batch latency (ns) and capacity (requests/s)
	arrivals   float64 // EWMA arrival rate (requests/s)
	samples    int
	lastChange time.Time
}

// NewShareTuner returns a tuner with GSLICE's defaults.
func NewShareTuner(slo time.Duration) *ShareTuner {
	return &ShareTuner{SLO: slo, Threshold: 0.05, HoldDown: time.Second, Alpha: 0.2, MinShare: 0.01}
}

func (t *ShareTuner) ewma(old, v float64) float64 {
	if t.samples == 0 {
		return v
	}
	return old + t.Alpha*(v-old)
}

// ObserveBatch records a batch of n requests whose oldest took latency from
// arrival to result and which computed for compute: the IF's capacity at its
// current share is n/compute requests per second.
func (t *ShareTuner) ObserveBatch(n int, latency, compute time.Duration) {
	if n <= 0 || compute <= 0 {
		return
	}
	t.lat = t.ewma(t.lat, float64(latency))
	t.thr = t.ewma(t.thr, float64(n)/compute.Seconds())
	t.samples++
}

// ObserveArrivals records the arrival rate over the last window.
func (t *ShareTuner) ObserveArrivals(count int, window time.Duration) {
	if window <= 0 {
		return
	}
	r := float64(count) / window.Seconds()
	if t.arrivals == 0 {
		t.arrivals = r
		return
	}
	t.arrivals += t.Alpha * (r - t.arrivals)
}

// Estimates returns the EWMA latency, capacity and arrival rate.
func (t *ShareTuner) Estimates() (latency time.Duration, capacity, arrivals float64) {
	return time.Duration(t.lat), t.thr, t.arrivals
}

// Propose returns the share the IF should have, given its current share, and
// whether it differs from current by more than the threshold (and the
// hold-down has passed).
func (t *ShareTuner) Propose(current float64, now time.Time) (float64, bool) {
	if t.samples < 3 || t.SLO <= 0 || t.lat <= 0 || t.thr <= 0 {
		return current, false
	}
	if !t.lastChange.IsZero() && now.Sub(t.lastChange) < t.HoldDown {
		return current, false
	}
	slo := float64(t.SLO)
	residualL := slo - t.lat
	residualT := t.thr - t.arrivals
	diffL := residualL / slo
	diffT := 1.0
	if t.arrivals > 0 {
		diffT = residualT / t.arrivals
	}
	// Inside the band on both counts: leave it.
	if math.Abs(diffL) < t.Threshold && math.Abs(diffT) < t.Threshold {
		return current, false
	}
	change := math.Max(math.Abs(residualL)/t.lat, math.Abs(residualT)/t.thr)
	next := current
	switch {
	case residualL < 0 || residualT < 0:
		next = current * (1 + change)
	case diffL > t.Threshold && diffT > t.Threshold:
		next = current * (1 - math.Min(change, 0.5)) // give back at most half at once
	}
	next = math.Min(1, math.Max(t.MinShare, next))
	if math.Abs(next-current) < t.Threshold*math.Max(current, t.MinShare) {
		return current, false
	}
	t.lastChange = now
	return next, true
}

// MaxMinFair divides capacity among demands by max-min fairness, weighted
// as GSLICE §3.2.3 says: the smallest demands are met first; when what is
// left cannot meet any remaining demand with an equal share, the unmet IFs
// split it in proportion to their demands. No one gets more than its demand
// while another's is unmet; capacity no one asked for is spread in
// proportion to demand so it does not sit idle.
func MaxMinFair(capacity float64, demands []float64) []float64 {
	alloc := make([]float64, len(demands))
	if capacity <= 0 || len(demands) == 0 {
		return alloc
	}
	left := capacity
	active := make([]int, 0, len(demands))
	for i, d := range demands {
		if d > 0 {
			active = append(active, i)
		}
	}
	for len(active) > 0 && left > 1e-12 {
		// Smallest demands first: everyone whose unmet demand fits an
		// equal share of what is left is satisfied.
		fair := left / float64(len(active))
		var next []int
		for _, i := range active {
			if need := demands[i] - alloc[i]; need <= fair+1e-12 {
				alloc[i] += need
				left -= need
				continue
			}
			next = append(next, i)
		}
		if len(next) == len(active) {
			// No one fits: the unmet split the rest by weight (their
			// demand).
			var w float64
			for _, i := range next {
				w += demands[i]
			}
			for _, i := range next {
				alloc[i] += left * demands[i] / w
			}
			left = 0
			next = nil
		}
		active = next
	}
	if left > 1e-12 {
		var w float64
		for _, d := range demands {
			w += math.Max(d, 0)
		}
		for i, d := range demands {
			if w > 0 && d > 0 {
				alloc[i] += left * d / w
			}
		}
	}
	return alloc
}

// Units turns shares (fractions of the whole) into whole units out of
// total: every IF gets at least one unit, the rest go by largest remainder.
// With more IFs than units, units are shared (IFs are given the same units
// round robin).
func Units(shares []float64, total int) []int {
	n := len(shares)
	out := make([]int, n)
	if n == 0 || total <= 0 {
		return out
	}
	if n >= total {
		for i := range out {
			out[i] = 1
		}
		return out
	}
	var sum float64
	for _, s := range shares {
		sum += math.Max(s, 0)
	}
	spare := total - n // one each first
	type rem struct {
		i int
		r float64
	}
	rs := make([]rem, n)
	used := 0
	for i, s := range shares {
		want := 0.0
		if sum > 0 {
			want = math.Max(s, 0) / sum * float64(total)
		}
		extra := math.Max(0, want-1)
		k := int(math.Floor(extra))
		if used+k > spare {
			k = spare - used
		}
		out[i] = 1 + k
		used += k
		rs[i] = rem{i, extra - float64(k)}
	}
	sort.SliceStable(rs, func(a, b int) bool { return rs[a].r > rs[b].r })
	for j := 0; used < spare; j = (j + 1) % n {
		out[rs[j].i]++
		used++
	}
	return out
}

// UnitMasks lays out unit counts as disjoint contiguous bit masks over
// total units (shared round robin when there are more IFs than units).
func UnitMasks(counts []int, total int) []uint64 {
	masks := make([]uint64, len(counts))
	next := 0
	for i, c := range counts {
		for k := 0; k < c; k++ {
			masks[i] |= 1 << uint((next)%total)
			next++
		}
	}
	return masks
}

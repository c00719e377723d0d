package ifmanager

import (
	"math"
	"time"
)

// BatchPolicy decides how many queued requests the next batch may take. The
// IF calls Limit before forming a batch and Observe after running it.
type BatchPolicy interface {
	// Limit is the largest batch to form now.
	Limit() int
	// Observe reports a finished batch of n requests whose oldest request
	// waited and ran for latency in total (arrival to result).
	Observe(n int, latency time.Duration)
	// SetBounds changes the smallest and largest limits.
	SetBounds(min, max int)
	// SetSLO changes the latency objective.
	SetSLO(slo time.Duration)
}

// SLAB is GSLICE's self-learning adaptive batching (§3.3.1): after each
// batch it moves the batch limit in proportion to the current limit and
// the SLO headroom the batch left, so it reaches the largest batch that
// meets the SLO in a few batches instead of one step at a time.
//
// With latency L for a batch of n and objective S (less a safety margin),
// the limit becomes n·S/L when the batch missed, and grows by
// limit·(S−L)/S (at least 1, at most doubling) when the batch was full and
// left headroom. Growth needs a full batch: a short batch says nothing
// about a bigger one.
type SLAB struct {
	slo      time.Duration
	min, max int
	limit    int
	// Margin is the fraction of the SLO kept in reserve (default 0.1): the
	// target latency is SLO·(1−Margin).
	Margin float64
	// misses counts consecutive SLO misses at batch 1.
	misses int
	// UnderProvisioned is called (from the IF's worker) when the IF missed
	// its SLO at batch 1 five times in a row.
	UnderProvisioned func()
	underReported    bool
}

// NewSLAB starts at batch 1.
func NewSLAB(slo time.Duration, min, max int) *SLAB {
	s := &SLAB{Margin: 0.1}
	s.SetBounds(min, max)
	s.SetSLO(slo)
	s.limit = s.min
	return s
}

// Limit implements BatchPolicy.
func (s *SLAB) Limit() int { return s.limit }

// SetBounds implements BatchPolicy.
func (s *SLAB) SetBounds(min, max int) {
	s.min, s.max = max1(min), max1(max)
	if s.min > s.max {
		s.min = s.max
	}
	s.limit = clampInt(s.limit, s.min, s.max)
}

// SetSLO implements BatchPolicy. A zero SLO turns adaptation off: the
// limit stays at the maximum.
func (s *SLAB) SetSLO(slo time.Duration) {
	s.slo = slo
	if slo <= 0 {
		s.limit = s.max
	}
}

// Observe implements BatchPolicy.
func (s *SLAB) Observe(n int, latency time.Duration) {
	if s.slo <= 0 || n <= 0 || latency <= 0 {
		return
	}
	target := float64(s.slo) * (1 - s.Margin)
	l := float64(latency)
	if latency > s.slo {
		if n == 1 {
			s.misses++
			if s.misses >= 5 && !s.underReported {
				s.underReported = true
				if s.UnderProvisioned != nil {
					s.UnderProvisioned()
				}
			}
		} else {
			s.misses = 0
		}
		// shrink in proportion: the batch that fits the target
		s.limit = clampInt(int(math.Floor(float64(n)*target/l)), s.min, s.max)
		return
	}
	s.misses = 0
	s.underReported = false
	if n < s.limit || l >= target {
		return // a short batch, or no headroom beyond the margin
	}
	head := (target - l) / target
	step := int(math.Floor(float64(s.limit) * head * target / l))
	step = clampInt(step, 1, s.limit) // at most double
	s.limit = clampInt(s.limit+step, s.min, s.max)
}

// Misses is the number of consecutive SLO misses at batch 1.
func (s *SLAB) Misses() int { return s.misses }

// AIMD is Clipper's additive-increase, multiplicative-decrease batcher: one
// more per batch that met the SLO, 10% less after a miss. It is the
// baseline SLAB is compared against.
type AIMD struct {
	slo      time.Duration
	min, max int
	limit    int
	// Decrease is the multiplicative backoff (default 0.9).
	Decrease float64
}

// NewAIMD starts at batch 1.
func NewAIMD(slo time.Duration, min, max int) *AIMD {
	a := &AIMD{Decrease: 0.9}
	a.SetBounds(min, max)
	a.slo = slo
	a.limit = a.min
	return a
}

// Limit implements BatchPolicy.
func (a *AIMD) Limit() int { return a.limit }

// SetBounds implements BatchPolicy.
func (a *AIMD) SetBounds(min, max int) {
	a.min, a.max = max1(min), max1(max)
	if a.min > a.max {
		a.min = a.max
	}
	a.limit = clampInt(a.limit, a.min, a.max)
}

// SetSLO implements BatchPolicy.
func (a *AIMD) SetSLO(slo time.Duration) { a.slo = slo }

// Observe implements BatchPolicy.
func (a *AIMD) Observe(n int, latency time.Duration) {
	if a.slo <= 0 || n <= 0 {
		return
	}
	if latency > a.slo {
		a.limit = clampInt(int(math.Floor(float64(a.limit)*a.Decrease)), a.min, a.max)
		return
	}
	if n >= a.limit {
		a.limit = clampInt(a.limit+1, a.min, a.max)
	}
}

// FixedBatch always allows the same batch size.
type FixedBatch struct{ N int }

// Limit implements BatchPolicy.
func (f *FixedBatch) Limit() int { return max1(f.N) }

// Observe implements BatchPolicy.
func (f *FixedBatch) Observe(int, time.Duration) {}

// SetBounds implements BatchPolicy: the size becomes max.
func (f *FixedBatch) SetBounds(_, max int) { f.N = max1(max) }

// SetSLO implements BatchPolicy.
func (f *FixedBatch) SetSLO(time.Duration) {}

func max1(n int) int {
	if n < 1 {
		return 1
	}
	return n
}

func clampInt(v, lo, hi int) int {
	if v < lo {
		return lo
	}
	if v > hi {
		return hi
	}
	return v
}

package sched

// padGuard is padding's online back-off (REEF §5 assumes the profiled
// block times hold at run time: padded BE blocks must never delay an RT
// kernel). Per RT model it keeps the RT jobs' kernel time (first kernel's
// start to last kernel's end) as two moving means, for jobs that ran
// with BE work offered to padding and for jobs that ran without. When
// the padded mean exceeds the unpadded one by more than tol, padding
// stays off for the model's next backoff RT jobs (they refresh the
// unpadded mean), then is tried again from a fresh padded mean. So a
// profile that is wrong on this machine, or a memory-bound BE kernel
// that slows the RT kernel beside it, costs at most a few RT jobs per
// trial. Only the policy's goroutines call it, under the scheduler's
// lock.
type padGuard struct {
	tol     float64
	backoff int
	models  map[*Model]*padTrack
}

// padTrack is one RT model's record.
type padTrack struct {
	padded, alone mean
	// off is how many more RT jobs of the model run without padding
	off int
}

// mean is an exponentially weighted moving mean (weight 1/8) with its
// sample count.
type mean struct {
	v float64
	n int
}

func (m *mean) add(x float64) {
	if m.n == 0 {
		m.v = x
	} else {
		m.v += (x - m.v) / 8
	}
	m.n++
}

// padGuardSamples is how many jobs each mean needs before they are
// compared.
const padGuardSamples = 8

func newPadGuard(tol float64, backoff int) *padGuard {
	return &padGuard{tol: tol, backoff: backoff, models: map[*Model]*padTrack{}}
}

func (g *padGuard) track(m *Model) *padTrack {
	t := g.models[m]
	if t == nil {
		t = &padTrack{}
		g.models[m] = t
	}
	return t
}

// allow reports whether an RT job of model m may be padded (a nil guard
// always allows).
func (g *padGuard) allow(m *Model) bool {
	return g == nil || g.track(m).off == 0
}

// observe records an RT job of model m that took ns of kernel time, with
// BE work offered to padding (padded) or not, and backs off when padding
// has made the model's RT jobs slower; it reports whether it did.
func (g *padGuard) observe(m *Model, padded bool, ns float64) bool {
	if g == nil || ns <= 0 {
		return false
	}
	t := g.track(m)
	if t.off > 0 {
		t.off--
	}
	if !padded {
		t.alone.add(ns)
		return false
	}
	t.padded.add(ns)
	if t.padded.n >= padGuardSamples && t.alone.n >= padGuardSamples && t.padded.v > t.alone.v*(1+g.tol) {
		t.off = g.backoff
		t.padded = mean{}
		return true
	}
	return false
}

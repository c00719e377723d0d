package sched

// padGuard is padding's online back-off (REEF §5 assumes the profiled
// block times hold at run time: padded BE blocks must never delay an RT
// kernel). Per RT model it keeps the RT jobs' kernel time (first kernel's
// start to last kernel's end) as two moving means, for jobs that ran
// with BE work offered to padding and for jobs that ran without. Under
// steady BE load every RT job would be padded, so the guard measures the
// unpadded time itself: one RT mode in 4 of the model runs unpadded until
// 8 such jobs are measured, then one in 32. When the padded mean exceeds
// the unpadded one by more than tol, padding stays off for the model's
// next backoff RT jobs (they refresh the unpadded mean), then is tried
// again from a fresh padded mean. So a
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
	// off is how many more RT jobs of the model run without padding;
	// modes counts the RT modes the model's jobs began (allow)
	off   int
	modes int
}

// Unpadded probes: one RT mode in padProbeFirst runs unpadded until the
// unpadded mean has padGuardSamples jobs, then one in padProbeEvery.
const (
	padProbeFirst = 4
	padProbeEvery = 32
)

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

// allow reports whether an RT mode whose first job is of model m may
// pad: not while padding is backed off for m, nor in the modes that
// measure m's RT jobs unpadded (a nil guard always allows).
func (g *padGuard) allow(m *Model) bool {
	if g == nil {
		return true
	}
	t := g.track(m)
	t.modes++
	if t.off > 0 {
		return false
	}
	every := padProbeEvery
	if t.alone.n < padGuardSamples {
		every = padProbeFirst
	}
	return t.modes%every != 0
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

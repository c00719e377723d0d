package sched

// padGuard is padding's online back-off (REEF §5 assumes the profiled
// block times hold at run time: padded BE blocks must never delay an RT
// kernel). Per RT model it keeps the RT jobs' kernel time (first kernel's
// start to last kernel's end) as two running means, for jobs that ran
// with BE work offered to padding and for jobs that ran without. Under
// steady BE load every RT job would be padded, so the guard measures the
// unpadded time itself: every other RT mode of the model runs unpadded
// until padGuardSamples such jobs are measured, then one in 32. When the
// padded mean exceeds the unpadded one by more than tol, padding stays
// off for the model's next backoff RT jobs (they refresh the unpadded
// mean), then is tried again from a fresh padded mean; each back-off in
// a row doubles that (up to padBackoffMaxShift doublings), and a trial
// that passes resets it. So a profile that is wrong on this machine, or
// a memory-bound BE kernel that slows the RT kernel beside it, costs a
// few RT jobs per trial, and ever fewer trials while it stays so. Only
// the policy's goroutines call it, under the scheduler's lock.
type padGuard struct {
	tol     float64
	backoff int
	models  map[*Model]*padTrack
}

// padTrack is one RT model's record.
type padTrack struct {
	padded, alone mean
	// off is how many more RT jobs of the model run without padding;
	// modes counts the RT modes the model's jobs began (allow); fails
	// counts the back-offs in a row
	off   int
	modes int
	fails int
}

// Unpadded probes: one RT mode in padProbeFirst runs unpadded until the
// unpadded mean has padGuardSamples jobs, then one in padProbeEvery.
const (
	padProbeFirst = 2
	padProbeEvery = 32
)

// padBackoffMaxShift bounds the doublings of the back-off.
const padBackoffMaxShift = 5

// mean is a running mean with its sample count: the plain average of the
// first meanWindow samples, then exponentially weighted (1/meanWindow),
// so that a few samples already give an unbiased estimate.
type mean struct {
	v float64
	n int
}

const meanWindow = 8

func (m *mean) add(x float64) {
	m.n++
	m.v += (x - m.v) / float64(min(m.n, meanWindow))
}

// padGuardSamples is how many jobs each mean needs before they are
// compared.
const padGuardSamples = 4

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
	if t.padded.n < padGuardSamples || t.alone.n < padGuardSamples {
		return false
	}
	if t.padded.v > t.alone.v*(1+g.tol) {
		t.off = g.backoff << min(t.fails, padBackoffMaxShift)
		t.fails++
		t.padded = mean{}
		return true
	}
	if t.padded.n == padGuardSamples {
		t.fails = 0 // this trial passed
	}
	return false
}

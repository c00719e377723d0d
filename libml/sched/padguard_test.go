package sched

import "testing"

// padGuard backs padding off for an RT model whose padded jobs run
// slower than its unpadded ones by more than the tolerance, for the
// given number of RT jobs (doubled for each back-off in a row), then
// tries again from a fresh padded mean; it never backs off before each
// mean has padGuardSamples jobs, for a padded mean within the tolerance,
// or for another model.
func TestPadGuard(t *testing.T) {
	a, b := &Model{name: "a"}, &Model{name: "b"}
	g := newPadGuard(0.05, 4)
	// padding within the tolerance: never off
	for i := 0; i < 20; i++ {
		if g.observe(a, false, 1000) || g.observe(a, true, 1040) {
			t.Fatalf("job %d: backed off at 4%% slower", i)
		}
	}
	// padding 20% slower: off after the padded mean has moved past 5%
	offAt := -1
	for i := 0; i < 20 && offAt < 0; i++ {
		if g.observe(a, true, 1200) {
			offAt = i
		}
	}
	if offAt < 0 {
		t.Fatal("never backed off at 20% slower")
	}
	if g.track(b).off != 0 {
		t.Fatal("another model's padding backed off")
	}
	// off for 4 RT jobs (which run unpadded), then on again
	for i := 0; i < 4; i++ {
		if g.track(a).off == 0 {
			t.Fatalf("padding on again after %d of 4 jobs", i)
		}
		g.observe(a, false, 1000)
	}
	if g.track(a).off != 0 {
		t.Fatal("padding still off after 4 jobs")
	}
	// the padded mean starts afresh: padGuardSamples-1 slow padded jobs
	// are not enough
	for i := 0; i < padGuardSamples-1; i++ {
		if g.observe(a, true, 1500) {
			t.Fatalf("backed off again after %d padded jobs", i+1)
		}
	}
	if !g.observe(a, true, 1500) || g.track(a).off != 8 {
		t.Fatalf("not backed off again, for twice as long, after %d slow padded jobs: off %d", padGuardSamples, g.track(a).off)
	}
	// a third failing trial: four times as long
	for i := 0; i < 8; i++ {
		g.observe(a, false, 1000)
	}
	for i := 0; i < padGuardSamples; i++ {
		g.observe(a, true, 1500)
	}
	if g.track(a).off != 16 {
		t.Fatalf("third back-off in a row: off %d, want 16", g.track(a).off)
	}
	// a trial that passes resets the doubling
	for i := 0; i < 16; i++ {
		g.observe(a, false, 1000)
	}
	for i := 0; i < padGuardSamples; i++ {
		if g.observe(a, true, 1000) {
			t.Fatal("backed off at the unpadded time")
		}
	}
	for g.track(a).padded = (mean{}); ; {
		if g.observe(a, true, 1500) {
			break
		}
	}
	if g.track(a).off != 4 {
		t.Fatalf("back-off after a passing trial: off %d, want 4", g.track(a).off)
	}
	// without unpadded jobs to compare with, padding stays on
	c := &Model{name: "c"}
	for i := 0; i < 20; i++ {
		if g.observe(c, true, 5000) {
			t.Fatal("backed off with no unpadded job measured")
		}
	}
	// under steady BE load (every RT mode may pad) the guard measures
	// the unpadded time itself: every other RT mode until padGuardSamples
	// unpadded jobs, then one in 32
	d := &Model{name: "d"}
	unpadded := 0
	first := padProbeFirst * padGuardSamples
	for mode := 1; mode <= first+32; mode++ {
		pad := g.allow(d)
		if !pad {
			unpadded++
		}
		g.observe(d, pad, 1000)
	}
	if unpadded != padGuardSamples+1 || g.track(d).alone.n != padGuardSamples+1 {
		t.Fatalf("%d RT modes of %d unpadded (%d measured), want %d in the first %d and 1 in the next 32",
			unpadded, first+32, g.track(d).alone.n, padGuardSamples, first)
	}
	// a nil guard (no back-off) always allows
	var none *padGuard
	if !none.allow(a) || none.observe(a, true, 1e9) {
		t.Fatal("a nil guard")
	}
}

// An RT mode whose first RT job's model the guard has backed off does not
// pad: no BE job is offered and the units are not told to pad; one whose
// model it allows does.
func TestPadGuardGatesPadding(t *testing.T) {
	s := newSched(t, Config{Policy: PolicyREEF, BEQueues: 1, PadBackoffTol: 0.05})
	r := s.pol.(*reef)
	m := load(t, s, "resnet", ModelOptions{})
	for _, off := range []int{2, 0} {
		s.locked(func() bool {
			// (an RT mode that is not one of the unpadded probes)
			r.guard.track(m).off, r.guard.track(m).modes = off, 0
			r.startPad(m)
			if r.padWanted != (off == 0) || r.padOn != (off == 0) {
				t.Errorf("guard off for %d jobs: padding wanted %v, started %v", off, r.padWanted, r.padOn)
			}
			r.collectPad(true)
			r.padWanted = false
			return true
		})
	}
}

package sched

import (
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"sluice/libml/engine"
	"sluice/libml/kprof"
	ncpu "sluice/native/cpu"
)

// Scripted interleavings. The tests of this package never hope that a
// timing produces the case they check ("the RT job arrives while the BE
// job runs", "padding runs"): they hold a block of a kernel with the
// runtime's test hook (ncpu.Stream.HoldAt) until the event the case needs
// has happened, and they give the profiles that padding's rules read as
// data, so the rules decide the same on any machine.

// pinVersions (SCHED_TEST_PIN_VERSIONS=1) runs every kernel of every job
// in version 0 without added in-block checks: reef's BE streams, block
// restores and padding then compute exactly what a job run alone
// computes, whatever the GEMM does. It exists to tell a scripting mistake
// from a kernel whose versions round differently: the bit-for-bit tests
// must pass with it on any GEMM, and without it once every version and
// preemptible copy computes the same bits (ARCHITECTURE.md §3).
var pinVersions = os.Getenv("SCHED_TEST_PIN_VERSIONS") != ""

// pin makes m run version 0 only: the other versions lose their times (so
// padding never offers them) and the BE streams run version 0 without
// added checks.
func pin(m *Model) {
	p := copyProfile(m.prof)
	for i := range p.Kernels {
		vs := p.Kernels[i].Versions
		for v := 1; v < len(vs); v++ {
			vs[v].BlockNs, vs[v].KernNs = 0, 0
		}
	}
	kprof.Prune(p)
	if err := m.setProfile(p); err != nil {
		panic(err)
	}
	m.choosePreempt(0, -1, -1)
	m.checkFlops, m.checkBytes = 0, 0
}

// copyProfile is a deep copy of p.
func copyProfile(p *kprof.Model) *kprof.Model {
	q := *p
	q.Kernels = append([]kprof.Kernel(nil), p.Kernels...)
	for i := range q.Kernels {
		q.Kernels[i].Versions = append([]kprof.Version(nil), p.Kernels[i].Versions...)
	}
	return &q
}

// baseProfile is the measured profile of test model key (measured once
// per test binary); data profiles keep its grids and scratch sizes, which
// do not depend on the machine's speed.
func baseProfile(t testing.TB, key string) *kprof.Model {
	t.Helper()
	profMu.Lock()
	p := profs[key]
	profMu.Unlock()
	if p != nil {
		return p
	}
	s := newSched(t, Config{Policy: PolicySeq})
	p = load(t, s, key, ModelOptions{}).Profile()
	s.Close()
	return p
}

// dataProfile is key's profile with the times given as data: f sets the
// block and kernel times of version v of kernel k (NOP kernels keep
// none). Dominated versions are pruned again.
func dataProfile(t testing.TB, key string, f func(k, v int, vp *kprof.Version)) *kprof.Model {
	t.Helper()
	p := copyProfile(baseProfile(t, key))
	p.TotalNs = 0
	for k := range p.Kernels {
		kp := &p.Kernels[k]
		for v := range kp.Versions {
			vp := &kp.Versions[v]
			vp.BlockNs, vp.KernNs, vp.Pruned = 0, 0, false
			if kp.Op != engine.OpNop.String() {
				f(k, v, vp)
			}
		}
		p.TotalNs += kp.Versions[0].KernNs
	}
	kprof.Prune(p)
	return p
}

// rtData is a profile for an RT model whose kernels are estimated at
// about 17 minutes each: rule 1 (a padding block must fit in the RT
// kernel's remaining time) admits every BE block however long the test
// holds an RT kernel or the machine stalls.
func rtData(t testing.TB, key string) *kprof.Model {
	return dataProfile(t, key, func(k, v int, vp *kprof.Version) {
		vp.KernNs, vp.BlockNs = 1e12, 1e12
	})
}

// beData is a profile for a BE model in which every version of every
// kernel fits rule 1 beside an rtData kernel, and the version chosen
// rotates with the kernel: for padding (the shortest kernel time) and for
// the BE streams (the fastest version whose blocks take at most 50 us),
// and some blocks are long enough to get added checks (above 20 us).
func beData(t testing.TB, key string) *kprof.Model {
	return dataProfile(t, key, func(k, v int, vp *kprof.Version) {
		vp.KernNs = 1e4 * float64(1+(k+v)%4)
		vp.BlockNs = 25e3 + 10e3*float64((3*k+v)%4)
	})
}

// waitFor waits until cond holds. It decides nothing by time: the
// deadline only turns a hang (a broken script) into a failure.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting, after 3 minutes, for %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// locked runs f with s.mu held.
func (s *Scheduler) locked(f func() bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f()
}

// liveKernels are the kernels of m that launch (not NOP).
func liveKernels(m *Model) []int {
	var ks []int
	for i := range m.prog.Kernels {
		if m.prog.Kernels[i].Op != engine.OpNop {
			ks = append(ks, i)
		}
	}
	return ks
}

// releaseHolds lets every unit held on s's lanes go when the test ends
// (registered after the scheduler, so it runs before its Close).
func releaseHolds(t testing.TB, s *Scheduler) {
	t.Cleanup(func() {
		for _, l := range s.lanes {
			l.st.HoldAt(-1, 0, false)
			l.st.ReleaseHold()
		}
	})
}

// rtIntoBE is one scripted RT arrival into a running BE job under reef:
//
//  1. the BE job b runs until a unit holds block beBlk of its kernel beAt
//     (past the prologue);
//  2. the RT job r is submitted: RT mode preempts the BE stream, whose
//     held block stops at its first in-loop check;
//  3. with padding, the RT job is held at its first kernel until the BE
//     job, restored, is offered to padding, then at its kernel rtAt until
//     padded(cursor) holds for the BE job's padding cursor;
//  4. the RT job runs to its end, and the BE job after it.
//
// It returns once both jobs have finished.
func rtIntoBE(t testing.TB, s *Scheduler, b, r *Job, beAt int, beBlk int64, rtAt int, padded func(ncpu.Cursor) bool) {
	t.Helper()
	rf, ok := s.pol.(*reef)
	if !ok {
		t.Fatalf("rtIntoBE: policy %s", s.cfg.Policy)
	}
	be, rt := rf.be[b.Queue], rf.rt
	bh, rh := be.st.Holds(), rt.st.Holds()
	be.st.HoldAt(int64(beAt), beBlk, true)
	if err := s.Submit(b); err != nil {
		t.Fatal(err)
	}
	waitFor(t, fmt.Sprintf("BE kernel %d block %d to run", beAt, beBlk), func() bool { return be.st.Holds() > bh })
	if rf.pad != nil {
		rt.st.HoldAt(int64(liveKernels(r.Model)[0]), 0, false)
	}
	if err := s.Submit(r); err != nil {
		t.Fatal(err)
	}
	if rf.pad != nil {
		waitFor(t, "the RT job's first kernel", func() bool { return rt.st.Holds() > rh })
		// the preempted BE job drains, is restored and offered to padding
		// (or padding finished it already: nothing to offer)
		waitFor(t, "the BE job to be offered to padding", func() bool {
			return s.locked(func() bool { return !be.busy && (be.job != b || rf.offer[b.Queue]) })
		})
		rt.st.HoldAt(int64(rtAt), 0, false)
		rt.st.ReleaseHold()
		waitFor(t, fmt.Sprintf("RT kernel %d", rtAt), func() bool { return rt.st.Holds() > rh+1 })
		waitFor(t, "padding", func() bool {
			return s.locked(func() bool { return be.job != b || padded(rf.pad.cursor(b.Queue)) })
		})
		rt.st.ReleaseHold()
	}
	if err := r.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(); err != nil {
		t.Fatal(err)
	}
}

// sameBits reports where got differs from want, bit for bit: the count of
// differing elements and the largest absolute difference ("" when equal).
func sameBits(got, want []float32) string {
	n, at, worst := 0, -1, 0.0
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			n++
			if d := math.Abs(float64(got[i]) - float64(want[i])); d > worst || at < 0 {
				at, worst = i, d
			}
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("%d outputs, want %d", len(got), len(want))
	}
	if n == 0 {
		return ""
	}
	return fmt.Sprintf("%d of %d outputs differ, by up to %.3g (out[%d] = %v, want %v)", n, len(want), worst, at, got[at], want[at])
}

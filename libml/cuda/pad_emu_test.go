//go:build linux && cgo

package cuda

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cuda/internal/emu"
	"sluice/libml/kprof"
	"sluice/libml/zoo"
)

// The kernel profile's structure and plumbing on the emulator (its times
// mean nothing there): one kernel per engine kernel with every version
// the plan has, the plan's entries and grids, the device's occupancy,
// the SMs it fills, times, every block timed by the trace ring; JSON
// round trip (kprof.Set); installing it checks it against the plan; the
// instance still computes the right output after.
func TestKernelProfileEmu(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	d.h.occ = 3
	inst := load(t, b, "sq", mlpGraph(5, 160, 9), 2).(*Instance)
	defer inst.Close()
	in := zoo.Input(1, 2*inst.InputSize())
	want := infer(t, b, inst, 2, in)
	mp, err := inst.ProfileKernels(2, 1)
	if err != nil {
		t.Fatal(err)
	}
	ls, _ := inst.Launches(2)
	p, err := inst.planFor(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(mp.Kernels) != len(ls) || mp.Units != emuSMs || mp.PadOccupancy != 3 || mp.Timing != "host" || mp.Batch != 2 || mp.Device != "cuda" {
		t.Fatalf("profile: %d kernels (plan %d), units %d, pad occupancy %d, timing %s, batch %d, device %q",
			len(mp.Kernels), len(ls), mp.Units, mp.PadOccupancy, mp.Timing, mp.Batch, mp.Device)
	}
	kernels, versions, multi := 0, 0, -1
	for k, l := range ls {
		kp := mp.Kernels[k]
		if kp.Index != k || kp.Op != p.pr.p.Kernels[k].Op.String() {
			t.Errorf("kernel %d: index %d, op %s", k, kp.Index, kp.Op)
		}
		if l.Grid == 0 {
			if len(kp.Versions) != 1 || kp.Versions[0].Grid != 0 {
				t.Errorf("kernel %d launches nothing, profiled %+v", k, kp.Versions)
			}
			continue
		}
		kernels++
		if len(kp.Versions) != max(len(p.vers[k]), 1) {
			t.Errorf("kernel %d: %d versions profiled, the plan has %d", k, len(kp.Versions), len(p.vers[k]))
			continue
		}
		if len(kp.Versions) > 1 {
			multi = k
		}
		for v, vp := range kp.Versions {
			pl := p.launch(k, v)
			versions += min(v, 1)
			if vp.Grid != int64(pl.grid) || vp.Entry != pl.kernel || vp.Occupancy != 3 ||
				vp.SMs != min((pl.grid+2)/3, emuSMs) || vp.KernNs <= 0 || vp.RingBlocks != pl.grid || vp.BlockNs < 0 {
				t.Errorf("kernel %d version %d: %+v (planned %s x %d)", k, v, vp, pl.kernel, pl.grid)
			}
		}
	}
	if kernels < 5 || versions == 0 {
		t.Fatalf("%d kernels launch, %d other versions", kernels, versions)
	}
	var buf bytes.Buffer
	set := &kprof.Set{Device: "emulator", Models: []kprof.Model{*mp}}
	if err := set.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := kprof.ReadSet(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got := back.Find("sq", 2)
	if got == nil || len(got.Kernels) != len(mp.Kernels) || !slices.Equal(got.Kernels[3].Versions, mp.Kernels[3].Versions) {
		t.Fatalf("JSON round trip: %+v", got)
	}
	if err := inst.SetKernelProfile(got); err != nil {
		t.Fatal(err)
	}
	// clone deep enough to change one kernel's versions
	with := func(k int, f func(vs []kprof.Version) []kprof.Version) *kprof.Model {
		bad := *got
		bad.Kernels = slices.Clone(got.Kernels)
		bad.Kernels[k].Versions = f(slices.Clone(got.Kernels[k].Versions))
		return &bad
	}
	first := slices.IndexFunc(ls, func(l Launch) bool { return l.Grid > 0 })
	if err := inst.SetKernelProfile(with(first, func(vs []kprof.Version) []kprof.Version { vs[0].Grid++; return vs })); err == nil || !strings.Contains(err.Error(), "profiled") {
		t.Errorf("a profile with a wrong grid: %v", err)
	}
	// other versions are optional, version 0 is not
	if err := inst.SetKernelProfile(with(multi, func(vs []kprof.Version) []kprof.Version { return vs[:1] })); err != nil {
		t.Errorf("a profile without a kernel's other versions: %v", err)
	}
	if err := inst.SetKernelProfile(with(multi, func(vs []kprof.Version) []kprof.Version { return nil })); err == nil || !strings.Contains(err.Error(), "no versions") {
		t.Errorf("a profile missing a kernel's version 0: %v", err)
	}
	if err := inst.SetKernelProfile(with(multi, func(vs []kprof.Version) []kprof.Version { return append(vs, vs[0], vs[0], vs[0], vs[0], vs[0]) })); err == nil || !strings.Contains(err.Error(), "profiled version") {
		t.Errorf("a profile of a version the plan lacks: %v", err)
	}
	short := *got
	short.Kernels = got.Kernels[:len(got.Kernels)-1]
	if err := inst.SetKernelProfile(&short); err == nil || !strings.Contains(err.Error(), "kernels") {
		t.Errorf("a profile missing a kernel: %v", err)
	}
	other := *got
	other.Units = emuSMs + 1
	if err := inst.SetKernelProfile(&other); err == nil || !strings.Contains(err.Error(), "SMs") {
		t.Errorf("a profile of another SM count: %v", err)
	}
	if _, err := kprof.ReadSet(strings.NewReader(`{"models":[{"model":"x","batch":1,"units":0}]}`)); err == nil {
		t.Error("a profile of 0 units read")
	}
	closeTo(t, "after profiling", infer(t, b, inst, 2, in), want, 0)
}

// finishFrom runs inst's batch-1 job from at to its end (restoring
// after preemptions from the point each gives) and returns its n
// outputs.
func finishFrom(t testing.TB, inst *Instance, at ResumePoint, n int) []float32 {
	t.Helper()
	out := make([]float32, n)
	for {
		pre, resume, err := runSeg(inst, 1, at, nil, out)
		if err != nil {
			t.Fatal(err)
		}
		if !pre {
			return out
		}
		at = ResumePoint{Kernel: resume}
	}
}

// synthProfile profiles inst at batch 1 and installs the profile with
// synthetic times (the emulator's mean nothing): every block 1 µs, every
// kernel 1 ms, so that Rule 1 admits every BE kernel.
func synthProfile(t testing.TB, inst *Instance) *kprof.Model {
	t.Helper()
	mp, err := inst.ProfileKernels(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for k := range mp.Kernels {
		for v := range mp.Kernels[k].Versions {
			mp.Kernels[k].Versions[v].BlockNs, mp.Kernels[k].Versions[v].KernNs = 1e3, 1e6
		}
	}
	if err := inst.SetKernelProfile(mp); err != nil {
		t.Fatal(err)
	}
	return mp
}

// A segment continues a kernel from a block: a segment preempted before
// block 2 of a 3-block kernel (blocks 0 and 1 ran, in order) resumes
// there and gives the unpreempted output.
func TestRunFromBlock(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "mlp", mlpGraph(5, 160, 3), 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(4, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	ls, _ := inst.Launches(1)
	const k = 2
	if ls[k].Grid != 3 {
		t.Fatalf("kernel %d has %d blocks, want 3", k, ls[k].Grid)
	}
	d.h.armPreempt(k, emu.Options{Preempt: true, PreemptBlock: 2})
	pre, _, err := runSeg(inst, 1, ResumePoint{}, in, nil)
	if err != nil || !pre {
		t.Fatalf("preempted %v, %v", pre, err)
	}
	if _, _, err := runSeg(inst, 1, ResumePoint{Kernel: k, Block: 5}, nil, nil); err == nil {
		t.Error("resume point past the kernel's grid accepted")
	}
	out := make([]float32, len(want))
	if pre, _, err := runSeg(inst, 1, ResumePoint{Kernel: k, Block: 2}, nil, out); err != nil || pre {
		t.Fatalf("segment from block 2: preempted %v, %v", pre, err)
	}
	closeTo(t, "resumed at block 2", out, want, 0)
}

// padJobs is a padded-run test: an RT instance and suspended BE jobs,
// all with their unpreempted outputs.
type padJobs struct {
	rt          *Instance
	rtIn, rtOut []float32
	be          []*PadJob
	beIn, beOut [][]float32
}

// newPadJobs loads an RT MLP and two BE MLPs (1- and 3-block kernels),
// profiles them (synthetic times), and suspends each BE job: its run is
// preempted at a kernel, as an RT arrival would.
func newPadJobs(t *testing.T, b *Backend, d *emuDev) *padJobs {
	return newPadJobsProf(t, b, d, synthProfile)
}

// newPadJobsProf is newPadJobs with the BE jobs' profiles installed by
// beProf (before they are suspended: profiling overwrites the arena).
func newPadJobsProf(t *testing.T, b *Backend, d *emuDev, beProf func(testing.TB, *Instance) *kprof.Model) *padJobs {
	pj := &padJobs{}
	pj.rt = load(t, b, "rt", mlpGraph(6, 64, 11), 1).(*Instance)
	t.Cleanup(func() { pj.rt.Close() })
	pj.rtIn = zoo.Input(21, pj.rt.InputSize())
	pj.rtOut = infer(t, b, pj.rt, 1, pj.rtIn)
	synthProfile(t, pj.rt)
	for n, spec := range []struct{ layers, width, at int }{{8, 48, 2}, {6, 160, 1}} {
		be := load(t, b, fmt.Sprint("be", n), mlpGraph(spec.layers, spec.width, uint64(12+n)), 1).(*Instance)
		t.Cleanup(func() { be.Close() })
		in := zoo.Input(uint64(22+n), be.InputSize())
		pj.beIn, pj.beOut = append(pj.beIn, in), append(pj.beOut, infer(t, b, be, 1, in))
		beProf(t, be)
		d.h.armPreempt(int64(spec.at), emu.Options{Preempt: true, PreemptBlock: 0})
		pre, resume, err := runSeg(be, 1, ResumePoint{}, in, nil)
		if err != nil || !pre {
			t.Fatalf("BE %d: preempted %v, %v", n, pre, err)
		}
		pj.be = append(pj.be, &PadJob{Inst: be, Batch: 1, At: ResumePoint{Kernel: resume}})
	}
	return pj
}

// finish runs the RT job padded, then restores every BE job from where
// padding left it; all outputs must be the unpreempted ones.
func (pj *padJobs) finish(t *testing.T) PadStats {
	t.Helper()
	calls := 0
	out := make([]float32, len(pj.rtOut))
	pre, st, err := runSegPadded(pj.rt, 1, pj.rtIn, out, func() []*PadJob { calls++; return pj.be })
	if err != nil || pre {
		t.Fatalf("padded segment: preempted %v, %v", pre, err)
	}
	closeTo(t, "RT output, padded", out, pj.rtOut, 0)
	for n, j := range pj.be {
		got := finishFrom(t, j.Inst.(*Instance), j.At, len(pj.beOut[n]))
		closeTo(t, fmt.Sprintf("BE %d restored after padding", n), got, pj.beOut[n], 0)
	}
	t.Logf("padding: %+v, jobs asked %d times; BE jobs: %+v %+v", st, calls, *pj.be[0], *pj.be[1])
	return st
}

// Padded RT runs on the emulated device: with sg_pad's blocks run last to
// first (the blocks on BE SMs start before the RT blocks are done, as on
// a GPU), BE kernels of the suspended jobs run inside the RT job's
// launches, their resume points advance, and every output is exact; in
// block order (the RT blocks finish first) padded launches carry no BE
// work and change nothing; on one SM the RT kernel fills the device and
// nothing is padded.
func TestRunPaddedEmu(t *testing.T) {
	t.Run("reverse", func(t *testing.T) {
		b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
		pj := newPadJobs(t, b, d)
		at0 := []ResumePoint{pj.be[0].At, pj.be[1].At}
		d.h.padReverse = true
		s := pj.rt.ln.s.(*emuStream)
		s.mu.Lock()
		syncs0 := s.syncs
		s.mu.Unlock()
		st := pj.finish(t)
		s.mu.Lock()
		syncs := s.syncs - syncs0
		s.mu.Unlock()
		if st.Padded == 0 || st.BEBlocks == 0 || st.Kernels != 6 {
			t.Errorf("no padding: %+v", st)
		}
		// padded launches do not wait for each other: the RT stream
		// syncs once to learn the SM ids, once when the run drains
		if st.Padded < 2 || syncs != 2 {
			t.Errorf("%d padded launches, %d syncs of the RT stream (want 2)", st.Padded, syncs)
		}
		// each suspended job's flag (set by its preemption) is cleared
		// once, however many launches carry it
		if st.BEKernels <= 2 || st.FlagClears != 2 {
			t.Errorf("%d BE kernels carried, %d flags cleared (want 2)", st.BEKernels, st.FlagClears)
		}
		if pj.be[0].Blocks+pj.be[1].Blocks != st.BEBlocks || pj.be[0].Kernels+pj.be[1].Kernels == 0 {
			t.Errorf("BE jobs' counts: %+v %+v", *pj.be[0], *pj.be[1])
		}
		for n, j := range pj.be {
			if j.Kernels > 0 && j.At.Kernel <= at0[n].Kernel {
				t.Errorf("BE %d: %d kernels padded, resume point %+v from %+v", n, j.Kernels, j.At, at0[n])
			}
		}
		if log := d.h.launches(); !slices.ContainsFunc(log, func(l emuLaunch) bool { return l.kernel == KernelPad && l.grid == 2*emuSMs }) {
			t.Errorf("no sg_pad launch of occupancy x SMs blocks")
		}
	})
	t.Run("in-order", func(t *testing.T) {
		b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
		pj := newPadJobs(t, b, d)
		at0 := pj.be[0].At
		st := pj.finish(t)
		if st.Padded == 0 || st.BEBlocks != 0 || pj.be[0].At != at0 {
			t.Errorf("in block order: %+v, BE 0 at %+v (was %+v)", st, pj.be[0].At, at0)
		}
	})
	t.Run("one-sm", func(t *testing.T) {
		d := newEmuDev(1, false)
		b, err := newEmuDevBackend(d, libml.BackendConfig{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Deinit() })
		d.h.padReverse = true
		pj := newPadJobs(t, b, d)
		st := pj.finish(t)
		if st.Padded != 0 || st.BEBlocks != 0 {
			t.Errorf("the RT kernel fills the device, yet: %+v", st)
		}
		if slices.ContainsFunc(d.h.launches(), func(l emuLaunch) bool { return l.kernel == KernelPad }) {
			t.Error("sg_pad launched on a device the RT kernel fills")
		}
	})
}

// A BE stream preempted mid-block inside a padded launch: its block is
// lost, and the job restores from that kernel's idempotent group entry
// with the right output.
func TestRunPaddedLostBlock(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	pj := newPadJobs(t, b, d)
	d.h.padReverse = true
	// the first padded launch is RT kernel 0's; reversed, its last
	// block (on the top SM: the last pick's) runs BE blocks first; its
	// 6th barrier is inside its first BE block's GEMM
	last := pj.be[len(pj.be)-1]
	d.h.armPreempt(0, emu.Options{Preempt: true, Reverse: true, PreemptBlock: 2*emuSMs - 1, PreemptAfterSyncs: 6, PreemptAddr: last.Inst.(*Instance).state})
	at0 := last.At
	st := pj.finish(t)
	if st.Padded == 0 {
		t.Errorf("no padded launch: %+v", st)
	}
	t.Logf("BE 1 from %+v to %+v", at0, last.At)
}

// The host-side decision of a padded launch (padRun.choose): candidates
// from 1 or 5 suspended BE jobs (a lock try, the plan and profile
// look-ups per job), the selector (one cgo call), the control block's kernels; the picked
// jobs released after each. Nothing is launched, so the emulator does
// not enter into it: this is host CPU time. The jobs callback returns a
// prepared slice (the DISB's allocates one per call).
func BenchmarkPadChoose(b *testing.B) {
	for _, n := range []int{1, 5} {
		b.Run(fmt.Sprint("be", n), func(b *testing.B) {
			be, _ := newEmuBackend(b, Options{}, libml.BackendConfig{}, false)
			rt := load(b, be, "rt", mlpGraph(4, 64, 1), 1).(*Instance)
			defer rt.Close()
			synthProfile(b, rt)
			var jobs []*PadJob
			for k := 0; k < n; k++ {
				inst := load(b, be, fmt.Sprint("be", k), mlpGraph(4, 48+16*k, uint64(2+k)), 1).(*Instance)
				defer inst.Close()
				synthProfile(b, inst)
				jobs = append(jobs, &PadJob{Inst: inst, Batch: 1})
			}
			rt.mu.Lock()
			defer rt.mu.Unlock()
			p, err := rt.planFor(1)
			if err != nil {
				b.Fatal(err)
			}
			pr := &padRun{inst: rt, jobs: func() []*PadJob { return jobs }}
			if err := pr.init(rt, p); err != nil {
				b.Fatal(err)
			}
			l := &p.launches[0]
			kp := &pr.rt.vers[0][0]
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				if !pr.choose(rt, p, 0, kp, l.params, l.grid) {
					b.Fatal("nothing picked")
				}
				pr.unhold()
			}
		})
	}
}

// An RT kernel whose profile says a padded launch costs it more than
// PadCostTol launches unpadded (PadStats.Costly), and the BE jobs stay
// where they were; within the tolerance it is padded as before.
func TestPadCostlyEmu(t *testing.T) {
	for _, costly := range []bool{true, false} {
		b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
		pj := newPadJobs(t, b, d)
		mp, err := pj.rt.ProfileKernels(1, 1)
		if err != nil {
			t.Fatal(err)
		}
		for k := range mp.Kernels {
			for v := range mp.Kernels[k].Versions {
				vp := &mp.Kernels[k].Versions[v]
				vp.BlockNs, vp.KernNs, vp.PadNs = 1e3, 1e6, 1e6*(1+kprof.PadCostTol/2)
				if costly {
					vp.PadNs = 1e6 * (1 + 2*kprof.PadCostTol)
				}
			}
		}
		if err := pj.rt.SetKernelProfile(mp); err != nil {
			t.Fatal(err)
		}
		at0 := []ResumePoint{pj.be[0].At, pj.be[1].At}
		d.h.padReverse = true
		st := pj.finish(t)
		if costly && (st.Padded != 0 || st.Costly == 0 || pj.be[0].At != at0[0] || pj.be[1].At != at0[1]) {
			t.Errorf("padding costs the RT kernels 10%%, yet: %+v, BE at %+v %+v", st, pj.be[0].At, pj.be[1].At)
		}
		if !costly && (st.Padded == 0 || st.Costly != 0) {
			t.Errorf("padding costs the RT kernels 2.5%%, yet: %+v", st)
		}
		if got := pj.rt.Stats().Pad.Costly; got != st.Costly {
			t.Errorf("instance stats: %d costly, the run %d", got, st.Costly)
		}
	}
}

// profilePad times a kernel as a padded launch with nothing to pad (on
// the emulator, by the host's clock): a kernel that leaves SMs idle gets
// a time, one that fills the device none; the instance computes the
// same output after.
func TestProfilePadEmu(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	d.h.occ = 3
	inst := load(t, b, "sq", mlpGraph(5, 160, 9), 2).(*Instance)
	defer inst.Close()
	in := zoo.Input(1, 2*inst.InputSize())
	want := infer(t, b, inst, 2, in)
	inst.mu.Lock()
	p, err := inst.planFor(2)
	if err != nil {
		inst.mu.Unlock()
		t.Fatal(err)
	}
	timed, full := 0, 0
	for k, l := range p.launches {
		if l.grid == 0 {
			continue
		}
		ns, err := inst.profilePad(p, k, 3, 2)
		if err != nil {
			inst.mu.Unlock()
			t.Fatalf("kernel %d: %v", k, err)
		}
		fills := (l.grid+2)/3 >= emuSMs
		switch {
		case fills && ns != 0:
			t.Errorf("kernel %d (%d blocks) fills the device, padded launch timed %v ns", k, l.grid, ns)
		case !fills && !(ns > 0):
			t.Errorf("kernel %d (%d blocks) leaves SMs idle, padded launch timed %v ns", k, l.grid, ns)
		case fills:
			full++
		default:
			timed++
		}
	}
	inst.mu.Unlock()
	if timed == 0 {
		t.Fatal("no kernel leaves SMs idle")
	}
	closeTo(t, "after profilePad", infer(t, b, inst, 2, in), want, 0)
	t.Logf("%d kernels timed as padded launches, %d fill the device", timed, full)
}

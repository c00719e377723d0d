//go:build linux && cgo

package cuda

import (
	"testing"

	"sluice/libml"
	"sluice/libml/cuda/internal/emu"
	"sluice/libml/kprof"
	"sluice/libml/zoo"
)

// synthVersionProfile profiles inst at batch 1 and installs the profile
// with synthetic times that leave a multi-version kernel only its
// version 1 under Rule 1 beside an RT kernel of synthProfile's (1 ms):
// version 0's blocks take 2 ms, version 1's 1 µs (its kernel, 2 ms, is
// slower than version 0's 1 ms, so neither dominates the other); a
// kernel with one version has synthProfile's times.
func synthVersionProfile(t testing.TB, inst *Instance) *kprof.Model {
	t.Helper()
	mp, err := inst.ProfileKernels(1, 1)
	if err != nil {
		t.Fatal(err)
	}
	multi := 0
	for k := range mp.Kernels {
		vs := mp.Kernels[k].Versions
		if len(vs) > 1 {
			multi++
		}
		for v := range vs {
			switch {
			case len(vs) == 1:
				vs[v].BlockNs, vs[v].KernNs = 1e3, 1e6
			case v == 0:
				vs[v].BlockNs, vs[v].KernNs = 2e6, 1e6
			default:
				vs[v].BlockNs, vs[v].KernNs = 1e3, 2e6
			}
		}
	}
	if multi == 0 {
		t.Fatalf("%s: no kernel with versions", inst.m.name)
	}
	kprof.Prune(mp)
	for _, kp := range mp.Kernels {
		for v, vp := range kp.Versions {
			if vp.Pruned && kp.Versions[0].Grid > 0 {
				t.Fatalf("%s: synthetic version %d of kernel %d dominated: %+v", inst.m.name, v, kp.Index, vp)
			}
		}
	}
	if err := inst.SetKernelProfile(mp); err != nil {
		t.Fatal(err)
	}
	return mp
}

// A kernel that padding started in version 1 finishes in version 1: with
// blocks 0 and 1 of kernel k's version 1 run (as a padded launch would
// leave them) and its output otherwise clobbered, RunFrom{k, 2, version
// 1} gives the unpreempted output; resuming the same blocks in version 0
// (whose block 2 is another part of the output) does not. Resume points
// with a version at block 0, a version the kernel lacks or a block past
// the version's grid are refused.
func TestRunFromVersion(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "mlp", mlpGraph(5, 160, 3), 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(4, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	const k = 2
	p, err := inst.planFor(1)
	if err != nil {
		t.Fatal(err)
	}
	l0, l1 := p.launch(k, 0), p.launch(k, 1)
	if l0 == nil || l1 == nil || l0.grid != 3 || l1.grid != 5 {
		t.Fatalf("kernel %d: versions %+v %+v, want grids 3 and 5", k, l0, l1)
	}
	var a Args
	a.Decode(l0.params[16:])
	clobber := make([]float32, 160)
	for i := range clobber {
		clobber[i] = sentinel
	}
	// setup leaves the job as padding would: its run preempted before
	// kernel k, kernel k's output clobbered, blocks 0 and 1 of version 1
	// run on its stream
	setup := func() {
		t.Helper()
		d.h.armPreempt(k, emu.Options{Preempt: true, PreemptBlock: 0})
		if pre, _, err := runSeg(inst, 1, ResumePoint{}, in, nil); err != nil || !pre {
			t.Fatalf("preempted %v, %v", pre, err)
		}
		if err := b.dev.Write(a.Out, f32bytes(clobber)); err != nil {
			t.Fatal(err)
		}
		if err := b.dev.Write(inst.state+StateFlag, make([]byte, 4)); err != nil {
			t.Fatal(err)
		}
		if err := inst.ln.s.Launch(l1.kernel, 2, l1.params); err != nil {
			t.Fatal(err)
		}
		if err := inst.ln.s.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	out := make([]float32, len(want))
	setup()
	if pre, _, err := runSeg(inst, 1, ResumePoint{Kernel: k, Block: 2, Version: 1}, nil, out); err != nil || pre {
		t.Fatalf("segment from version 1: preempted %v, %v", pre, err)
	}
	closeTo(t, "finished in version 1", out, want, 0)
	setup()
	if pre, _, err := runSeg(inst, 1, ResumePoint{Kernel: k, Block: 2}, nil, out); err != nil || pre {
		t.Fatalf("segment from version 0: preempted %v, %v", pre, err)
	}
	same := true
	for i := range out {
		same = same && out[i] == want[i]
	}
	if same {
		t.Error("version 1's blocks finished in version 0 gave the right output: the test proves nothing")
	}
	for _, at := range []ResumePoint{{Kernel: k, Version: 1}, {Kernel: k, Block: 1, Version: 2}, {Kernel: k, Block: 6, Version: 1}} {
		if _, _, err := runSeg(inst, 1, at, nil, nil); err == nil {
			t.Errorf("resume point %+v accepted", at)
		}
	}
}

// Padded RT runs with profiles that leave the BE GEMMs only their 32 x 32
// version under Rule 1 (synthVersionProfile): sg_pad's blocks run last to
// first, BE kernels are carried in version 1, and every output (RT, BE
// after RunFrom from where padding left it, in whatever version) is
// exact.
func TestRunPaddedVersionEmu(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	pj := newPadJobsProf(t, b, d, synthVersionProfile)
	d.h.padReverse = true
	st := pj.finish(t)
	if st.Padded == 0 || st.BEBlocks == 0 || st.BEVersioned == 0 || st.BEVersioned != st.BEKernels {
		t.Errorf("padding: %+v, want every BE kernel carried in version 1", st)
	}
}

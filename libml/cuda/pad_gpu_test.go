//go:build linux && cgo

package cuda

import (
	"context"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/libml/zoo"
)

// Dynamic kernel padding on the GPU (SLUICE_GPU=1): an RT BERT-base job
// at batch 1 (small GEMMs that leave SMs idle) runs with RunPadded beside
// two suspended BE jobs (ResNet-50, MobileNetV2): one preempted at a
// random moment of its run, one not started. Profiles are measured
// (events, trace ring). Every output must be bit-identical to the
// unpreempted one; the padding counts are logged (how much is padded
// depends on the measured times: Rule 1). SLUICE_GPU=emu runs it on the
// emulator with small stand-ins, where no BE block runs (blocks run in
// order: the RT blocks first).
func TestGPUBackendPad(t *testing.T) {
	b := gpuBackend(t)
	ctx := context.Background()
	type job struct {
		name     string
		inst     *Instance
		in, want []float32
	}
	link := func(name string, seed uint64) *job {
		base := gpuModel(t, name, zoo.Options{}, 1)
		li, err := b.LinkModel(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		inst := li.(*Instance)
		t.Cleanup(func() { inst.Close() })
		if err := b.ConfigureBatch(inst, 1); err != nil {
			t.Fatal(err)
		}
		j := &job{name: name, inst: inst, in: zoo.Input(seed, inst.InputSize())}
		j.want = infer(t, b, inst, 1, j.in)
		mp, err := inst.ProfileKernels(1, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := inst.SetKernelProfile(mp); err != nil {
			t.Fatal(err)
		}
		idle := 0
		for _, k := range mp.Kernels {
			if v0 := k.Versions[0]; v0.Grid > 0 && v0.SMs < mp.Units {
				idle++
			}
		}
		t.Logf("%s: %d kernels (%s timing), %d leave SMs idle, sg_pad %d blocks/SM", name, len(mp.Kernels), mp.Timing, idle, mp.PadOccupancy)
		return j
	}
	rt := link("bert", 31)
	bes := []*job{link("resnet50", 32), link("mobilenetv2", 33)}
	rng := rand.New(rand.NewPCG(34, 35))
	var total PadStats
	for round := 0; round < 5; round++ {
		var jobs []*PadJob
		for n, be := range bes {
			pj := &PadJob{Inst: be.inst, Batch: 1}
			if n == 0 {
				pj.At = suspendAtRandom(t, be.inst, be.in, rng)
			} else {
				setInput(t, be.inst, 1, be.in)
			}
			jobs = append(jobs, pj)
		}
		at0 := []ResumePoint{jobs[0].At, jobs[1].At}
		out := make([]float32, len(rt.want))
		pre, st, err := runSegPadded(rt.inst, 1, rt.in, out, func() []*PadJob { return jobs })
		if err != nil || pre {
			t.Fatalf("padded segment: preempted %v, %v", pre, err)
		}
		if !slices.Equal(out, rt.want) {
			t.Fatalf("round %d: the padded RT output differs from the unpreempted one", round)
		}
		for n, be := range bes {
			got := finishFrom(t, be.inst, jobs[n].At, len(be.want))
			if !slices.Equal(got, be.want) {
				t.Fatalf("round %d: BE %s restored from %+v (padded from %+v) differs from the unpreempted output", round, be.name, jobs[n].At, at0[n])
			}
		}
		t.Logf("round %d: %+v; BE %s %+v -> %+v (%d blocks), %s %+v -> %+v (%d blocks)", round, st,
			bes[0].name, at0[0], jobs[0].At, jobs[0].Blocks, bes[1].name, at0[1], jobs[1].At, jobs[1].Blocks)
		total.Kernels += st.Kernels
		total.Padded += st.Padded
		total.BEKernels += st.BEKernels
		total.BEBlocks += st.BEBlocks
	}
	if total.Kernels == 0 {
		t.Error("no RT kernel launched")
	}
	t.Logf("padding over 5 RT jobs: %+v", total)
}

// suspendAtRandom runs inst's job on input in and preempts it at a
// random moment of its run (within a few milliseconds); it returns where
// the job resumes (past the end when the run finished first).
func suspendAtRandom(t *testing.T, inst *Instance, in []float32, rng *rand.Rand) ResumePoint {
	t.Helper()
	at := time.Duration(rng.Float64() * float64(2*time.Millisecond))
	var inRun atomic.Bool
	inRun.Store(true)
	var wg sync.WaitGroup
	var perr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		time.Sleep(at)
		for inRun.Load() {
			taken, err := inst.preemptIfRunning()
			if err != nil || taken {
				perr = err
				return
			}
			runtime.Gosched()
		}
	}()
	pre, resume, err := runSeg(inst, 1, ResumePoint{}, in, nil)
	inRun.Store(false)
	wg.Wait()
	if err != nil || perr != nil {
		t.Fatalf("run: %v; preempt: %v", err, perr)
	}
	if !pre {
		ls, _ := inst.Launches(1)
		return ResumePoint{Kernel: len(ls)}
	}
	return ResumePoint{Kernel: resume}
}

// preemptIfRunning preempts the instance's run if one is under way and
// reports whether one was.
func (i *Instance) preemptIfRunning() (bool, error) {
	i.pmu.Lock()
	defer i.pmu.Unlock()
	if !i.running {
		return false, nil
	}
	if i.req.Load() {
		return true, nil
	}
	i.req.Store(true)
	return true, i.b.setFlag(i.state)
}

package cuda

import (
	"testing"

	"sluice/libml"
)

// runSeg runs kernels from at to the end of inst's plan for batch as one
// segment, the scheduler's way (RunSegment): in, when not nil, is written
// into the input first; out, when not nil, receives the output if the
// segment ran to the end. When it was preempted, resume is the kernel the
// job restores from: the first kernel of the idempotent group of the last
// kernel that started (REEF §4.4, the scheduler's rule).
func runSeg(inst *Instance, batch int, at ResumePoint, in, out []float32) (pre bool, resume int, err error) {
	p, err := inst.Program(batch)
	if err != nil {
		return false, 0, err
	}
	res, err := inst.RunSegment(batch, libml.Segment{From: at, To: len(p.Kernels), In: in, Out: out})
	if err != nil || !res.Preempted {
		return false, 0, err
	}
	return true, restoreAt(p.IdemEntry, at.Kernel, res.Exec), nil
}

// restoreAt is where a segment from kernel start that was preempted after
// kernel exec started (-1: none did) restores: the first kernel of exec's
// idempotent group (idem[k], the program's IdemEntry), or of start's when
// no kernel of the segment started.
func restoreAt(idem []int, start, exec int) int {
	n := len(idem)
	if n == 0 {
		return 0
	}
	idx := min(exec, n-1)
	if idx < start {
		idx = min(start, n-1)
	}
	return idem[idx]
}

// runSegPadded is runSeg from kernel 0 with padding (RunSegmentPadded):
// jobs offers the suspended jobs before each kernel. st is what padding
// did in this segment (the instance's Stats().Pad before and after).
func runSegPadded(inst *Instance, batch int, in, out []float32, jobs func() []*PadJob) (pre bool, st PadStats, err error) {
	p, err := inst.Program(batch)
	if err != nil {
		return false, st, err
	}
	s0 := inst.Stats().Pad
	res, err := inst.RunSegmentPadded(batch, libml.Segment{To: len(p.Kernels), In: in, Out: out}, jobs)
	s1 := inst.Stats().Pad
	st = PadStats{Kernels: s1.Kernels - s0.Kernels, Padded: s1.Padded - s0.Padded, BEKernels: s1.BEKernels - s0.BEKernels,
		BEBlocks: s1.BEBlocks - s0.BEBlocks, BEVersioned: s1.BEVersioned - s0.BEVersioned, Costly: s1.Costly - s0.Costly,
		FlagClears: s1.FlagClears - s0.FlagClears}
	return res.Preempted, st, err
}

// setInput writes a batch's input into inst's input tensor with an empty
// segment (kernels [0, 0)), as a job's first segment would before its
// first kernel: padding may then run the job's kernels from kernel 0.
func setInput(t testing.TB, inst *Instance, batch int, in []float32) {
	t.Helper()
	if _, err := inst.RunSegment(batch, libml.Segment{In: in}); err != nil {
		t.Fatal(err)
	}
}

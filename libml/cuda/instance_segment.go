package cuda

import (
	"fmt"

	"sluice/libml"
	"sluice/libml/kprof"
)

// The segment contract (libml.SegmentInstance): libml/sched runs a cuda
// instance's kernels in segments on the instance's stream, preempts them
// and restores them, under any of its policies.

var (
	_ libml.PaddingSegmentInstance = (*Instance)(nil)
	_ libml.PreemptBatcher         = (*Instance)(nil)
	_ libml.SegmentBackend         = (*Backend)(nil)
)

// Arm marks a segment as about to run (libml.SegmentInstance): a Preempt
// from now on stops the next RunSegment, before its first launch if it
// comes first.
func (i *Instance) Arm() {
	i.pmu.Lock()
	i.running = true
	i.req.Store(false)
	i.pmu.Unlock()
}

// disarm undoes Arm for a segment that does not run.
func (i *Instance) disarm() {
	i.pmu.Lock()
	i.running = false
	i.pmu.Unlock()
}

// RunSegment runs kernels [seg.From, seg.To) of the batch's plan once on
// the instance's stream (libml.SegmentInstance): seg.In, when given, is
// copied into the input tensor first, and seg.Out receives the output
// when the segment ran the program to its end. A Preempt since Arm, or
// during the run, stops it; the result then says which kernel started
// last, from which the scheduler restores the job.
func (i *Instance) RunSegment(batch int, seg libml.Segment) (libml.SegmentResult, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	res, err := i.runSegment(batch, seg, nil)
	if err != nil {
		i.disarm()
		return libml.SegmentResult{}, fmt.Errorf("cuda: RunSegment %q: %w", i.m.name, err)
	}
	return res, nil
}

// RunSegmentPadded is RunSegment with dynamic kernel padding
// (libml.PaddingSegmentInstance): each kernel launches through sg_pad
// with blocks of the suspended jobs jobs returns when the selector picks
// any (pad_run.go; the jobs' models need a kernel profile, which
// ProfileSegments installs). What padding did adds to Stats().Pad.
func (i *Instance) RunSegmentPadded(batch int, seg libml.Segment, jobs func() []*libml.PadJob) (libml.SegmentResult, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	res, err := i.runSegment(batch, seg, jobs)
	if err != nil {
		i.disarm()
		return libml.SegmentResult{}, fmt.Errorf("cuda: RunSegmentPadded %q: %w", i.m.name, err)
	}
	return res, nil
}

func (i *Instance) runSegment(batch int, seg libml.Segment, jobs func() []*libml.PadJob) (libml.SegmentResult, error) {
	p, err := i.planFor(batch)
	if err != nil {
		return libml.SegmentResult{}, err
	}
	n, at := len(p.launches), seg.From
	if !p.inPlan(at, seg.To) {
		return libml.SegmentResult{}, fmt.Errorf("segment from %+v to %d outside the plan's %d kernels", at, seg.To, n)
	}
	ep := p.pr.p
	if seg.In != nil || seg.Out != nil || seg.Input != nil {
		if err := i.singleIO(ep); err != nil {
			return libml.SegmentResult{}, err
		}
	}
	if seg.In == nil && seg.Input != nil {
		if !i.m.batched && seg.Input.N() != 1 {
			return libml.SegmentResult{}, fmt.Errorf("a payload of %d requests for a model without a batch dimension", seg.Input.N())
		}
		host, err := i.gatherInput(batch, seg.Input)
		if err != nil {
			return libml.SegmentResult{}, err
		}
		seg.In = host // nil: gathered on the device
		seg.Input.Load()
	}
	if seg.In != nil {
		ib := ep.Inputs[0]
		if len(seg.In) > int(ib.Size()) || (seg.Input == nil && len(seg.In) != int(ib.Size())) {
			return libml.SegmentResult{}, fmt.Errorf("batch %d takes %d input values, got %d", batch, ib.Size(), len(seg.In))
		}
		i.gathered = 0
		i.stage.Put(i.inOff, f32view(seg.In))
		if err := i.ln.s.WriteAsync(i.arena+4*uint64(ib.Off), i.stage, i.inOff, 4*len(seg.In)); err != nil {
			return libml.SegmentResult{}, err
		}
	}
	var rb *readBack
	if seg.Out != nil {
		ob := ep.Outputs[0]
		if len(seg.Out) != int(ob.Size()) {
			return libml.SegmentResult{}, fmt.Errorf("batch %d gives %d output values, got room for %d", batch, ob.Size(), len(seg.Out))
		}
		if seg.To == n {
			rb = &readBack{off: i.outOff, src: ob.Off, n: 4 * len(seg.Out)}
		}
	}
	var pad *padRun
	if jobs != nil {
		// the instance's one padded run, reused: its launch slots and
		// scratch keep their room from segment to segment (the
		// instance's lock is held)
		pad = &i.padRun
		pad.reset(i, jobs)
		if err := pad.init(i, p); err != nil {
			return libml.SegmentResult{}, err
		}
	}
	preempted, exec, err := i.runTo(p, at, seg.To, rb, pad, true)
	if pad != nil {
		pad.release()
		i.stats.addPad(&pad.st)
	}
	i.gathered = 0 // the run synchronized the stream: the gather is done
	if err != nil {
		return libml.SegmentResult{}, err
	}
	if preempted {
		i.stats.preemptions.Add(1)
	} else if rb != nil {
		i.stage.Get(i.outOff, f32view(seg.Out))
	}
	return libml.SegmentResult{Preempted: preempted, Exec: exec}, nil
}

// ProfileSegments times every kernel of the batch's plan in every
// version (libml.SegmentInstance): ProfileKernels' profile, which is also
// installed for the model at that batch size (SetKernelProfile), for
// padding.
func (i *Instance) ProfileSegments(batch, reps int) (*kprof.Model, error) {
	mp, err := i.ProfileKernels(batch, reps)
	if err != nil {
		return nil, err
	}
	if err := i.SetKernelProfile(mp); err != nil {
		return nil, err
	}
	return mp, nil
}

// gatherInput puts a batch's payload input (InferInput's, or a
// segment's libml.Segment.Input) where the run reads it: gathered by the
// device into the input tensor of the batch's plan when every fragment
// lies in a mapped region and the encoding converts there (no host copy;
// it returns nil), or gathered and converted on the host, whose rows it
// returns for the upload (two host copies). in.Copies says which.
func (i *Instance) gatherInput(batch int, in *libml.Input) ([]float32, error) {
	n, isz := in.N(), i.InputSize()
	if n < 1 || n > batch {
		return nil, fmt.Errorf("a payload of %d requests for a batch of %d", n, batch)
	}
	if err := in.Check(n, isz); err != nil {
		return nil, err
	}
	if deviceConverts(in.Enc) && (i.m.batched || n == 1) && i.regionFrags(in) {
		if err := i.gather(batch, i.inFrags, in.Enc); err != nil {
			return nil, err
		}
		in.Copies = 0
		return nil, nil
	}
	if need := i.maxBatch * isz; len(i.hostIn) < need {
		i.hostIn = make([]float32, need)
	}
	if err := i.ing.Ingest(i.hostIn[:n*isz], in, 0, n); err != nil {
		return nil, err
	}
	in.Copies = 2
	return i.hostIn[:n*isz], nil
}

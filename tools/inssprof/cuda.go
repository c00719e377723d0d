package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"sluice/libml"
	"sluice/libml/cuda"
	"sluice/libml/cuda/cudrv"
	"sluice/libml/graph"
	"sluice/orchestrator/inss"
)

// The cuda device's profile (-device cuda, or emu: the same on the kernel
// emulator, for tests). Shares are SM partitions (green contexts,
// Instance.SetShare) at gpuShares of the device, recorded as the SMs the
// partition got; the upload and the result are the batch's input copied
// to the GPU and its output back (pinned memory, one stream); pressure is
// the slowdown of a memory-streaming probe (a graph that broadcasts,
// adds and sums probeFloats values on the device) on half the SMs while
// the model runs on the other half; pairs are each model on half the SMs
// beside each model on the other half. The backend places the two halves
// on SM groups that do not overlap.

// gpuShares are the SM shares profiled, as fractions of the device.
var gpuShares = []float64{0.125, 0.25, 0.5, 0.75, 1}

// emuSMs is the emulated device's SM count under -device emu.
const emuSMs = 8

func runCUDA(ctx context.Context, o options) (*report, error) {
	be := cuda.NewBackend(cuda.Options{Emulate: o.device == "emu", EmuSMs: emuSMs})
	if err := be.Init(ctx, libml.BackendConfig{}); err != nil {
		return nil, err
	}
	defer be.Deinit()
	if !be.Green() {
		return nil, errors.New("the cuda device has no green contexts: shares need them")
	}
	maxB := slices.Max(append(slices.Clone(o.batches), o.holdout...))
	ms, err := loadModels[*cuda.Instance](ctx, be, o.models, o.size, maxB)
	if err != nil {
		return nil, err
	}
	defer closeModels(ms)
	rep := &report{deviceName: gpuName(o.device), shareUnit: "SMs", capacity: be.SMs(),
		coLocation: "on half the SMs beside a model on the other half",
		probeWhere: "on half the SMs while the model runs on the other half"}
	for _, m := range ms {
		p := inss.Profile{Model: m.name, Device: "cuda", Capacity: be.SMs(), MemBytes: m.weights + m.inst.ArenaBytes()}
		last := 0
		for _, f := range gpuShares {
			if err := m.inst.SetShare(f); err != nil {
				return nil, fmt.Errorf("%s: %w", m.name, err)
			}
			if m.inst.SMs() == last {
				continue // rounded up to the share before (a small device)
			}
			last = m.inst.SMs()
			if err := sweep(ctx, be, m, float64(last), o, &p, rep); err != nil {
				return nil, err
			}
		}
		if err := m.inst.SetSMs(0); err != nil {
			return nil, err
		}
		err := fitTransfers(&p, o.batches, func(b int) (float64, float64, error) {
			return transferTimes(o.device, m, b, o.reps)
		})
		if err != nil {
			return nil, err
		}
		rep.profiles = append(rep.profiles, p)
	}

	// pressure: the probe on half the SMs, alone and beside each model on
	// the other half
	probe, err := newGPUProbe(ctx, be, o.probeFloats)
	if err != nil {
		return nil, err
	}
	defer probe.inst.Close()
	if rep.probeNs, err = timeBatch(ctx, be, probe.inst, 1, probe.in, probe.out, 3*o.reps); err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	refB := o.batches[len(o.batches)/2]
	for k, m := range ms {
		if err := m.peer.SetShare(0.5); err != nil {
			return nil, err
		}
		ns, err := beside(ctx, be, m.peer, refB, m.in, m.peerOut, nil, func() (float64, error) {
			return timeBatch(ctx, be, probe.inst, 1, probe.in, probe.out, 3*o.reps)
		})
		if err != nil {
			return nil, fmt.Errorf("%s beside the probe: %w", m.name, err)
		}
		rep.profiles[k].Pressure = max(ns/rep.probeNs-1, 0)
		if err := m.peer.SetSMs(0); err != nil {
			return nil, err
		}
	}
	probe.inst.Close()

	// pairs: each model on half the SMs beside each model (itself too) on
	// the other half (timePair)
	for _, m := range ms {
		if err := m.inst.SetShare(0.5); err != nil {
			return nil, err
		}
		for _, other := range ms {
			if err := other.peer.SetShare(0.5); err != nil {
				return nil, err
			}
			pr, err := timePair(ctx, be, m, other, refB, o.reps, nil)
			if err != nil {
				return nil, err
			}
			rep.pairs = append(rep.pairs, pr)
			if err := other.peer.SetSMs(0); err != nil {
				return nil, err
			}
		}
		if err := m.inst.SetSMs(0); err != nil {
			return nil, err
		}
	}
	rep.fit("cuda")
	return rep, nil
}

// gpuProbe is the memory-streaming probe: one value in, probeFloats
// values broadcast, added to themselves and summed on the device, one
// value out.
type gpuProbe struct {
	inst    libml.Instance
	in, out []float32
}

func newGPUProbe(ctx context.Context, be *cuda.Backend, floats int) (*gpuProbe, error) {
	if floats < 1024 {
		return nil, fmt.Errorf("probe of %d values", floats)
	}
	cols := int64(1024)
	rows := int64(floats) / cols
	g := &graph.Graph{Name: "probe", Opset: 13,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 1}}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 1}}},
		Initializers: []*graph.Tensor{{Name: "shape", DType: graph.Int64, Dims: []int64{2}, I64: []int64{rows, cols}}},
		Nodes: []graph.Node{
			{Name: "e", Op: "Expand", Inputs: []string{"x", "shape"}, Outputs: []string{"e"}},
			{Name: "a", Op: "Add", Inputs: []string{"e", "e"}, Outputs: []string{"a"}},
			{Name: "y", Op: "ReduceSum", Inputs: []string{"a"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 1}}},
		}}
	inst, err := be.LoadModel(ctx, "probe", g)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	if err := be.ConfigureBatch(inst, 1); err != nil {
		inst.Close()
		return nil, fmt.Errorf("probe: %w", err)
	}
	if err := inst.(*cuda.Instance).SetShare(0.5); err != nil {
		inst.Close()
		return nil, fmt.Errorf("probe: %w", err)
	}
	return &gpuProbe{inst: inst, in: []float32{1}, out: make([]float32, 1)}, nil
}

// transferTimes are the medians of the batch's input copied to the GPU
// and its output copied back (device cuda: pinned host memory, one
// stream, the driver's copies); on the emulator, which has no bus, the
// host copies of copyTimes.
func transferTimes(device string, m *model[*cuda.Instance], b, reps int) (up, res float64, err error) {
	if device == "emu" {
		up, res = copyTimes(m, b, reps)
		return up, res, nil
	}
	isz, osz := 4*b*m.inst.InputSize(), 4*b*m.inst.OutputSize()
	drv, err := cudrv.Open()
	if err != nil {
		return 0, 0, err
	}
	dv, err := drv.Primary(0)
	if err != nil {
		return 0, 0, err
	}
	defer dv.Close()
	n := max(isz, osz)
	h, err := dv.HostAlloc(n)
	if err != nil {
		return 0, 0, err
	}
	defer h.Free()
	d, err := dv.Alloc(n)
	if err != nil {
		return 0, 0, err
	}
	defer dv.Free(d)
	s, err := dv.NewStream(0)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	var u, r []float64
	for k := -1; k < reps; k++ {
		t0 := time.Now()
		err := errors.Join(s.WriteAsync(d, h, 0, isz), s.Sync())
		t1 := time.Now()
		err = errors.Join(err, s.ReadAsync(h, 0, d, osz), s.Sync())
		if err != nil {
			return 0, 0, err
		}
		if k >= 0 {
			u, r = append(u, float64(t1.Sub(t0).Nanoseconds())), append(r, float64(time.Since(t1).Nanoseconds()))
		}
	}
	return median(u), median(r), nil
}

// gpuName describes the device profiled.
func gpuName(device string) string {
	if device == "emu" {
		return fmt.Sprintf("the kernel emulator, %d SMs", emuSMs)
	}
	drv, err := cudrv.Open()
	if err != nil {
		return "unknown GPU"
	}
	dv, err := drv.Primary(0)
	if err != nil {
		return "unknown GPU"
	}
	defer dv.Close()
	return fmt.Sprintf("%s, %d SMs", dv.Name, dv.SMs)
}

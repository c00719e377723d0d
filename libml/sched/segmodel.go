package sched

import (
	"context"
	"errors"
	"fmt"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/kprof"
)

// Models on a segment device (Config.Segments): the device compiles and
// holds the model (one copy of its weights, LoadModel); each job in
// flight runs on an instance of its own (LinkModel, ConfigureBatch at the
// model's batch size), the scheduler's instance pool as on the cpu. The
// scheduler's view of the model (program, idempotent groups, profile,
// SPLIT cuts) is the same on every device.

// segModel is a Model's part on a segment device.
type segModel struct {
	be libml.SegmentBackend
	// base is the instance the model was loaded with: the anchor of its
	// weights, closed with the model that loaded it (owner)
	base  libml.SegmentInstance
	owner bool
}

// loadSegModel loads g on the segment device be and compiles it at
// opt.Batch.
func loadSegModel(be libml.SegmentBackend, name string, g *graph.Graph, opt ModelOptions) (*Model, error) {
	if opt.Batch <= 0 {
		opt.Batch = 1
	}
	if opt.Versions != nil {
		return nil, errors.New("kernel versions are the cpu device's (ModelOptions.Versions)")
	}
	bi, err := be.LoadModel(context.Background(), name, g)
	if err != nil {
		return nil, err
	}
	base, ok := bi.(libml.SegmentInstance)
	if !ok {
		bi.Close()
		return nil, fmt.Errorf("backend %s: its instances do not run segments", be.Name())
	}
	if err := be.ConfigureBatch(base, 1); err != nil {
		base.Close()
		return nil, err
	}
	m := &Model{name: name, batch: opt.Batch, units: be.Units(), seg: &segModel{be: be, base: base, owner: true}}
	if err := m.compileSeg(opt); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// deriveSegModel is deriveModel on a segment device: base's model at
// another batch size, over the same weights.
func deriveSegModel(base *Model, opt ModelOptions) (*Model, error) {
	if opt.Batch <= 0 {
		opt.Batch = 1
	}
	m := &Model{name: base.name, batch: opt.Batch, units: base.units, base: base,
		seg: &segModel{be: base.seg.be, base: base.seg.base}}
	if err := m.compileSeg(opt); err != nil {
		m.release()
		return nil, err
	}
	return m, nil
}

// batched reports whether the model has a batch dimension.
func (m *Model) batched() bool {
	if m.seg != nil {
		return m.seg.base.Batched()
	}
	return m.eng.BatchDynamic()
}

// compileSeg takes the device's program at opt.Batch and the scheduler's
// metadata of it.
func (m *Model) compileSeg(opt ModelOptions) error {
	base := m.seg.base
	if !base.Batched() && opt.Batch != 1 {
		return fmt.Errorf("model has a fixed batch size: Batch %d not allowed", opt.Batch)
	}
	// an instance configured at the batch size says what the program is
	in, err := m.newSegInstance()
	if err != nil {
		return err
	}
	ep, err := in.run.Program(m.batch)
	if err != nil {
		in.run.Close()
		return err
	}
	if len(ep.Inputs) != 1 || len(ep.Outputs) != 1 {
		in.run.Close()
		return fmt.Errorf("model has %d inputs and %d outputs; the scheduler runs models with one of each", len(ep.Inputs), len(ep.Outputs))
	}
	m.prog = ep
	m.all, m.free = append(m.all, in), append(m.free, in)
	m.tiles = []int{m.units}
	return m.setMeta(opt)
}

// newSegInstance is a new instance of the model on its segment device.
func (m *Model) newSegInstance() (*instance, error) {
	sm := m.seg
	li, err := sm.be.LinkModel(context.Background(), sm.base)
	if err != nil {
		return nil, err
	}
	run, ok := li.(libml.SegmentInstance)
	if !ok {
		li.Close()
		return nil, fmt.Errorf("backend %s: its instances do not run segments", sm.be.Name())
	}
	if err := sm.be.ConfigureBatch(run, m.batch); err != nil {
		run.Close()
		return nil, err
	}
	return &instance{m: m, run: run}, nil
}

// profileSegModel builds the model's profile from the device's (measured
// on one of its instances): every version of every kernel (segments run
// version 0; padding may run the others), with what the program knows
// added: op names, activation bytes and bandwidths. Given back as data
// (ModelOptions.Profile) to a later load, it is what the device pads with
// there too (installSegProfile).
func profileSegModel(m *Model, runs int) (*kprof.Model, error) {
	if runs <= 0 {
		runs = 5
	}
	in, err := m.acquire()
	if err != nil {
		return nil, err
	}
	defer m.releaseInstance(in)
	dp, err := in.run.ProfileSegments(m.batch, runs)
	if err != nil {
		return nil, err
	}
	nk := len(m.prog.Kernels)
	if len(dp.Kernels) != nk {
		return nil, fmt.Errorf("device profiled %d kernels, the program has %d", len(dp.Kernels), nk)
	}
	p := &kprof.Model{Model: m.name, Batch: m.batch, Device: dp.Device, Units: m.units, Runs: runs,
		Timing: dp.Timing, PadOccupancy: dp.PadOccupancy, Kernels: make([]kprof.Kernel, nk)}
	for i := range m.prog.Kernels {
		k := &m.prog.Kernels[i]
		by := m.kernelBytes(i)
		vs := append([]kprof.Version(nil), dp.Kernels[i].Versions...)
		if len(vs) == 0 {
			return nil, fmt.Errorf("device profiled no version of kernel %d", i)
		}
		for v := range vs {
			vp := &vs[v]
			vp.TileUnits = m.units
			if vp.KernNs > 0 {
				vp.KernBW = int64(float64(by) / vp.KernNs * 1000)
			}
			if vp.BlockNs > 0 && vp.Grid > 0 {
				vp.BlockBW = int64(float64(by) / float64(vp.Grid) / vp.BlockNs * 1000)
			}
		}
		p.Kernels[i] = kprof.Kernel{Index: i, Op: k.Op.String(), Ops: k.Ops, Name: k.Name,
			Bytes: by, Versions: vs}
		if k.Op != engine.OpNop {
			p.TotalNs += vs[0].KernNs
		}
	}
	p.WallNs = p.TotalNs
	return p, nil
}

// installSegProfile gives the device a profile the scheduler was given
// as data (ModelOptions.Profile: one an earlier load measured), for its
// padding: without it the device has no profile of the model and pads
// none of its kernels.
func installSegProfile(m *Model, p *kprof.Model) error {
	in, err := m.acquire()
	if err != nil {
		return err
	}
	defer m.releaseInstance(in)
	if err := in.run.SetKernelProfile(p); err != nil {
		return fmt.Errorf("the device's padding profile: %w", err)
	}
	return nil
}

package cuda

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"
)

// The offline kernel profile (REEF §5.2, §3 "kernel profiler"): for a
// model compiled at a batch size, per kernel, its grid, its occupancy
// (blocks per SM, from the driver's occupancy calculator), the SMs it can
// fill, its kernel time and its block time. The padding selector
// (PadSelect) reads it before every padded launch.
//
// Kernel time: the kernel launched Reps times back to back between two
// events (cuEventElapsedTime), divided by Reps; where the device has no
// timed events (the emulator) the host clock around the launches and a
// stream sync. Block time: one more launch with the stream's trace ring
// on (each block posts its start and end with %globaltimer, 256 ns
// ticks); the block time is the 90th percentile of the blocks' spans.
// Where the ring saw no block, the block time is the kernel time over its
// waves (ceil(grid / (occupancy x SMs))).
//
// One version per kernel: our kernels have one fixed tiling each (Plan),
// so REEF's multi-version kernels (§5.3) and their dominance pruning have
// nothing to choose from here.

// KernelProfile is one kernel's profile.
type KernelProfile struct {
	// Index is the engine kernel's index in the program (its execution
	// index), Kernel its entry, Op the engine op names it fuses.
	Index  int    `json:"index"`
	Kernel string `json:"kernel"`
	Op     string `json:"op,omitempty"`
	// Grid is its block count, Occupancy its blocks per SM, SMs the SMs
	// it can fill: min(ceil(Grid / Occupancy), the device's).
	Grid      int `json:"grid"`
	Occupancy int `json:"occupancy"`
	SMs       int `json:"sms"`
	// KernelNs is the kernel time, BlockNs the block time (ns);
	// RingBlocks the blocks the trace ring timed (0: BlockNs is the
	// kernel time over its waves).
	KernelNs   float64 `json:"kernel_ns"`
	BlockNs    float64 `json:"block_ns"`
	RingBlocks int     `json:"ring_blocks"`
}

// ModelProfile is a model's kernel profile at one batch size. Kernels
// has one entry per engine kernel that launches (grid > 0), in order.
type ModelProfile struct {
	Model string `json:"model"`
	Batch int    `json:"batch"`
	// SMs is the device's (or partition's) SM count, PadOccupancy
	// sg_pad's blocks per SM.
	SMs          int `json:"sms"`
	PadOccupancy int `json:"pad_occupancy"`
	// Timing says how kernel times were taken: "events" (GPU events) or
	// "host" (host clock; the emulator's times mean nothing).
	Timing  string          `json:"timing"`
	Reps    int             `json:"reps"`
	Kernels []KernelProfile `json:"kernels"`
}

// Profile is a set of model profiles: what `gpubench kprof` writes.
type Profile struct {
	Device  string         `json:"device,omitempty"`
	Command string         `json:"command,omitempty"`
	Models  []ModelProfile `json:"models"`
}

// Find returns the profile of model at batch, or nil.
func (p *Profile) Find(model string, batch int) *ModelProfile {
	for k := range p.Models {
		if p.Models[k].Model == model && p.Models[k].Batch == batch {
			return &p.Models[k]
		}
	}
	return nil
}

// WriteJSON writes the profile as indented JSON.
func (p *Profile) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return fmt.Errorf("cuda: kernel profile: %w", err)
	}
	if _, err := w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("cuda: kernel profile: %w", err)
	}
	return nil
}

// ReadProfile reads a profile written by WriteJSON and checks it.
func ReadProfile(r io.Reader) (*Profile, error) {
	var p Profile
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("cuda: kernel profile: %w", err)
	}
	for k := range p.Models {
		if err := p.Models[k].check(); err != nil {
			return nil, fmt.Errorf("cuda: kernel profile: %w", err)
		}
	}
	return &p, nil
}

// check rejects profiles the selector cannot use.
func (mp *ModelProfile) check() error {
	if mp.SMs < 1 || mp.Batch < 1 {
		return fmt.Errorf("model %q: %d SMs, batch %d", mp.Model, mp.SMs, mp.Batch)
	}
	for k, kp := range mp.Kernels {
		if kp.Grid < 1 || kp.Occupancy < 0 || kp.KernelNs < 0 || kp.BlockNs < 0 ||
			(k > 0 && kp.Index <= mp.Kernels[k-1].Index) {
			return fmt.Errorf("model %q: kernel entry %d: %+v", mp.Model, k, kp)
		}
	}
	return nil
}

// occupancyCtx is a context that knows its kernels' occupancy: the
// driver's (cuOccupancyMaxActiveBlocksPerMultiprocessor) or the
// emulator's test setting.
type occupancyCtx interface {
	occupancy(kernel string) (int, error)
}

// timedEvent is an event that can time the work between two records.
type timedEvent interface {
	elapsedNs(start gpuEvent) (float64, error)
}

// kernelOccupancy is kernel's blocks per SM on ctx.
func kernelOccupancy(ctx gpuCtx, kernel string) (int, error) {
	oc, ok := ctx.(occupancyCtx)
	if !ok {
		return 0, errors.New("the device reports no occupancy")
	}
	n, err := oc.occupancy(kernel)
	if err != nil {
		return 0, fmt.Errorf("occupancy of %s: %w", kernel, err)
	}
	return n, nil
}

// DefaultProfileReps is ProfileKernels' default launches per kernel.
const DefaultProfileReps = 20

// ProfileKernels measures the kernel profile of the instance's plan for
// batch (inputs zero; the arena's contents are overwritten, so set the
// input again before the next run): reps launches per kernel for its time
// (0: DefaultProfileReps), then one launch with the trace ring on for its
// block time. The instance must not be running.
func (i *Instance) ProfileKernels(batch, reps int) (*ModelProfile, error) {
	if reps <= 0 {
		reps = DefaultProfileReps
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	mp, err := i.profile(batch, reps)
	if err != nil {
		return nil, fmt.Errorf("cuda: ProfileKernels %q batch %d: %w", i.m.name, batch, err)
	}
	return mp, nil
}

func (i *Instance) profile(batch, reps int) (*ModelProfile, error) {
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	ln := i.ln
	sms := ln.ctx.SMs()
	mp := &ModelProfile{Model: i.m.name, Batch: batch, SMs: sms, Timing: "host", Reps: reps}
	if mp.PadOccupancy, err = kernelOccupancy(ln.ctx, KernelPad); err != nil {
		return nil, err
	}
	if len(ln.ev) < 2 {
		return nil, errors.New("a device window of 2 or more events is needed")
	}
	e0, e1 := ln.ev[0], ln.ev[1]
	if _, ok := e1.(timedEvent); ok {
		mp.Timing = "events"
	}
	// zero input, then one run so every kernel reads the values it would
	ep := p.pr.p
	if err := i.singleIO(ep); err == nil {
		n := 4 * int(ep.Inputs[0].Size())
		i.stage.Put(i.inOff, make([]byte, n))
		if err := ln.s.WriteAsync(i.arena+4*uint64(ep.Inputs[0].Off), i.stage, i.inOff, n); err != nil {
			return nil, err
		}
	}
	i.gathered = 0
	if _, _, err := i.run(p, ResumePoint{}, nil, nil); err != nil {
		return nil, err
	}
	maxGrid := 0
	for _, l := range p.launches {
		maxGrid = max(maxGrid, l.grid)
	}
	slots := 1
	for slots < 2*maxGrid && slots < 1<<20 {
		slots *= 2
	}
	ring, err := i.b.dev.HostAlloc(8 * slots)
	if err != nil {
		return nil, fmt.Errorf("trace ring: %w", err)
	}
	defer ring.Free()
	st, err := EncodeState(ring.Dev(), slots)
	if err != nil {
		return nil, err
	}
	if err := i.b.dev.Write(i.state+StateRing, st[StateRing:]); err != nil {
		return nil, fmt.Errorf("trace ring: %w", err)
	}
	defer func() {
		// tracing off again (the ring fields survive the runs' resets)
		off, _ := EncodeState(0, 0)
		i.b.dev.Write(i.state+StateRing, off[StateRing:])
	}()
	words := make([]byte, 8*slots)
	for k := range p.launches {
		l := &p.launches[k]
		if l.grid == 0 {
			continue
		}
		kp := KernelProfile{Index: k, Kernel: l.kernel, Op: ep.Kernels[k].Ops, Grid: l.grid}
		if kp.Occupancy, err = kernelOccupancy(ln.ctx, l.kernel); err != nil {
			return nil, err
		}
		if kp.Occupancy > 0 {
			kp.SMs = min((l.grid+kp.Occupancy-1)/kp.Occupancy, sms)
		}
		// kernel time
		t0 := time.Now()
		if err := e0.Record(ln.s); err != nil {
			return nil, err
		}
		for r := 0; r < reps; r++ {
			if err := ln.s.Launch(l.kernel, l.grid, l.params); err != nil {
				return nil, fmt.Errorf("kernel %d: %w", k, err)
			}
		}
		if err := e1.Record(ln.s); err != nil {
			return nil, err
		}
		if err := ln.s.Sync(); err != nil {
			return nil, fmt.Errorf("kernel %d: %w", k, err)
		}
		kp.KernelNs = float64(time.Since(t0).Nanoseconds()) / float64(reps)
		if te, ok := e1.(timedEvent); ok {
			ns, err := te.elapsedNs(e0)
			if err != nil {
				return nil, fmt.Errorf("kernel %d: %w", k, err)
			}
			kp.KernelNs = ns / float64(reps)
		}
		// block time: one traced launch
		ring.Put(0, words[:8*slots])
		if err := i.b.dev.Write(i.state+StateRingHead, make([]byte, 8)); err != nil {
			return nil, err
		}
		if err := ln.s.Launch(l.kernel, l.grid, l.params); err != nil {
			return nil, fmt.Errorf("kernel %d: %w", k, err)
		}
		if err := ln.s.Sync(); err != nil {
			return nil, fmt.Errorf("kernel %d: %w", k, err)
		}
		ring.Get(0, words[:8*slots])
		spans := blockSpans(words[:8*slots], k)
		if kp.RingBlocks = len(spans); len(spans) > 0 {
			slices.Sort(spans)
			kp.BlockNs = pctF(spans, 90)
		} else if kp.Occupancy > 0 {
			waves := (l.grid + kp.Occupancy*sms - 1) / (kp.Occupancy * sms)
			kp.BlockNs = kp.KernelNs / float64(waves)
		}
		mp.Kernels = append(mp.Kernels, kp)
	}
	return mp, nil
}

// blockSpans pairs a trace ring's start and end events of execution index
// exec's blocks (by block and SM) and returns their spans in ns (the
// ring's times are 256 ns ticks modulo 2^22).
func blockSpans(words []byte, exec int) []float64 {
	type key struct{ block, sm int }
	starts := map[key]uint32{}
	var ends []struct {
		k key
		t uint32
	}
	for o := 0; o+8 <= len(words); o += 8 {
		e, ok := DecodeRing(binary.LittleEndian.Uint64(words[o:]))
		if !ok || e.Exec != exec&0xfff {
			continue
		}
		k := key{e.Block, e.SM}
		if e.End {
			ends = append(ends, struct {
				k key
				t uint32
			}{k, e.Time})
		} else {
			starts[k] = e.Time
		}
	}
	var out []float64
	for _, e := range ends {
		if s, ok := starts[e.k]; ok {
			out = append(out, float64((e.t-s)&0x3fffff)*256)
		}
	}
	return out
}

// SetKernelProfile installs a kernel profile for the model's plan at its
// batch size, for padded runs (RunPadded) of every instance of the model:
// it must have the plan's kernels (same indices and grids) and the
// instance's SM count.
func (i *Instance) SetKernelProfile(mp *ModelProfile) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(mp.Batch)
	if err != nil {
		return fmt.Errorf("cuda: SetKernelProfile: %w", err)
	}
	if err := mp.check(); err != nil {
		return fmt.Errorf("cuda: SetKernelProfile: %w", err)
	}
	if sms := i.ln.ctx.SMs(); mp.SMs != sms {
		return fmt.Errorf("cuda: SetKernelProfile %q: profiled on %d SMs, the instance has %d", i.m.name, mp.SMs, sms)
	}
	byIdx, err := profileIndex(p, mp)
	if err != nil {
		return fmt.Errorf("cuda: SetKernelProfile %q batch %d: %w", i.m.name, mp.Batch, err)
	}
	i.m.mu.Lock()
	p.pr.prof = &kprof{mp: mp, byIdx: byIdx}
	i.m.mu.Unlock()
	return nil
}

// kprof is an installed profile: the profile of each engine kernel by
// index (nil: nothing to launch).
type kprof struct {
	mp    *ModelProfile
	byIdx []*KernelProfile
}

// profileIndex maps a profile onto a plan's kernels.
func profileIndex(p *kplan, mp *ModelProfile) ([]*KernelProfile, error) {
	byIdx := make([]*KernelProfile, len(p.launches))
	for k := range mp.Kernels {
		kp := &mp.Kernels[k]
		if kp.Index < 0 || kp.Index >= len(p.launches) {
			return nil, fmt.Errorf("profiled kernel %d outside the plan's %d", kp.Index, len(p.launches))
		}
		if l := p.launches[kp.Index]; l.grid != kp.Grid || l.kernel != kp.Kernel {
			return nil, fmt.Errorf("kernel %d: profiled %s x %d, planned %s x %d", kp.Index, kp.Kernel, kp.Grid, l.kernel, l.grid)
		}
		byIdx[kp.Index] = kp
	}
	for k, l := range p.launches {
		if l.grid > 0 && byIdx[k] == nil {
			return nil, fmt.Errorf("kernel %d (%s) not profiled", k, l.kernel)
		}
	}
	return byIdx, nil
}

package cuda

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
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
// Multi-version kernels (REEF §5.3): a kernel with several versions
// (PlanVersion: GEMM and CONV in a 64 x 64 and a 32 x 32 output tile) is
// profiled in every version, one entry each (Version). A version
// dominated by another version of the same kernel (Dominates: no worse
// in kernel time, block time, block count and occupancy, better in one)
// is marked Dominated and is never a padding candidate; the padding
// selector picks, among the others, the fastest that fits (PadVersion).

// KernelProfile is one kernel's profile.
type KernelProfile struct {
	// Index is the engine kernel's index in the program (its execution
	// index), Kernel its entry, Op the engine op names it fuses.
	Index  int    `json:"index"`
	Kernel string `json:"kernel"`
	Op     string `json:"op,omitempty"`
	// Version is the kernel version profiled (PlanVersion); Dominated
	// says another version of the kernel dominates it (PruneDominated).
	Version   int  `json:"version,omitempty"`
	Dominated bool `json:"dominated,omitempty"`
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
// has one entry per version of each engine kernel that launches
// (grid > 0), in order of index, then version; version 0 (the plan's)
// is always there.
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
		if kp.Grid < 1 || kp.Occupancy < 0 || kp.KernelNs < 0 || kp.BlockNs < 0 || kp.Version < 0 ||
			(k > 0 && kp.Index < mp.Kernels[k-1].Index) ||
			(k > 0 && kp.Index == mp.Kernels[k-1].Index && kp.Version <= mp.Kernels[k-1].Version) {
			return fmt.Errorf("model %q: kernel entry %d: %+v", mp.Model, k, kp)
		}
	}
	return nil
}

// Dominates reports whether kernel version a dominates version b of the
// same kernel (REEF §5.3, offline kernel pruning): a is no worse in every
// respect the profile records (kernel time, block time, block count, and
// occupancy, which stands for register and shared memory use: more blocks
// per SM is less of both; every kernel has the same block size) and
// better in at least one.
func Dominates(a, b *KernelProfile) bool {
	if a.KernelNs > b.KernelNs || a.BlockNs > b.BlockNs || a.Grid > b.Grid || a.Occupancy < b.Occupancy {
		return false
	}
	return a.KernelNs < b.KernelNs || a.BlockNs < b.BlockNs || a.Grid < b.Grid || a.Occupancy > b.Occupancy
}

// sameCost reports whether two versions are equal in everything
// Dominates compares.
func sameCost(a, b *KernelProfile) bool {
	return a.KernelNs == b.KernelNs && a.BlockNs == b.BlockNs && a.Grid == b.Grid && a.Occupancy == b.Occupancy
}

// dominated reports whether version vs[k] is pruned among its kernel's
// versions vs: another dominates it, or an earlier one costs the same
// (of equal versions the first is kept).
func dominated(vs []*KernelProfile, k int) bool {
	for j, o := range vs {
		if j != k && o != nil && (Dominates(o, vs[k]) || (j < k && sameCost(o, vs[k]))) {
			return true
		}
	}
	return false
}

// PruneDominated sets Dominated on every kernel version of mp that
// another version of the same kernel dominates (Dominates), or that an
// earlier version equals in cost, and clears it on the others. The
// entries must be in order (index, then version).
func (mp *ModelProfile) PruneDominated() {
	for lo := 0; lo < len(mp.Kernels); {
		hi := lo + 1
		for hi < len(mp.Kernels) && mp.Kernels[hi].Index == mp.Kernels[lo].Index {
			hi++
		}
		vs := make([]*KernelProfile, hi-lo)
		for k := range vs {
			vs[k] = &mp.Kernels[lo+k]
		}
		for k := range vs {
			vs[k].Dominated = dominated(vs, k)
		}
		lo = hi
	}
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
// input again before the next run): for every version of every kernel,
// reps launches for its time (0: DefaultProfileReps), then one launch with
// the trace ring on for its block time; then it marks the dominated
// versions (PruneDominated). The instance must not be running.
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
	if _, ok := ln.ev[1].(timedEvent); ok {
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
	for _, vs := range p.vers {
		for _, l := range vs {
			maxGrid = max(maxGrid, l.grid)
		}
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
		if p.launches[k].grid == 0 {
			continue
		}
		for v := 0; v < max(len(p.vers[k]), 1); v++ {
			kp, err := i.profileOne(p, k, v, reps, ring, words)
			if err != nil {
				return nil, err
			}
			mp.Kernels = append(mp.Kernels, kp)
		}
	}
	mp.PruneDominated()
	return mp, nil
}

// profileOne measures version v of kernel k (profile's loop body): its
// kernel time over reps launches, its block time from one launch traced
// into ring (words is the ring's size of scratch).
func (i *Instance) profileOne(p *kplan, k, v, reps int, ring pinned, words []byte) (KernelProfile, error) {
	ln := i.ln
	sms := ln.ctx.SMs()
	e0, e1 := ln.ev[0], ln.ev[1]
	slots := len(words) / 8
	l := p.launch(k, v)
	kp := KernelProfile{Index: k, Kernel: l.kernel, Op: p.pr.p.Kernels[k].Ops, Version: v, Grid: l.grid}
	var err error
	if kp.Occupancy, err = kernelOccupancy(ln.ctx, l.kernel); err != nil {
		return kp, err
	}
	if kp.Occupancy > 0 {
		kp.SMs = min((l.grid+kp.Occupancy-1)/kp.Occupancy, sms)
	}
	// kernel time
	t0 := time.Now()
	if err := e0.Record(ln.s); err != nil {
		return kp, err
	}
	for r := 0; r < reps; r++ {
		if err := ln.s.Launch(l.kernel, l.grid, l.params); err != nil {
			return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
		}
	}
	if err := e1.Record(ln.s); err != nil {
		return kp, err
	}
	if err := ln.s.Sync(); err != nil {
		return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
	}
	kp.KernelNs = float64(time.Since(t0).Nanoseconds()) / float64(reps)
	if te, ok := e1.(timedEvent); ok {
		ns, err := te.elapsedNs(e0)
		if err != nil {
			return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
		}
		kp.KernelNs = ns / float64(reps)
	}
	// block time: one traced launch
	ring.Put(0, words[:8*slots])
	if err := i.b.dev.Write(i.state+StateRingHead, make([]byte, 8)); err != nil {
		return kp, err
	}
	if err := ln.s.Launch(l.kernel, l.grid, l.params); err != nil {
		return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
	}
	if err := ln.s.Sync(); err != nil {
		return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
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
	return kp, nil
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
// it must have the plan's kernels (same indices, versions and grids;
// version 0 of every kernel, other versions optional) and the instance's
// SM count. Dominance is worked out again here (the Dominated flags
// of mp are not read): the undominated versions of each kernel are its
// padding candidates.
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
	kp, err := profileIndex(p, mp)
	if err != nil {
		return fmt.Errorf("cuda: SetKernelProfile %q batch %d: %w", i.m.name, mp.Batch, err)
	}
	i.m.mu.Lock()
	p.pr.prof = kp
	i.m.mu.Unlock()
	return nil
}

// kprof is an installed profile: per engine kernel by index, every
// version's profile (vers[k][v]; nil where not profiled; vers[k][0] is
// nil only for a kernel with nothing to launch) and the padding
// candidates (cands[k]: the profiled versions no other version
// dominates, shortest kernel time first).
type kprof struct {
	vers  [][]*KernelProfile
	cands [][]*KernelProfile
}

// version is kernel k's profile in version v, or nil.
func (kp *kprof) version(k, v int) *KernelProfile {
	if v < 0 || v >= len(kp.vers[k]) {
		return nil
	}
	return kp.vers[k][v]
}

// profileIndex maps a profile onto a plan's kernels and versions.
func profileIndex(p *kplan, mp *ModelProfile) (*kprof, error) {
	n := len(p.launches)
	kp := &kprof{vers: make([][]*KernelProfile, n), cands: make([][]*KernelProfile, n)}
	for k := range kp.vers {
		kp.vers[k] = make([]*KernelProfile, max(len(p.vers[k]), 1))
	}
	for e := range mp.Kernels {
		kv := &mp.Kernels[e]
		if kv.Index < 0 || kv.Index >= n {
			return nil, fmt.Errorf("profiled kernel %d outside the plan's %d", kv.Index, n)
		}
		l := p.launch(kv.Index, kv.Version)
		if l == nil {
			return nil, fmt.Errorf("kernel %d: profiled version %d, the plan has %d", kv.Index, kv.Version, len(kp.vers[kv.Index]))
		}
		if l.grid != kv.Grid || l.kernel != kv.Kernel {
			return nil, fmt.Errorf("kernel %d version %d: profiled %s x %d, planned %s x %d", kv.Index, kv.Version, kv.Kernel, kv.Grid, l.kernel, l.grid)
		}
		kp.vers[kv.Index][kv.Version] = kv
	}
	for k, l := range p.launches {
		if l.grid > 0 && kp.vers[k][0] == nil {
			return nil, fmt.Errorf("kernel %d (%s) not profiled", k, l.kernel)
		}
		vs := kp.vers[k]
		for v := range vs {
			if vs[v] != nil && !dominated(vs, v) {
				kp.cands[k] = append(kp.cands[k], vs[v])
			}
		}
		slices.SortStableFunc(kp.cands[k], func(a, b *KernelProfile) int {
			return cmp.Compare(a.KernelNs, b.KernelNs)
		})
	}
	return kp, nil
}

// pctF is the p-th percentile of sorted v (nearest rank).
func pctF(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}

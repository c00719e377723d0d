package cuda

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"sluice/libml/kprof"
	"sluice/native/padsel"
)

// The kernel profile (REEF §5.2, §3 "kernel profiler") in the format
// every device shares (libml/kprof): for a model compiled at a batch
// size, per kernel and version, its grid, its occupancy (blocks per SM,
// from the driver's occupancy calculator), the SMs it can fill, its
// kernel time and its block time. The padding selector (native/padsel)
// reads it before every padded launch.
//
// Kernel time: the kernel launched Runs times back to back between two
// events (cuEventElapsedTime), divided by Runs; where the device has no
// timed events (the emulator) the host clock around the launches and a
// stream sync. Block time: one more launch with the stream's trace ring
// on (each block posts its start and end with %globaltimer, 256 ns
// ticks); the block time is the 90th percentile of the blocks' spans.
// Where the ring saw no block, the block time is the kernel time over its
// waves (ceil(grid / (occupancy x SMs))).
//
// Multi-version kernels (REEF §5.3): a kernel with several versions
// (PlanVersion: GEMM and CONV in a 64 x 64 and a 32 x 32 output tile) is
// profiled in every version. A version another version of the same
// kernel dominates (kprof.Prune) is never a padding candidate; the
// padding selector picks, among the others, the fastest that fits.

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
// versions (kprof.Prune). The profile has every kernel of the program
// (one with nothing to launch has version 0 of grid 0). The instance must
// not be running.
func (i *Instance) ProfileKernels(batch, reps int) (*kprof.Model, error) {
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

func (i *Instance) profile(batch, reps int) (*kprof.Model, error) {
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	ln := i.ln
	sms := ln.ctx.SMs()
	mp := &kprof.Model{Model: i.m.name, Batch: batch, Device: "cuda", Units: sms, Timing: "host", Runs: reps}
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
	mp.Kernels = make([]kprof.Kernel, len(p.launches))
	for k := range p.launches {
		ek := &ep.Kernels[k]
		kp := &mp.Kernels[k]
		*kp = kprof.Kernel{Index: k, Op: ek.Op.String(), Ops: ek.Ops, Name: ek.Name}
		if p.launches[k].grid == 0 {
			kp.Versions = []kprof.Version{{}}
			continue
		}
		for v := 0; v < max(len(p.vers[k]), 1); v++ {
			vp, err := i.profileOne(p, k, v, reps, ring, words)
			if err != nil {
				return nil, err
			}
			kp.Versions = append(kp.Versions, vp)
		}
		mp.TotalNs += kp.Versions[0].KernNs
	}
	mp.WallNs = mp.TotalNs
	kprof.Prune(mp)
	return mp, nil
}

// profileOne measures version v of kernel k (profile's loop body): its
// kernel time over reps launches, its block time from one launch traced
// into ring (words is the ring's size of scratch).
func (i *Instance) profileOne(p *kplan, k, v, reps int, ring pinned, words []byte) (kprof.Version, error) {
	ln := i.ln
	sms := ln.ctx.SMs()
	slots := len(words) / 8
	l := p.launch(k, v)
	kp := kprof.Version{Entry: l.kernel, Grid: int64(l.grid)}
	var err error
	if kp.Occupancy, err = kernelOccupancy(ln.ctx, l.kernel); err != nil {
		return kp, err
	}
	if kp.Occupancy > 0 {
		kp.SMs = min((l.grid+kp.Occupancy-1)/kp.Occupancy, sms)
	}
	// kernel time
	kp.KernNs, err = i.timeReps(reps, func() error { return ln.s.Launch(l.kernel, l.grid, l.params) })
	if err != nil {
		return kp, fmt.Errorf("kernel %d version %d: %w", k, v, err)
	}
	if _, timed := ln.ev[1].(timedEvent); timed && v == 0 {
		// (host timing, the emulator's, would make padding's choices
		// depend on the machine's load: measured on a GPU only)
		if kp.PadNs, err = i.profilePad(p, k, kp.Occupancy, reps); err != nil {
			return kp, fmt.Errorf("kernel %d as a padded launch: %w", k, err)
		}
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
		kp.BlockNs = kp.KernNs / float64(waves)
	}
	return kp, nil
}

// profilePad measures kernel k (version 0, occ blocks per SM on its own)
// as a padded launch with nothing to pad: reps times the control block
// out, sg_pad, the control block back, as a padded launch queues them,
// timed like the kernel time. It returns 0 for a kernel that fills the
// device at sg_pad's occupancy (never padded) and on a partition
// (padding needs the whole device).
func (i *Instance) profilePad(p *kplan, k, occ, reps int) (float64, error) {
	ln := i.ln
	if ln.own {
		return 0, nil
	}
	if err := i.padBuffers(); err != nil {
		return 0, err
	}
	pb, sms, l := i.pad, ln.ctx.SMs(), &p.launches[k]
	rt := padsel.RT{Grid: l.grid, Occupancy: pb.occupancy(occ)}
	rtSMs := padsel.RTUnits(rt, sms)
	if rtSMs >= sms {
		return 0, nil
	}
	_, rtHi := pb.smRange(0, rtSMs)
	ctl := PadCtl{RTOp: Op(p.pr.p.Kernels[k].Op), RTGrid: uint32(l.grid), RTSMs: rtHi}
	if err := ctl.encode(pb.cb); err != nil {
		return 0, err
	}
	pb.stage.Put(padStageOut(0), pb.cb)
	var args Args
	args.Decode(l.params[16:])
	params := PackPad(i.state, int64(k), &args, pb.ctl)
	return i.timeReps(reps, func() error {
		if err := ln.s.WriteAsync(pb.ctl, pb.stage, padStageOut(0), PadCtlSize); err != nil {
			return err
		}
		if err := ln.s.Launch(KernelPad, pb.occ*sms, params); err != nil {
			return err
		}
		return ln.s.ReadAsync(pb.stage, padStageBack(0), pb.ctl, PadCtlSize)
	})
}

// timeReps times reps rounds of queue (each queues work on the
// instance's stream) between two of the window's events: ns per round by
// the events where they are timed (a GPU), else by the host's clock
// around the rounds and a sync.
func (i *Instance) timeReps(reps int, queue func() error) (float64, error) {
	ln := i.ln
	e0, e1 := ln.ev[0], ln.ev[1]
	t0 := time.Now()
	if err := e0.Record(ln.s); err != nil {
		return 0, err
	}
	for r := 0; r < reps; r++ {
		if err := queue(); err != nil {
			return 0, err
		}
	}
	if err := e1.Record(ln.s); err != nil {
		return 0, err
	}
	if err := ln.s.Sync(); err != nil {
		return 0, err
	}
	ns := float64(time.Since(t0).Nanoseconds()) / float64(reps)
	if te, ok := e1.(timedEvent); ok {
		t, err := te.elapsedNs(e0)
		if err != nil {
			return 0, err
		}
		ns = t / float64(reps)
	}
	return ns, nil
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
// batch size, for padded runs (RunSegmentPadded) of every instance of the
// model: it must have the plan's kernels (every kernel in index order,
// versions from 0 with the plan's entries and grids; versions past 0 are
// optional) and the instance's SM count. Dominance is worked out again
// here (the Pruned flags of mp are not read, nor changed): the
// undominated versions of each kernel are its padding candidates.
func (i *Instance) SetKernelProfile(mp *kprof.Model) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(mp.Batch)
	if err != nil {
		return fmt.Errorf("cuda: SetKernelProfile: %w", err)
	}
	if err := mp.Check(); err != nil {
		return fmt.Errorf("cuda: SetKernelProfile: %w", err)
	}
	if sms := i.ln.ctx.SMs(); mp.Units != sms {
		return fmt.Errorf("cuda: SetKernelProfile %q: profiled on %d SMs, the instance has %d", i.m.name, mp.Units, sms)
	}
	pp, err := newPadProf(p, mp)
	if err != nil {
		return fmt.Errorf("cuda: SetKernelProfile %q batch %d: %w", i.m.name, mp.Batch, err)
	}
	i.m.mu.Lock()
	p.pr.prof = pp
	i.m.mu.Unlock()
	return nil
}

// padProf is an installed profile: per engine kernel by index, every
// version's profile (vers[k][v], a copy of the caller's; vers[k] is
// empty for a kernel with nothing to launch) and the padding candidates
// (cands[k]: the versions no other version dominates, shortest kernel
// time first).
type padProf struct {
	vers  [][]kprof.Version
	cands [][]profVer
}

// profVer is version v of a kernel and its profile.
type profVer struct {
	v int
	p *kprof.Version
}

// version is kernel k's profile in version v (p nil where not profiled).
func (pp *padProf) version(k, v int) profVer {
	if v < 0 || v >= len(pp.vers[k]) {
		return profVer{v: v}
	}
	return profVer{v: v, p: &pp.vers[k][v]}
}

// newPadProf maps a profile onto a plan's kernels and versions.
func newPadProf(p *kplan, mp *kprof.Model) (*padProf, error) {
	n := len(p.launches)
	if len(mp.Kernels) != n {
		return nil, fmt.Errorf("profile has %d kernels, the plan %d", len(mp.Kernels), n)
	}
	pp := &padProf{vers: make([][]kprof.Version, n), cands: make([][]profVer, n)}
	for k := range mp.Kernels {
		vs := mp.Kernels[k].Versions
		if p.launches[k].grid == 0 {
			if len(vs) != 1 || vs[0].Grid != 0 {
				return nil, fmt.Errorf("kernel %d: profiled %d versions of grid %d, the plan launches nothing", k, len(vs), vs[0].Grid)
			}
			continue
		}
		if nv := max(len(p.vers[k]), 1); len(vs) > nv {
			return nil, fmt.Errorf("kernel %d: profiled version %d, the plan has %d", k, len(vs)-1, nv)
		}
		for v := range vs {
			l := p.launch(k, v)
			if int64(l.grid) != vs[v].Grid || l.kernel != vs[v].Entry {
				return nil, fmt.Errorf("kernel %d version %d: profiled %s x %d, planned %s x %d", k, v, vs[v].Entry, vs[v].Grid, l.kernel, l.grid)
			}
		}
		pp.vers[k] = slices.Clone(vs)
	}
	// dominance, worked out on the copy
	ks := make([]kprof.Kernel, n)
	for k := range pp.vers {
		ks[k] = kprof.Kernel{Index: k, Versions: pp.vers[k]}
	}
	kprof.Prune(&kprof.Model{Kernels: ks})
	for k, vs := range pp.vers {
		for v := range vs {
			if !vs[v].Pruned {
				pp.cands[k] = append(pp.cands[k], profVer{v: v, p: &vs[v]})
			}
		}
		slices.SortStableFunc(pp.cands[k], func(a, b profVer) int {
			return cmp.Compare(a.p.KernNs, b.p.KernNs)
		})
	}
	return pp, nil
}

// pctF is the p-th percentile of sorted v (nearest rank).
func pctF(v []float64, p float64) float64 {
	if len(v) == 0 {
		return 0
	}
	k := int(math.Ceil(p/100*float64(len(v)))) - 1
	return v[min(max(k, 0), len(v)-1)]
}

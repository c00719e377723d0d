package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"sluice/libml"
	"sluice/libml/kprof"
	"sluice/native/padsel"
)

// Dynamic kernel padding on the backend (REEF §5, Figure 12): an RT
// job's kernels launch as sg_pad launches that also run blocks of
// suspended (preempted) best-effort jobs on other instances, on the SMs
// the RT kernel cannot occupy.
//
// Before each RT kernel, RunSegmentPadded asks its caller for the suspended BE
// jobs (PadJob: an instance, a batch size and the point its next run
// resumes from), looks up the RT kernel's and each job's next kernel's
// profile (SetKernelProfile) and lets the padding selector choose
// (native/padsel: one call per launch). With no pick the
// kernel launches as usual. Otherwise it queues, on the RT stream: the
// control block (PadCtl), a clear of each picked BE instance's
// preemption flag (a preempted instance's flag is still set, and sg_pad's
// BE blocks take no work from a flagged stream), the sg_pad launch
// (sg_pad's occupancy x SMs blocks, so that every SM gets some) and the
// control block's copy back. The result moves each BE job's resume point:
// by the blocks done before the first one lost or unclaimed
// (PadResult.Resume), to the next kernel when its kernel is done; when
// the BE stream was preempted mid-block (a lost block: not a case the
// DISB produces, since a suspended job's instance is not running), to
// the idempotent group entry of that kernel, as a preempted run would.
// The BE job's next segment (RunSegment from its resume point) continues
// from there.
//
// A padded launch's result must be back before a later padded launch
// can pick the same jobs. The run never waits for it: a picked job's
// instance stays locked until its result is applied, so the selector
// skips it meanwhile (holdJob's TryLock), and the result is applied once
// the device window has waited for the launch anyway (the host waits on
// the event of the kernel Window launches back before each launch) or
// when the run drains. Each launch in flight has its own control block
// (one per place in the window), so padded kernels overlap their launch
// with the kernels before them as unpadded ones do. (A sync before each
// padded launch, as padding did first, doubled the RT kernel time of a
// batch-1 ResNet-50 on an H200: 76 kernels, 76 host round trips.)
// Padding needs the RT instance on the whole device: in a green
// context %smid values are the partition's physical SM ids, so a
// partitioned instance launches unpadded.
//
// PTX does not promise that %smid takes the values 0..SMs-1. Before its
// first padded launch an instance learns the device's SM ids: sg_clock
// over 8 blocks per SM records each block's %smid. When it saw SMs
// distinct ids, the selector's SM indices (0..SMs-1) map onto them in
// order, so that SM ranges are ranges of ids (sg_pad's RT SMs are the ids
// below rt_sms); otherwise the ids are taken to be 0..SMs-1.

// PadJob is a suspended best-effort job a padded run may advance: its
// Inst must be an *Instance of the same backend (others are skipped). It
// is the segment contract's type (libml.PadJob).
type PadJob = libml.PadJob

// PadStats is what padding did in padded segments (Stats.Pad).
type PadStats struct {
	// Kernels is the RT kernels launched, Padded those launched through
	// sg_pad with BE blocks, BEKernels the BE kernels they carried and
	// BEBlocks the BE blocks done.
	Kernels, Padded, BEKernels, BEBlocks int64
	// BEVersioned is the BE kernels carried in a version other than the
	// default (PlanVersion; counted in BEKernels too).
	BEVersioned int64
	// Costly is the RT kernels launched unpadded because their profile
	// says a padded launch costs them more than kprof.PadCostTol.
	Costly int64
	// FlagClears is the BE preemption flags padded launches cleared (a
	// copy each; a flag already known to be clear is not written).
	FlagClears int64
}

// padBufs are an instance's padded-launch buffers: a control block in
// device memory per launch that may be in flight (slots), pinned staging
// (per slot the block out and the block back, then a zero word for the
// BE flags) and the block's host encoding (out, then back).
type padBufs struct {
	ctl   uint64 // slots control blocks, PadCtlSize apart
	slots int
	stage pinned
	cb    []byte
	occ   int // sg_pad's blocks per SM
	// smid maps SM index k (0..SMs-1) to the k-th smallest %smid (nil:
	// the identity)
	smid []uint32
}

// occupancy is a kernel's blocks per SM inside a padded launch: its own
// (occ, at least 1), at most sg_pad's, since a padded launch is one
// sg_pad kernel.
func (pb *padBufs) occupancy(occ int) int { return min(max(occ, 1), pb.occ) }

// smRange maps an SM index range [lo, hi) onto %smid values.
func (pb *padBufs) smRange(lo, hi int) (uint32, uint32) {
	if pb.smid == nil || hi <= lo {
		return uint32(lo), uint32(hi)
	}
	return pb.smid[lo], pb.smid[hi-1] + 1
}

// learnSMIDs runs sg_clock over 8 blocks per SM on the instance's stream
// and returns the device's SM ids (distinctSMIDs).
func (i *Instance) learnSMIDs(sms int) ([]uint32, error) {
	grid := 8 * sms
	out, err := i.b.dev.Alloc(16 * grid)
	if err != nil {
		return nil, err
	}
	defer i.b.dev.Free(out)
	s := i.ln.s
	// a preempted run leaves the flag set, and sg_clock's blocks would
	// exit in their prologue
	if err := s.WriteAsync(i.state, i.stage, stageReset, 16); err != nil {
		return nil, err
	}
	if err := s.Launch(KernelClock, grid, Pack(i.state, 0, &Args{Out: out})); err != nil {
		return nil, err
	}
	if err := s.Sync(); err != nil {
		return nil, err
	}
	b := make([]byte, 16*grid)
	if err := i.b.dev.Read(b, out); err != nil {
		return nil, err
	}
	return distinctSMIDs(b, sms), nil
}

// distinctSMIDs reads sg_clock's output (u64 pairs: time, %smid) and
// returns the distinct SM ids, sorted, when there are exactly sms of
// them and they are not 0..sms-1; nil (the identity) otherwise.
func distinctSMIDs(b []byte, sms int) []uint32 {
	seen := map[uint32]bool{}
	for o := 0; o+16 <= len(b); o += 16 {
		seen[uint32(binary.LittleEndian.Uint64(b[o+8:]))] = true
	}
	if len(seen) != sms {
		return nil
	}
	ids := make([]uint32, 0, sms)
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for k, id := range ids {
		if id != uint32(k) {
			return ids
		}
	}
	return nil
}

// Staging offsets: slot n's control block goes out from padStageOut(n)
// and comes back to padStageBack(n); the zero word follows the slots.
func padStageOut(n int) int      { return 2 * PadCtlSize * n }
func padStageBack(n int) int     { return 2*PadCtlSize*n + PadCtlSize }
func padStageZero(slots int) int { return 2 * PadCtlSize * slots }
func padStageSize(slots int) int { return 2*PadCtlSize*slots + 8 }

func (i *Instance) freePad() error {
	if i.pad == nil {
		return nil
	}
	err := i.b.dev.Free(i.pad.ctl)
	if e := i.pad.stage.Free(); err == nil {
		err = e
	}
	i.pad = nil
	return err
}

// padRun is one padded run's state.
type padRun struct {
	inst *Instance
	jobs func() []*PadJob
	st   PadStats
	off  bool // no padding: the instance is in a partition or unprofiled
	rt   *padProf
	sms  int
	// the padded launches in flight, by control-block slot, and the slot
	// choose fills
	slots  []padSlot
	cur    int
	rtArgs Args
	// scratch
	cands []padsel.Job
	held  []padHeld
	picks []padsel.Pick
}

// padSlot is a padded launch and its control block: in flight (pending)
// from its launch until its result is applied. q is the launch's place
// in the run's queue (runTo's count of launches).
type padSlot struct {
	pending bool
	q       int
	ctl     PadCtl
	picked  []padHeld
}

// padHeld is a BE job the run holds (its instance locked) for a launch,
// with the version its next kernel runs in.
type padHeld struct {
	j    *PadJob
	inst *Instance
	p    *kplan
	ver  int
	// vers are the versions offered to the selector, by its index
	vers [padsel.MaxVersions]int
}

// reset makes pr a fresh run of instance i offered jobs, keeping the
// room its slots and scratch slices have.
func (pr *padRun) reset(i *Instance, jobs func() []*PadJob) {
	*pr = padRun{inst: i, jobs: jobs, slots: pr.slots, cands: pr.cands[:0], held: pr.held[:0], picks: pr.picks[:0]}
}

func (pr *padRun) init(i *Instance, p *kplan) error {
	i.m.mu.Lock()
	pr.rt = p.pr.prof
	i.m.mu.Unlock()
	if pr.rt == nil || i.ln.own || pr.jobs == nil {
		pr.off = true
		return nil
	}
	pr.sms = i.ln.ctx.SMs()
	if err := i.padBuffers(); err != nil {
		return err
	}
	if len(pr.slots) != i.pad.slots {
		pr.slots = make([]padSlot, i.pad.slots)
	}
	return nil
}

// padBuffers makes the instance's padded-launch buffers (padBufs), once:
// sg_pad's occupancy, the control blocks and their staging, the SM ids.
func (i *Instance) padBuffers() error {
	if i.pad == nil {
		sms := i.ln.ctx.SMs()
		occ, err := kernelOccupancy(i.ln.ctx, KernelPad)
		if err != nil {
			return err
		}
		// a launch in flight per place in the device window
		slots := max(len(i.ln.ev), 1)
		ctl, err := i.b.dev.Alloc(PadCtlSize * slots)
		if err != nil {
			return fmt.Errorf("padding control blocks: %w", err)
		}
		stage, err := i.b.dev.HostAlloc(padStageSize(slots))
		if err != nil {
			i.b.dev.Free(ctl)
			return fmt.Errorf("padding staging: %w", err)
		}
		smid, err := i.learnSMIDs(sms)
		if err != nil {
			i.b.dev.Free(ctl)
			stage.Free()
			return fmt.Errorf("SM ids: %w", err)
		}
		i.pad = &padBufs{ctl: ctl, slots: slots, stage: stage, cb: make([]byte, PadCtlSize), occ: max(occ, 1), smid: smid}
	}
	return nil
}

// launch launches RT kernel k (grid blocks, parameters params) through
// sg_pad when the selector pads it, and reports whether it did. q is the
// launch's place in the run's queue; the launches before q-window have
// run (the host waited on their window event), so their results apply
// first.
func (pr *padRun) launch(i *Instance, p *kplan, k int, params []byte, grid, q int) (bool, error) {
	pr.st.Kernels++
	if pr.off {
		return false, nil
	}
	pr.finishRun(q - len(i.ln.ev))
	if len(pr.rt.vers[k]) == 0 {
		return false, nil
	}
	kp := &pr.rt.vers[k][0]
	if kp.PadCostly() {
		pr.st.Costly++
		return false, nil
	}
	pr.cur = -1
	for n := range pr.slots {
		if !pr.slots[n].pending {
			pr.cur = n
			break
		}
	}
	if pr.cur < 0 {
		return false, nil // every control block is in flight
	}
	if !pr.choose(i, p, k, kp, params, grid) {
		return false, nil
	}
	s, pb, sl := i.ln.s, i.pad, &pr.slots[pr.cur]
	ctl := pb.ctl + uint64(pr.cur*PadCtlSize)
	if err := sl.ctl.encode(pb.cb); err != nil {
		pr.unhold()
		return false, err
	}
	pb.stage.Put(padStageOut(pr.cur), pb.cb)
	if err := s.WriteAsync(ctl, pb.stage, padStageOut(pr.cur), PadCtlSize); err != nil {
		pr.unhold()
		return false, err
	}
	for _, h := range sl.picked {
		if h.inst.flagClear.Load() {
			continue
		}
		if err := s.WriteAsync(h.inst.state+StateFlag, pb.stage, padStageZero(pb.slots), 4); err != nil {
			pr.unhold()
			return false, err
		}
		// the job stays locked until this launch has run: its own
		// stream cannot run (nor be preempted) before the write lands
		h.inst.flagClear.Store(true)
		pr.st.FlagClears++
	}
	if err := s.Launch(KernelPad, pb.occ*pr.sms, PackPad(i.state, int64(k), &pr.rtArgs, ctl)); err != nil {
		pr.unhold()
		return false, err
	}
	if err := s.ReadAsync(pb.stage, padStageBack(pr.cur), ctl, PadCtlSize); err != nil {
		pr.unhold()
		return false, err
	}
	sl.pending, sl.q = true, q
	pr.st.Padded++
	pr.st.BEKernels += int64(len(pr.picks))
	for _, h := range sl.picked {
		if h.ver != 0 {
			pr.st.BEVersioned++
		}
	}
	return true, nil
}

// choose is a padded launch's host-side decision for RT kernel k (grid
// blocks, parameters params, profile kp): the suspended jobs' next
// kernels as candidates (their instances locked, each in every version it
// may run in; a job in a launch still in flight is locked already and
// skipped), the selection (padsel.Launch: versions, Rule 1, the SM
// ranges), and the launch's control block in slot pr.cur's ctl (the RT
// arguments in pr.rtArgs) with the picked jobs, still locked, in its
// picked. It reports whether anything was picked (if not, nothing stays
// locked).
func (pr *padRun) choose(i *Instance, p *kplan, k int, kp *kprof.Version, params []byte, grid int) bool {
	occ := i.pad.occ
	rt := padsel.RT{Grid: grid, Occupancy: i.pad.occupancy(kp.Occupancy),
		RemainingNs: kp.KernNs * float64(grid) / float64(kp.Grid)}
	rtSMs := padsel.RTUnits(rt, pr.sms)
	if rtSMs >= pr.sms || !(rt.RemainingNs > 0) {
		return false
	}
	pr.cands, pr.held = pr.cands[:0], pr.held[:0]
	for _, j := range pr.jobs() {
		if len(pr.held) == 4*padsel.MaxBE {
			break
		}
		pr.cands = append(pr.cands, padsel.Job{})
		h, ok := holdJob(i, j, occ, &pr.cands[len(pr.cands)-1])
		if !ok {
			pr.cands = pr.cands[:len(pr.cands)-1]
			continue
		}
		pr.held = append(pr.held, h)
	}
	pr.picks = padsel.Launch(rt, pr.sms, pr.cands, pr.picks)
	var picked [4 * padsel.MaxBE]bool
	for _, pk := range pr.picks {
		picked[pk.Job] = true
		h := &pr.held[pk.Job]
		h.ver = h.vers[pk.Version]
	}
	// picked follows the candidates' order, which is the picks' order
	// (the selector picks in candidate order)
	sl := &pr.slots[pr.cur]
	sl.picked = sl.picked[:0]
	for c, h := range pr.held {
		if picked[c] {
			sl.picked = append(sl.picked, h)
		} else {
			h.inst.mu.Unlock()
		}
	}
	if len(pr.picks) == 0 {
		return false
	}
	// the launch: RT kernel k on SMs [0, rtSMs), the picks on theirs
	pr.rtArgs.Decode(params[16:])
	ep := p.pr.p
	_, rtHi := i.pad.smRange(0, rtSMs)
	sl.ctl = PadCtl{RTOp: Op(ep.Kernels[k].Op), RTGrid: uint32(grid), RTSMs: rtHi, BE: sl.ctl.BE[:0]}
	for n, pk := range pr.picks {
		h := sl.picked[n]
		at := h.j.At
		var a Args
		a.Decode(h.p.launch(at.Kernel, h.ver).params[16:])
		a.T[TBase] += int64(at.Block)
		lo, hi := i.pad.smRange(int(pk.Lo), int(pk.Hi))
		sl.ctl.BE = append(sl.ctl.BE, PadKernel{Op: Op(h.p.pr.p.Kernels[at.Kernel].Op), Args: a,
			State: h.inst.state, Exec: int64(at.Kernel), Grid: uint32(pk.Blocks),
			SMLo: lo, SMHi: hi})
	}
	return true
}

// holdJob locks j's instance (unless busy, another backend's, this one,
// unprofiled or done) and returns it with its next kernel as a candidate
// in c to pad beside an RT kernel (occ: sg_pad's blocks per SM): in the
// version it started in, or, when it has not started, in each of its
// undominated versions, of which the selector chooses.
func holdJob(i *Instance, j *PadJob, occ int, c *padsel.Job) (padHeld, bool) {
	be, ok := j.Inst.(*Instance)
	if !ok || be == nil || be == i || be.b != i.b || !be.mu.TryLock() {
		return padHeld{}, false
	}
	p, err := be.planFor(j.Batch)
	if err != nil || be.closed {
		be.mu.Unlock()
		return padHeld{}, false
	}
	be.m.mu.Lock()
	prof := p.pr.prof
	be.m.mu.Unlock()
	// past kernels with nothing to launch
	for j.At.Kernel < len(p.launches) && j.At.Block == 0 && p.launches[j.At.Kernel].grid == 0 {
		j.At.Kernel++
	}
	if j.At.Block == 0 {
		j.At.Version = 0
	}
	k := j.At.Kernel
	if prof == nil || k >= len(p.launches) {
		be.mu.Unlock()
		return padHeld{}, false
	}
	h := padHeld{j: j, inst: be, p: p}
	add := func(v profVer, done int) {
		o := min(v.p.Occupancy, occ)
		c.Versions[c.N] = padsel.Version{Grid: int32(v.p.Grid) - int32(done), Occupancy: int32(o),
			BlockNs: v.p.BlockNs, KernelNs: v.p.KernNs, OK: int32(min(max(o, 0), 1))}
		h.vers[c.N] = v.v
		c.N++
	}
	if j.At.Block > 0 {
		if v := prof.version(k, j.At.Version); v.p != nil && int64(j.At.Block) < v.p.Grid {
			add(v, j.At.Block)
		}
	} else {
		for _, v := range prof.cands[k] {
			if int(c.N) < padsel.MaxVersions {
				add(v, 0)
			}
		}
	}
	if c.N == 0 {
		be.mu.Unlock()
		return padHeld{}, false
	}
	return h, true
}

// maxVersions bounds the versions of a kernel (Versions).
const maxVersions = padsel.MaxVersions

// unhold releases the jobs of slot pr.cur's padded launch that did not
// happen.
func (pr *padRun) unhold() {
	sl := &pr.slots[pr.cur]
	for _, h := range sl.picked {
		h.inst.mu.Unlock()
	}
	sl.picked = sl.picked[:0]
}

// finishRun applies the results of the padded launches in flight at
// queue places up to q (they have run: the stream passed them).
func (pr *padRun) finishRun(q int) {
	for n := range pr.slots {
		if sl := &pr.slots[n]; sl.pending && sl.q <= q {
			pr.finishSlot(sl, n)
		}
	}
}

// finish applies the results of every padded launch in flight (the
// stream was synchronized) and releases their jobs.
func (pr *padRun) finish() {
	for n := range pr.slots {
		if sl := &pr.slots[n]; sl.pending {
			pr.finishSlot(sl, n)
		}
	}
}

// finishSlot applies slot n's launch result (its control block is back)
// and releases its jobs.
func (pr *padRun) finishSlot(sl *padSlot, n int) {
	sl.pending = false
	cb := pr.inst.pad.cb
	pr.inst.pad.stage.Get(padStageBack(n), cb)
	res := sl.ctl.Result(cb)
	for n, h := range sl.picked {
		j := h.j
		lost := binary.LittleEndian.Uint32(cb[offPadLost+4*(n+1):])
		done := int64(res.Done[n+1])
		pr.st.BEBlocks += done
		j.Blocks += done
		if lost != math.MaxUint32 {
			// cut mid-block (its stream's flag was set during the
			// launch): restore as a preempted run would
			h.inst.flagClear.Store(false)
			j.At = ResumePoint{Kernel: h.p.pr.p.IdemEntry[j.At.Kernel]}
		} else {
			j.At.Block += int(res.Resume[n+1])
			switch {
			case j.At.Block >= h.p.launch(j.At.Kernel, h.ver).grid:
				j.At = ResumePoint{Kernel: j.At.Kernel + 1}
				j.Kernels++
			case j.At.Block > 0:
				// started in h.ver: the job finishes it in that version
				j.At.Version = h.ver
			default:
				// nothing to resume from: any version may (re)start it
				j.At.Version = 0
			}
		}
		h.inst.mu.Unlock()
	}
	sl.picked = sl.picked[:0]
}

// release settles the padded launches still in flight when the run
// failed between a launch and its result: once the stream has drained,
// their results apply; if the stream failed, the jobs are released as
// they were.
func (pr *padRun) release() {
	pending := false
	for n := range pr.slots {
		pending = pending || pr.slots[n].pending
	}
	if !pending {
		return
	}
	if pr.inst.ln.s.Sync() == nil {
		pr.finish()
		return
	}
	for n := range pr.slots {
		if pr.slots[n].pending {
			pr.slots[n].pending = false
			pr.cur = n
			pr.unhold()
		}
	}
}

// offParamsBase is the offset of the first block (Args.T[TBase]) in a
// packed parameter buffer (Pack: state, index, then the arguments).
const offParamsBase = 16 + offArgsT + 8*TBase

// rebase returns a copy of a packed parameter buffer whose launch starts
// block blocks further into the kernel's grid.
func rebase(params []byte, block int) []byte {
	out := append([]byte(nil), params...)
	le := binary.LittleEndian
	le.PutUint64(out[offParamsBase:], le.Uint64(out[offParamsBase:])+uint64(block))
	return out
}

// every kernel's versions fit holdJob's scratch
var _ [maxVersions - len(versionTiles)]struct{}

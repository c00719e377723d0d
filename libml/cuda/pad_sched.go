package cuda

// The padding selector (REEF §5.2): before an RT kernel launches, choose
// the best-effort kernels whose blocks sg_pad runs beside it, and the SMs
// each may use. It is pure arithmetic over offline profiles (KernelProfile):
// no allocation (the picks go into a caller's slice), a loop over the
// candidates; BenchmarkPadSelect measures it against REEF's 2 µs.
//
// Two rules keep the RT kernel first:
//
//   - Rule 1: a BE kernel qualifies only if its profiled block time is
//     below the RT kernel's remaining time (REEF: the padded launch lasts
//     as long as its slowest block; sg_pad's BE blocks stop claiming
//     work once the RT kernel's blocks are all done, so a BE block
//     outlives the RT kernel by at most one block time).
//   - Rule 2: BE blocks only on SMs the RT kernel cannot occupy. The RT
//     kernel needs ceil(grid / occupancy) SMs, which are [0, that); BE
//     kernels get disjoint ranges of the rest; when the RT kernel needs
//     every SM there is no padding. (REEF states its Rule 2 as "the BE
//     kernel's occupancy must not lower the RT kernel's": our padded
//     launch is one kernel, sg_pad, whose occupancy is fixed, so the
//     occupancy the RT kernel gets under padding is sg_pad's whatever the
//     BE kernels are; callers pass min(kernel's, sg_pad's) occupancy.)
//
// A kernel with several versions (PlanVersion) is one candidate: the
// version PadVersion chooses when the kernel has not started, the one it
// started in otherwise (a kernel is finished in its version).
//
// Candidates are taken in the order given (the caller's fairness: a
// round-robin over its BE queues) until PadMaxBE are picked or the free
// SMs run out. A picked kernel gets as many SMs as it needs to run all
// of its remaining blocks within the RT kernel's remaining time (its
// blocks run back to back on an SM, occupancy at a time), at least one;
// SMs still free after the last pick go to it as well (they would idle).

// PadRT is the real-time kernel about to launch.
type PadRT struct {
	// Grid is its block count, Occupancy its blocks per SM in the padded
	// launch.
	Grid, Occupancy int
	// RemainingNs is its profiled remaining time (the whole kernel time
	// for a kernel about to start).
	RemainingNs float64
}

// PadCand is a suspended best-effort job's next kernel (in one version).
type PadCand struct {
	// Grid is the blocks it has left, Occupancy its blocks per SM in the
	// padded launch, BlockNs its profiled block time.
	Grid, Occupancy int
	BlockNs         float64
	// KernelNs is its profiled kernel time: PadVersion prefers the
	// shortest (PadSelect does not read it).
	KernelNs float64
}

// qualifies is Rule 1 for c beside rt, for a candidate with blocks, an
// occupancy and a profiled block time (PadVersion and PadSelect skip
// the others).
func (c *PadCand) qualifies(rt PadRT) bool {
	return c.Grid > 0 && c.Occupancy > 0 && c.BlockNs > 0 && c.BlockNs < rt.RemainingNs
}

// PadVersion chooses the version a best-effort kernel about to start
// runs in when it pads rt on a device of sms SMs (REEF §5.3,
// multi-version kernel selection): among its versions vers (one
// candidate each, not dominated), the one with the shortest kernel time
// of those that satisfy both rules: Rule 1, block time below rt's
// remaining time, and Rule 2, SMs that rt leaves free (which every
// version needs equally: the occupancy of a padded launch is sg_pad's).
// A version without blocks, occupancy or block time never qualifies. It
// returns the index in vers, or -1 when none qualifies; of equal kernel
// times the first wins. It does not allocate.
func PadVersion(rt PadRT, sms int, vers []PadCand) int {
	if PadRTSMs(rt, sms) >= sms || rt.RemainingNs <= 0 {
		return -1
	}
	best := -1
	for k := range vers {
		c := &vers[k]
		if !c.qualifies(rt) {
			continue
		}
		if best < 0 || c.KernelNs < vers[best].KernelNs {
			best = k
		}
	}
	return best
}

// PadPick is a chosen candidate: Cand indexes the candidates, and its
// blocks run on SMs [SMLo, SMHi).
type PadPick struct {
	Cand       int
	SMLo, SMHi int
}

// PadRTSMs is the SMs the RT kernel occupies: ceil(grid / occupancy),
// at most sms (0 for an empty kernel; sms when the occupancy is unknown).
func PadRTSMs(rt PadRT, sms int) int {
	if rt.Grid <= 0 {
		return 0
	}
	if rt.Occupancy <= 0 {
		return sms
	}
	return min((rt.Grid+rt.Occupancy-1)/rt.Occupancy, sms)
}

// PadSelect picks up to PadMaxBE candidates to pad rt on a device of sms
// SMs and appends them to out[:0], which it returns; no pick when rt
// needs every SM or no candidate passes Rule 1. A candidate without
// blocks, occupancy or a profiled block time never qualifies.
func PadSelect(rt PadRT, sms int, cands []PadCand, out []PadPick) []PadPick {
	out = out[:0]
	next := PadRTSMs(rt, sms)
	if next >= sms || rt.RemainingNs <= 0 {
		return out
	}
	for k := range cands {
		c := &cands[k]
		if !c.qualifies(rt) {
			continue
		}
		// blocks one SM runs while the RT kernel runs
		rounds := int(rt.RemainingNs / c.BlockNs)
		perSM := c.Occupancy * max(rounds, 1)
		need := (c.Grid + perSM - 1) / perSM
		n := min(need, sms-next)
		out = append(out, PadPick{Cand: k, SMLo: next, SMHi: next + n})
		next += n
		if next >= sms || len(out) == PadMaxBE {
			break
		}
	}
	if len(out) > 0 {
		// SMs left over would idle: the last pick may use them too
		out[len(out)-1].SMHi = sms
	}
	return out
}

package sched

import (
	"fmt"
	"math"
	"sort"

	"sluice/libml/engine"
	"sluice/libml/graph"
)

// TraceReport is what TraceIdempotence found besides the metadata.
type TraceReport struct {
	// Buffers is the number of arena buffers probed for reads.
	Buffers int
	// Runs counts kernel executions the trace needed.
	Runs int
	// NonIdempotent lists kernels that read memory they write (traced).
	NonIdempotent []int
	// StaticDiffers lists kernels whose traced restart point differs from
	// the compiler's static analysis (engine.Program.IdemEntry).
	StaticDiffers []int
	// Undeclared lists kernels that wrote arena floats outside every
	// buffer the compiler declared (a compiler bug if not empty).
	Undeclared []int
	// NoGroup lists kernels not even a restart from the first kernel (with
	// the input copied in again) makes idempotent (should be empty).
	NoGroup []int
}

// TraceIdempotence computes a model's idempotent groups by tracing (REEF
// §4.4, tools/idemcheck): the program runs once, kernel by kernel, on the
// calling thread, and for each kernel the tracer records
//
//   - the arena floats it writes: those that change when it runs, from the
//     real state before it and again from a scrambled state (so a write of
//     an unchanged value is still seen);
//   - the buffers it reads: each buffer the compiler placed in the arena
//     is perturbed (by +/- large values) in turn, and a buffer is read if
//     the kernel's output changes.
//
// A group of consecutive kernels is idempotent when no float it reads
// before writing it is written inside the group; each kernel's minimal
// group is found by adding predecessors until the condition holds. The
// result is the metadata the scheduler loads (ModelOptions.Idem).
func TraceIdempotence(name string, g *graph.Graph, opt ModelOptions) (*IdemMeta, *TraceReport, error) {
	m, err := loadModel(name, g, 1, ModelOptions{Batch: opt.Batch, Versions: []int{1}, NoInPlace: opt.NoInPlace})
	if err != nil {
		return nil, nil, err
	}
	defer m.release()
	in, err := m.newInstance()
	if err != nil {
		return nil, nil, err
	}
	defer in.freeMem()
	ks := in.ver[0]
	ep := m.prog
	arena := in.arenaSlice(0, ep.ArenaFloats)
	copy(in.input(), fillInput(len(in.input()), 7))

	// the probes: the arena cut at every boundary of a span the compiler
	// declared (and of the bindings), so that overlapping buffers (the
	// arena is reused) are probed piece by piece
	var decl []engine.Range
	for i := range ep.Kernels {
		decl = append(decl, ep.Kernels[i].Reads...)
		decl = append(decl, ep.Kernels[i].Writes...)
	}
	for _, b := range append(append([]engine.Binding(nil), ep.Inputs...), ep.Outputs...) {
		decl = append(decl, engine.Range{Off: b.Off, Len: b.Size()})
	}
	cutSet := map[int64]bool{}
	for _, r := range decl {
		if r.Len > 0 {
			cutSet[r.Off], cutSet[r.Off+r.Len] = true, true
		}
	}
	var cuts []int64
	for c := range cutSet {
		cuts = append(cuts, c)
	}
	sort.Slice(cuts, func(a, b int) bool { return cuts[a] < cuts[b] })
	var bufs []engine.Range
	for i := 0; i+1 < len(cuts); i++ {
		a := engine.Range{Off: cuts[i], Len: cuts[i+1] - cuts[i]}
		if !covered(a, decl) {
			continue // a hole no buffer uses
		}
		bufs = append(bufs, a)
	}
	rep := &TraceReport{Buffers: len(bufs)}
	runK := func(k int) {
		grid := ks.Info(k).Grid
		for b := int64(0); b < grid; b++ {
			ks.RunBlock(k, b)
		}
		rep.Runs++
	}
	bitsEq := func(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }

	nk := len(ep.Kernels)
	reads := make([][]engine.Range, nk)
	writes := make([][]engine.Range, nk)
	before := make([]float32, len(arena))
	after := make([]float32, len(arena))
	probe := make([]float32, len(arena))
	rng := uint64(12345)
	next := func() float32 {
		rng ^= rng << 13
		rng ^= rng >> 7
		rng ^= rng << 17
		return float32(rng>>40)/float32(1<<24)*2 - 1
	}
	for k := 0; k < nk; k++ {
		if ep.Kernels[k].Op == engine.OpNop {
			continue
		}
		copy(before, arena)
		runK(k)
		copy(after, arena)
		changed := make([]bool, len(arena))
		for i := range arena {
			changed[i] = !bitsEq(before[i], after[i])
		}
		// writes from a scrambled state
		for i := range arena {
			arena[i] = next() * 3
		}
		copy(probe, arena)
		runK(k)
		for i := range arena {
			if !bitsEq(probe[i], arena[i]) {
				changed[i] = true
			}
		}
		writes[k] = spans(changed)
		// reads: perturb each buffer, compare the kernel's output
		for _, b := range bufs {
			read := false
			for _, sign := range []float32{1, -1} {
				copy(arena, before)
				for i := b.Off; i < b.Off+b.Len; i++ {
					arena[i] += sign * (1000 + 997*float32((i*7919)%13))
				}
				runK(k)
				// read iff some float the kernel writes comes out
				// different (an in-place output included)
				for i := range arena {
					if changed[i] && !bitsEq(arena[i], after[i]) {
						read = true
						break
					}
				}
				if read {
					break
				}
			}
			if read {
				reads[k] = append(reads[k], b)
			}
		}
		copy(arena, after)
		// undeclared writes
		for _, w := range writes[k] {
			if !covered(w, decl) {
				rep.Undeclared = append(rep.Undeclared, k)
				break
			}
		}
	}
	// a restart at kernel 0 copies the job's input in again (the
	// scheduler does), so the group from 0 sees the input written first
	var input []engine.Range
	for _, b := range ep.Inputs {
		input = append(input, engine.Range{Off: b.Off, Len: b.Size()})
	}
	entry := make([]int, nk)
	idem := make([]bool, nk)
	for i := 0; i < nk; i++ {
		j := i
		for ; j > 0; j-- {
			if groupOK(reads[j:i+1], writes[j:i+1]) {
				break
			}
		}
		if j == 0 && !groupOK(append([][]engine.Range{nil}, reads[:i+1]...), append([][]engine.Range{input}, writes[:i+1]...)) {
			rep.NoGroup = append(rep.NoGroup, i)
		}
		entry[i] = j
		idem[i] = j == i && groupOK(reads[i:i+1], writes[i:i+1])
		if !groupOK(reads[i:i+1], writes[i:i+1]) {
			rep.NonIdempotent = append(rep.NonIdempotent, i)
		}
		if j != ep.IdemEntry[i] {
			rep.StaticDiffers = append(rep.StaticDiffers, i)
		}
	}
	meta := &IdemMeta{Model: name, Batch: m.batch, Idempotent: idem, Entry: entry}
	for i := range ep.Kernels {
		meta.Ops = append(meta.Ops, ep.Kernels[i].Ops)
		var kt KernelTrace
		for _, r := range reads[i] {
			kt.Reads = append(kt.Reads, [2]int64{r.Off, r.Off + r.Len})
		}
		for _, w := range writes[i] {
			kt.Writes = append(kt.Writes, [2]int64{w.Off, w.Off + w.Len})
		}
		meta.Trace = append(meta.Trace, kt)
	}
	return meta, rep, nil
}

// spans turns a mask into ranges.
func spans(mask []bool) []engine.Range {
	var out []engine.Range
	for i := 0; i < len(mask); {
		if !mask[i] {
			i++
			continue
		}
		j := i
		for j < len(mask) && mask[j] {
			j++
		}
		out = append(out, engine.Range{Off: int64(i), Len: int64(j - i)})
		i = j
	}
	return out
}

func covered(w engine.Range, bufs []engine.Range) bool {
	rest := []engine.Range{w}
	for _, b := range bufs {
		rest = subtractRange(rest, b)
	}
	return len(rest) == 0
}

func subtractRange(rs []engine.Range, w engine.Range) []engine.Range {
	var out []engine.Range
	for _, r := range rs {
		if w.Off >= r.Off+r.Len || r.Off >= w.Off+w.Len {
			out = append(out, r)
			continue
		}
		if r.Off < w.Off {
			out = append(out, engine.Range{Off: r.Off, Len: w.Off - r.Off})
		}
		if e := w.Off + w.Len; e < r.Off+r.Len {
			out = append(out, engine.Range{Off: e, Len: r.Off + r.Len - e})
		}
	}
	return out
}

// groupOK is REEF's condition: no float the group reads before writing it
// is written by the group.
func groupOK(reads, writes [][]engine.Range) bool {
	for k := range reads {
		for _, r := range reads[k] {
			exposed := []engine.Range{r}
			for e := 0; e < k; e++ {
				for _, w := range writes[e] {
					exposed = subtractRange(exposed, w)
				}
			}
			for e := k; e < len(writes); e++ {
				for _, w := range writes[e] {
					for _, x := range exposed {
						if x.Off < w.Off+w.Len && w.Off < x.Off+x.Len {
							return false
						}
					}
				}
			}
		}
	}
	return true
}

// String summarizes a trace report.
func (r *TraceReport) String() string {
	return fmt.Sprintf("%d buffer pieces probed, %d kernel runs, %d kernels read what they write %v, %d restart points differ from the compiler's %v, undeclared writes in %v, no group for %v",
		r.Buffers, r.Runs, len(r.NonIdempotent), r.NonIdempotent, len(r.StaticDiffers), r.StaticDiffers, r.Undeclared, r.NoGroup)
}

//go:build linux && cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"sluice/libml/cuda/internal/emu"
)

// PlanVersion: GEMM and CONV have two versions whose grids follow their
// tiles; every other operation has one; a version out of range is an
// error; Plan is version 0.
func TestPlanVersion(t *testing.T) {
	for op := OpGemm; op <= OpGather; op++ {
		want := 1
		if op == OpGemm || op == OpConv {
			want = 2
		}
		if got := Versions(op); got != want {
			t.Errorf("Versions(%v) = %d, want %d", op, got, want)
		}
	}
	a := Args{Out: 1}
	a.In[0], a.In[1] = 1, 1
	a.P[0], a.P[1], a.P[2] = 70, 130, 5 // M N K
	a.P[8], a.P[9], a.P[10] = 2, 1, 1
	for v, tile := range []int64{Tile, SmallTile} {
		l, err := PlanVersion(OpGemm, &a, v)
		if err != nil {
			t.Fatal(err)
		}
		mt, nt := cdiv(70, tile), cdiv(130, tile)
		if l.Version != v || l.Grid != int(2*mt*nt) || a.T[0] != mt || a.T[1] != nt || a.T[TVersion] != int64(v) {
			t.Errorf("gemm version %d: %+v, T %v", v, l, a.T)
		}
	}
	if l, err := Plan(OpGemm, &a); err != nil || l.Version != 0 || a.T[TVersion] != 0 || l.Grid != 2*2*3 {
		t.Errorf("Plan: %+v, %v, T %v", l, err, a.T)
	}
	for _, v := range []int{-1, 2} {
		if _, err := PlanVersion(OpGemm, &a, v); err == nil {
			t.Errorf("gemm version %d planned", v)
		}
	}
	var u Args
	u.Out, u.In[0], u.P[0] = 1, 1, 5000
	if _, err := PlanVersion(OpUnary, &u, 1); err == nil {
		t.Error("unary version 1 planned")
	}
}

// runVersions runs op with arguments a in every version on ex (its
// output refilled with the sentinel before each) and returns each
// version's output (n floats); each must match want within tol.
func runVersions(t *testing.T, ex executor, what string, op Op, a *Args, n int, want []float32) [][]float32 {
	t.Helper()
	var outs [][]float32
	for v := 0; v < Versions(op); v++ {
		fill := make([]float32, n)
		for i := range fill {
			fill[i] = sentinel
		}
		ex.Write(t, a.Out, f32bytes(fill))
		b := *a
		l, err := PlanVersion(op, &b, v)
		if err != nil {
			t.Fatal(err)
		}
		launchOn(t, ex, l, newState(t, ex), 3, &b)
		got := download(t, ex, a.Out, n)
		closeTo(t, fmt.Sprintf("%s version %d", what, v), got, want, tol)
		outs = append(outs, got)
	}
	return outs
}

// sameBits fails unless every version's output equals version 0's bit for
// bit.
func sameBits(t *testing.T, what string, outs [][]float32) {
	t.Helper()
	for v := 1; v < len(outs); v++ {
		bad := 0
		for i := range outs[0] {
			if math.Float32bits(outs[v][i]) != math.Float32bits(outs[0][i]) {
				if bad < 3 {
					t.Errorf("%s: version %d [%d] = %g, version 0 %g", what, v, i, outs[v][i], outs[0][i])
				}
				bad++
			}
		}
		if bad > 3 {
			t.Errorf("%s: version %d differs in %d of %d values", what, v, bad, len(outs[0]))
		}
	}
}

// Every GEMM version against the float64 reference, and bit-identical to
// version 0 (each output sums its products in the same order): the
// cases of TestKernelGemm and ones with tiles of 32 partly filled.
func TestKernelGemmVersions(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(71, 72))
		for i, c := range append(slices.Clip(gemmCases),
			gemmCase{M: 1, N: 200, K: 96, tb: true, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2, act: actGelu},
			gemmCase{M: 97, N: 33, K: 31, ta: true, bd: [3]int{1, 1, 2}, alpha: 1, res: true},
		) {
			a, want := gemmArgs(t, ex, c, r)
			what := fmt.Sprintf("gemm %d %+v", i, c)
			sameBits(t, what, runVersions(t, ex, what, OpGemm, a, len(want), want))
		}
	})
}

// Every CONV version against the float64 reference and bit-identical to
// version 0: grouped, strided, dilated and padded convolutions, output
// channels and positions that fill a 32-tile partly.
func TestKernelConvVersions(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(73, 74))
		for i, c := range append(slices.Clip(convCases),
			convCase{convGeom{N: 1, C: 12, H: 10, W: 9, Cout: 66, G: 3, KH: 3, KW: 3, SH: 1, SW: 1, PT: 1, PL: 1, DH: 2, DW: 1}, 1, 0, true, true, actRelu},
		) {
			a, _, _, want := convArgs(t, ex, c, r)
			what := fmt.Sprintf("conv %d", i)
			sameBits(t, what, runVersions(t, ex, what, OpConv, a, len(want), want))
		}
	})
}

// Version 1 (32 x 32 tiles) under preemption: a GEMM of 64 x 64 x 256 is
// 4 tiles of 32 x 32, 16 K slices each, a poll per slice. Preempted
// before a block, inside one's K loop, or after one's last barrier, the
// tiles of the blocks before it are done and those after untouched (the
// block finishing when it had passed its last poll); a rerun from the
// preempted block (T[TBase]) gives version 0's output bit for bit.
func TestPreemptVersion(t *testing.T) {
	r := rand.New(rand.NewPCG(75, 76))
	ex := &emuExec{}
	c := gemmCase{M: 64, N: 64, K: 256, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2}
	a, want := gemmArgs(t, ex, c, r)
	l0, err := Plan(OpGemm, a)
	if err != nil {
		t.Fatal(err)
	}
	st := newState(t, ex)
	launchOn(t, ex, l0, st, 1, a)
	ref := download(t, ex, a.Out, 64*64)
	closeTo(t, "version 0", ref, want, tol)
	b := *a
	l1, err := PlanVersion(OpGemm, &b, 1)
	if err != nil || l1.Grid != 4 {
		t.Fatalf("version 1: %+v, %v", l1, err)
	}
	tile := func(got []float32, blk int) (done, untouched bool) {
		done, untouched = true, true
		for m := 32 * (blk / 2); m < 32*(blk/2+1); m++ {
			for n := 32 * (blk % 2); n < 32*(blk%2+1); n++ {
				if got[m*64+n] != sentinel {
					untouched = false
				}
				if math.Float32bits(got[m*64+n]) != math.Float32bits(ref[m*64+n]) {
					done = false
				}
			}
		}
		return done, untouched
	}
	for _, pc := range []struct {
		block, syncs int64
		done         int
	}{{0, 0, 0}, {1, 0, 1}, {2, 7, 2}, {3, 33, 4}} {
		t.Run(fmt.Sprintf("block%d-sync%d", pc.block, pc.syncs), func(t *testing.T) {
			b.Out = outBuf(t, ex, 64*64)
			st := newState(t, ex)
			pe := &emuExec{opt: emu.Options{Preempt: true, PreemptBlock: pc.block, PreemptAfterSyncs: pc.syncs}}
			launchOn(t, pe, l1, st, 5, &b)
			got := download(t, ex, b.Out, 64*64)
			for blk := 0; blk < 4; blk++ {
				done, untouched := tile(got, blk)
				if blk < pc.done && !done {
					t.Errorf("tile %d incomplete", blk)
				}
				if blk >= pc.done && !untouched {
					t.Errorf("tile %d written by a preempted block", blk)
				}
			}
			// restore from the preempted block, in the same version
			setFlag(t, ex, st, 0)
			from := min(max(int(pc.block), pc.done), 4)
			if from < 4 {
				rb := b
				rb.T[TBase] = int64(from)
				if err := ex.Launch(l1.Kernel, l1.Grid-from, Pack(st, 5, &rb)); err != nil {
					t.Fatal(err)
				}
			}
			sameBits(t, "restored in version 1", [][]float32{ref, download(t, ex, b.Out, 64*64)})
		})
	}
}

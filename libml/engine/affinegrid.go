package engine

import (
	"fmt"
	"slices"

	"sluice/libml/graph"
)

// AffineGrid: the sampling grid of a spatial transformer (GridSample reads
// it). Each output position's normalised coordinates (x along W, y along
// H, z along D: at pixel centres, or at the corners with align_corners),
// extended by a 1, times the image's theta transposed. size must be known
// by compile time (a constant, or Shape of a run-time input), so the base
// grid [positions, r+1] is a constant and the node one batched GEMM by
// theta [N, r, r+1]. The batch is theta's: a size whose first dimension
// says 1 (a model exported at batch 1) serves every batch size.

// affineArgs reads AffineGrid's size (constant input 1) and returns the
// spatial dimensions (D, H, W or H, W) and the rank r (2 or 3).
func affineArgs(e *ev) (spatial []int64, r int64, err error) {
	size, err := e.constIn(1, "size")
	if err != nil {
		return nil, 0, err
	}
	if size == nil || size.I == nil || (size.Len() != 4 && size.Len() != 5) {
		return nil, 0, fmt.Errorf("size must be 4 or 5 integers [N, C, (D,) H, W]")
	}
	spatial = size.I[2:]
	r = int64(len(spatial))
	// the base grid, a folded constant: positions x (r + 1) values
	if slices.Contains(spatial, 0) {
		return nil, 0, fmt.Errorf("size %v: an empty spatial dimension", size.I)
	}
	if err := checkValueShaped(append(slices.Clone(spatial), r+1), true); err != nil {
		return nil, 0, fmt.Errorf("size %v: %w", size.I, err)
	}
	return spatial, r, nil
}

// affineBase is the base grid of spatial dimensions sp: per position
// (row-major over sp), its coordinates from the last axis to the first
// (x, y(, z)) and a 1.
func affineBase(sp []int64, align bool) []float32 {
	r := len(sp)
	coord := func(i, n int64) float64 {
		if align {
			if n == 1 {
				return 0
			}
			return 2*float64(i)/float64(n-1) - 1
		}
		return (2*float64(i)+1)/float64(n) - 1
	}
	P := numel(sp)
	base := make([]float32, P*int64(r+1))
	idx := make([]int64, r)
	for p := range P {
		unravel(p, sp, idx)
		row := base[p*int64(r+1):]
		for a := range r { // x first: the last axis
			row[a] = float32(coord(idx[r-1-a], sp[r-1-a]))
		}
		row[r] = 1
	}
	return base
}

// refAffineGrid is AffineGrid: grid [N, (D,) H, W, r].
func refAffineGrid(e *ev) ([]*Tensor, error) {
	theta, err := e.need(0)
	if err != nil {
		return nil, err
	}
	sp, r, err := affineArgs(e)
	if err != nil {
		return nil, err
	}
	ts := theta.Shape
	if len(ts) != 3 || ts[1] != r || ts[2] != r+1 {
		return nil, fmt.Errorf("theta %v for a %d-D grid: want [N, %d, %d]", ts, r, r, r+1)
	}
	N := ts[0]
	shape := append(append([]int64{N}, sp...), r)
	if !theta.known() {
		return one(shapeOnly(graph.Float32, shape))
	}
	base := affineBase(sp, e.n.AttrInt("align_corners", 0) != 0)
	P := numel(sp)
	y := NewFloat(shape, nil)
	for n := range N {
		th := theta.F[n*r*(r+1):]
		for p := range P {
			b := base[p*(r+1):]
			for j := range r {
				var s float32
				for k := range r + 1 {
					s += b[k] * th[j*(r+1)+k]
				}
				y.F[(n*P+p)*r+j] = s
			}
		}
	}
	return one(y)
}

// lowerAffineGrid emits AffineGrid as one GEMM: the constant base grid
// [P, r+1] times each image's theta [r, r+1] transposed, into [P, r].
func (c *compiler) lowerAffineGrid(g *group) error {
	n := c.node(g)
	ev := &ev{n: n, opset: c.m.opset, ins: c.tensors(n)}
	sp, r, err := affineArgs(ev)
	if err != nil {
		return err
	}
	th, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	if ts := th.t.Shape; len(ts) != 3 || ts[1] != r || ts[2] != r+1 {
		return fmt.Errorf("theta %v for a %d-D grid: want [N, %d, %d]", ts, r, r, r+1)
	}
	P := numel(sp)
	s := gemmSpec{M: P, N: r, K: r + 1, tB: 1, lda: r + 1, ldb: r + 1, ldc: r, alpha: 1}
	s.bd[0], s.sB[0], s.sC[0] = th.t.Shape[0], r*(r+1), P*r
	d := c.draft(g, OpGemm)
	d.in[0] = c.newConst(affineBase(sp, n.AttrInt("align_corners", 0) != 0))
	if d.in[1], err = c.operand(n.Inputs[0]); err != nil {
		return err
	}
	s.set(&d.k)
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

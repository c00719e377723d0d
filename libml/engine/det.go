package engine

import (
	"fmt"
	"math"
)

// Det: the determinant of each M x M matrix of X [..., M, M], by LU
// factorisation with partial pivoting (the first row of largest magnitude
// pivots) in float64, rounded once to float32. At run time one DET kernel
// (native/cpu/det.c, native/cuda/det.cu), the same arithmetic.

// detMax is the largest M the DET kernel takes (SK_DET_MAX).
const detMax = 1024

// detShape checks X's shape [..., M, M] and returns the number of
// matrices, M and the output's shape.
func detShape(xs []int64) (count, m int64, out []int64, err error) {
	r := len(xs)
	if r < 2 || xs[r-1] != xs[r-2] {
		return 0, 0, nil, fmt.Errorf("X of shape %v: want [..., M, M]", xs)
	}
	return numel(xs[:r-2]), xs[r-1], append([]int64{}, xs[:r-2]...), nil
}

// luDet is the determinant of the m x m matrix a (row-major), which it
// overwrites: native/cpu/det.c's arithmetic.
func luDet(a []float64, m int) float64 {
	det := 1.0
	for c := 0; c < m; c++ {
		piv, best := c, math.Abs(a[c*m+c])
		for r := c + 1; r < m; r++ {
			if v := math.Abs(a[r*m+c]); v > best {
				piv, best = r, v
			}
		}
		if best == 0 {
			return 0
		}
		if piv != c {
			for j := c; j < m; j++ {
				a[c*m+j], a[piv*m+j] = a[piv*m+j], a[c*m+j]
			}
			det = -det
		}
		d := a[c*m+c]
		det *= d
		for r := c + 1; r < m; r++ {
			f := a[r*m+c] / d
			for j := c + 1; j < m; j++ {
				a[r*m+j] -= f * a[c*m+j]
			}
		}
	}
	return det
}

func refDet(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	count, m, oshape, err := detShape(x.Shape)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	if err := checkFoldWork(e, float64(count)*float64(m)*float64(m)*float64(m)); err != nil {
		return nil, err
	}
	vals := make([]float64, count)
	a := make([]float64, m*m)
	for i := int64(0); i < count; i++ {
		for e := int64(0); e < m*m; e++ {
			a[e] = x.at(i*m*m + e)
		}
		vals[i] = float64(float32(luDet(a, int(m))))
	}
	return one(fromValues(x.DType, oshape, vals))
}

// lowerDet emits one DET kernel.
func (c *compiler) lowerDet(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	count, m, _, err := detShape(x.t.Shape)
	if err != nil {
		return err
	}
	limit := int64(detMax)
	if o := int64(c.m.opts.DetMaxOrder); o > 0 && o < limit {
		limit = o
	}
	if m > limit {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: fmt.Sprintf("%dx%d matrices: the device's kernel factorises at most %dx%d", m, m, limit, limit)}
	}
	if m == 0 && count > 0 {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: "0x0 matrices"}
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil || count == 0 {
		return err
	}
	d := c.draft(g, OpDet)
	d.k.P[0], d.k.P[1] = count, m
	d.in[0], d.out = src, dst
	c.emit(d)
	return nil
}

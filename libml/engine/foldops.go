package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Operators the engine evaluates at load or compile time only (they are
// in foldOnlyOps): their results are integer or boolean tensors, which the
// engine does not compute at run time, or they are mostly integer
// arithmetic on shapes and indices. A model that needs one of them on
// run-time values gets an UnsupportedError (and ONNX Runtime serves it
// when the profile allows the fallback).

// refArgMinMax is ArgMax and ArgMin along one axis: the index of the first
// extreme value (the last with select_last_index), int64.
func refArgMinMax(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	axis, err := normAxis(e.n.AttrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	if x.Shape[axis] == 0 {
		return nil, fmt.Errorf("%s over an empty axis %d", e.n.Op, axis)
	}
	keep := e.n.AttrInt("keepdims", 1) != 0
	last := e.n.AttrInt("select_last_index", 0) != 0
	var oshape []int64
	for i, d := range x.Shape {
		switch {
		case int64(i) != axis:
			oshape = append(oshape, d)
		case keep:
			oshape = append(oshape, 1)
		}
	}
	if oshape == nil {
		oshape = []int64{}
	}
	if !x.known() {
		return one(shapeOnly(graph.Int64, oshape))
	}
	outer, L, inner := numel(x.Shape[:axis]), x.Shape[axis], numel(x.Shape[axis+1:])
	y := NewInt(oshape, nil)
	max := e.n.Op == "ArgMax"
	for o := int64(0); o < outer; o++ {
		for i := int64(0); i < inner; i++ {
			best, at := x.at(o*L*inner+i), int64(0)
			for l := int64(1); l < L; l++ {
				v := x.at((o*L+l)*inner + i)
				better := v > best
				if !max {
					better = v < best
				}
				if better || (last && v == best) {
					best, at = v, l
				}
			}
			y.I[o*inner+i] = at
		}
	}
	return one(y)
}

// refMod is Mod with numpy broadcasting: for integers the remainder takes
// the divisor's sign (fmod = 0) or the dividend's (fmod = 1, C's fmod);
// floats need fmod = 1.
func refMod(e *ev) ([]*Tensor, error) {
	a, err := e.need(0)
	if err != nil {
		return nil, err
	}
	b, err := e.need(1)
	if err != nil {
		return nil, err
	}
	oshape, err := broadcastShape(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	cfmod := e.n.AttrInt("fmod", 0) != 0
	if a.IsFloat() && !cfmod {
		return nil, fmt.Errorf("Mod of %s values needs fmod = 1", a.DType)
	}
	if a.IsFloat() != b.IsFloat() {
		return nil, fmt.Errorf("Mod of %s by %s", a.DType, b.DType)
	}
	if !e.allKnown() {
		return one(shapeOnly(a.DType, oshape))
	}
	sa, sb := bstrides(a.Shape, oshape), bstrides(b.Shape, oshape)
	idx := make([]int64, len(oshape))
	y := &Tensor{DType: a.DType, Shape: oshape}
	n := numel(oshape)
	if a.IsFloat() {
		y.F = make([]float32, n)
	} else {
		y.I = make([]int64, n)
	}
	for i := int64(0); i < n; i++ {
		unravel(i, oshape, idx)
		ia, ib := dot(idx, sa), dot(idx, sb)
		if y.F != nil {
			y.F[i] = float32(math.Mod(float64(a.F[ia]), float64(b.F[ib])))
			continue
		}
		x, d := a.I[ia], b.I[ib]
		if d == 0 {
			return nil, fmt.Errorf("integer Mod by zero")
		}
		m := x % d
		if !cfmod && m != 0 && (m < 0) != (d < 0) {
			m += d
		}
		y.I[i] = m
	}
	return one(y)
}

// refIsNaNInf is IsNaN and IsInf (with its detect_negative and
// detect_positive): a bool per value.
func refIsNaNInf(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if !x.IsFloat() {
		return nil, fmt.Errorf("%s of %s values, want a float type", e.n.Op, x.DType)
	}
	if !x.known() {
		return one(shapeOnly(graph.Bool, x.Shape))
	}
	neg, pos := e.n.AttrInt("detect_negative", 1) != 0, e.n.AttrInt("detect_positive", 1) != 0
	y := NewInt(x.Shape, nil)
	y.DType = graph.Bool
	for i, v := range x.F {
		f := float64(v)
		var is bool
		if e.n.Op == "IsNaN" {
			is = math.IsNaN(f)
		} else {
			is = (neg && math.IsInf(f, -1)) || (pos && math.IsInf(f, 1))
		}
		y.I[i] = int64(b2f(is))
	}
	return one(y)
}

// refBitShift shifts unsigned integers left or right (direction), each
// value by its own amount, within the type's width (bits shifted out of a
// uint8 are lost, as in ONNX's reference).
func refBitShift(e *ev) ([]*Tensor, error) {
	a, err := e.need(0)
	if err != nil {
		return nil, err
	}
	b, err := e.need(1)
	if err != nil {
		return nil, err
	}
	// ONNX's UINT16, UINT32 and UINT64 (graph names only the types models
	// compute in)
	const uint16T, uint32T, uint64T graph.DType = 4, 12, 13
	width := map[graph.DType]uint64{graph.Uint8: 8, uint16T: 16, uint32T: 32, uint64T: 64}[a.DType]
	if width == 0 {
		return nil, fmt.Errorf("BitShift of %s values, want an unsigned integer type", a.DType)
	}
	left := e.n.AttrString("direction", "") == "LEFT"
	if !left && e.n.AttrString("direction", "") != "RIGHT" {
		return nil, fmt.Errorf("direction %q, want LEFT or RIGHT", e.n.AttrString("direction", ""))
	}
	oshape, err := broadcastShape(a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	if !e.allKnown() {
		return one(shapeOnly(a.DType, oshape))
	}
	sa, sb := bstrides(a.Shape, oshape), bstrides(b.Shape, oshape)
	idx := make([]int64, len(oshape))
	y := &Tensor{DType: a.DType, Shape: oshape, I: make([]int64, numel(oshape))}
	mask := ^uint64(0) >> (64 - width)
	for i := range y.I {
		unravel(int64(i), oshape, idx)
		x, s := uint64(a.I[dot(idx, sa)]), uint64(b.I[dot(idx, sb)])
		var v uint64
		if s < width {
			if left {
				v = (x << s) & mask
			} else {
				v = (x & mask) >> s
			}
		}
		y.I[i] = int64(v)
	}
	return one(y)
}

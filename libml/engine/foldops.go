package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Operators whose results are integer or boolean tensors. Most of them
// the engine evaluates at load or compile time only (foldOnlyOps: mostly
// integer arithmetic on shapes and indices); a model that needs one of
// them on run-time values gets an UnsupportedError (and ONNX Runtime
// serves it when the profile allows the fallback). ArgMax and ArgMin also
// run (lowerArgMinMax): their int64 indices live as float32 values.

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

// lowerArgMinMax runs ArgMax (ArgMin) along one axis as four kernels: the
// extreme along the axis (a REDUCE), where x equals it (an EQUAL against
// it broadcast), each position's index where it does and a sentinel where
// it does not (a MUL by the indices with an affine activation), and the
// first of them (a REDUCE MIN; select_last_index: the last, a REDUCE MAX
// with -1 as the sentinel). The indices are float32 values, exact below
// 2^24.
func (c *compiler) lowerArgMinMax(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	axis, err := normAxis(n.AttrInt("axis", 0), int64(len(xs)))
	if err != nil {
		return err
	}
	outer, d, inner := numel(xs[:axis]), xs[axis], numel(xs[axis+1:])
	if d > 1<<24 {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: fmt.Sprintf("an axis of %d values: indices above 2^24 are not exact in float32", d)}
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if outer*d*inner == 0 {
		return nil
	}
	red := func(mode int64, in, out operand) {
		k := c.draft(g, OpReduce)
		k.k.P[0], k.k.P[1], k.k.P[2], k.k.P[3] = outer, d, inner, mode
		k.in[0], k.out = in, out
		c.emit(k)
	}
	ext := operand{sp: SpaceArena, buf: c.newBuf(outer * inner)}
	mode := int64(RedMax)
	if n.Op == "ArgMin" {
		mode = RedMin
	}
	red(mode, src, ext)
	full, row := []int64{outer, d, inner}, []int64{outer, 1, inner}
	hit := operand{sp: SpaceArena, buf: c.newBuf(outer * d * inner)}
	if err := c.binaryKernel(g, BinEqual, src, full, ext, row, hit, full); err != nil {
		return err
	}
	// first: hit * (i - 2^24) + 2^24, the least is the first hit; last:
	// hit * (i + 1) - 1, the greatest is the last (every value an integer
	// of at most 2^24 in magnitude: exact)
	last := n.AttrInt("select_last_index", 0) != 0
	idx := make([]float32, d)
	off, sentinel, pick := float32(-(1 << 24)), float32(1<<24), int64(RedMin)
	if last {
		off, sentinel, pick = 1, -1, RedMax
	}
	for i := range idx {
		idx[i] = float32(i) + off
	}
	cand := operand{sp: SpaceArena, buf: c.newBuf(outer * d * inner)}
	if err := c.binaryKernelAct(g, BinMul, hit, full, c.newConst(idx), []int64{1, d, 1}, cand, full, ActAffine, 1, sentinel); err != nil {
		return err
	}
	red(pick, cand, dst)
	return nil
}

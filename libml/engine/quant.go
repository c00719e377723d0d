package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Quantised models (ONNX's QuantizeLinear, DequantizeLinear,
// DynamicQuantizeLinear, MatMulInteger, ConvInteger, QLinearMatMul,
// QLinearConv).
//
// A runtime uint8, int8 or int32 tensor lives in the arena as float32
// holding its integer values (intStorage): uint8 and int8 values are exact,
// and an int32 value is rounded to the nearest float32, as the Cast to
// float that consumes it in a quantised graph rounds it. The integer
// products run in the QGEMM kernel with exact int32 sums (AVX-512 VNNI
// where the CPU has it), so a quantised model computes the same bits on
// every CPU and at every batch size.

// quantOps are the quantisation operators the engine runs.
var quantOps = []string{"QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
	"MatMulInteger", "ConvInteger", "QLinearMatMul", "QLinearConv"}

func isQuantOp(op string) bool {
	for _, o := range quantOps {
		if o == op {
			return true
		}
	}
	return false
}

// checkIntInputs refuses a node that would compute on a runtime integer
// tensor as if it were float (Add on uint8 wraps in ONNX; the arena's
// float values would not).
func (c *compiler) checkIntInputs(n *graph.Node) error {
	if intStorageOps[n.Op] {
		return nil
	}
	for _, name := range n.Inputs {
		if v := c.vals[name]; name != "" && v != nil && v.buf != -1 && intStorage(v.t.DType) {
			return fmt.Errorf("input %q is a runtime %s tensor: %s runs on float tensors only", name, v.t.DType, n.Op)
		}
	}
	return nil
}

// batchCoupled refuses batches for a model that quantises dynamically at
// run time: DynamicQuantizeLinear takes one scale over its whole input,
// so in a batch every request's result would depend on the others'
// inputs. (Constant ones were folded at load.)
func (m *Model) batchCoupled() error {
	for i := range m.nodes {
		if n := &m.nodes[i]; n.Op == "DynamicQuantizeLinear" {
			return fmt.Errorf("node %q (DynamicQuantizeLinear) quantises with one scale over the whole batch, "+
				"so requests batched together would change each other's results: serve the model at batch 1, "+
				"or quantise it statically (QuantizeLinear with calibrated scales; see docs/profiles.md)", n.Name)
		}
	}
	return nil
}

// intStorage reports whether runtime tensors of type d live in the arena
// as float32 integer values (bool as 1 and 0: comparisons' results; int64
// as ArgMax's and ArgMin's indices, exact below 2^24).
func intStorage(d graph.DType) bool {
	return d == graph.Uint8 || d == graph.Int8 || d == graph.Int32 || d == graph.Bool || d == graph.Int64
}

// intStorageOps may read runtime integer tensors: they move or compare
// values without arithmetic that would overflow or wrap in the integer
// type, or they are the quantisation operators themselves.
var intStorageOps = map[string]bool{
	"Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true,
	"Identity": true, "Dropout": true, "Cast": true, "Transpose": true,
	"Concat": true, "Slice": true, "Split": true, "Expand": true,
	"Gather": true, "MaxPool": true, "GlobalMaxPool": true,
	"CastLike": true, "DepthToSpace": true, "SpaceToDepth": true, "Tile": true,
	"GatherElements": true, "Trilu": true, "Where": true, "GatherND": true, "ScatterND": true,
	"ScatterElements": true, "Scatter": true, "Compress": true, "Pad": true, "OneHot": true, "ReverseSequence": true, "MaxUnpool": true,
	"RoiAlign": true, // reads its batch indices, a run-time int64 tensor too
	"Equal":    true, "Greater": true, "Less": true, "GreaterOrEqual": true, "LessOrEqual": true,
	"QuantizeLinear": true, "DequantizeLinear": true, "MatMulInteger": true,
	"ConvInteger": true, "QLinearMatMul": true, "QLinearConv": true,
	opSelect: true,
}

// need2 returns inputs i and j, both required.
func (e *ev) need2(i, j int) (*Tensor, *Tensor, error) {
	a, err := e.need(i)
	if err != nil {
		return nil, nil, err
	}
	b, err := e.need(j)
	return a, b, err
}

// quantRange is the value range of quantised type d.
func quantRange(d graph.DType) (lo, hi int64, err error) {
	switch d {
	case graph.Uint8:
		return 0, 255, nil
	case graph.Int8:
		return -128, 127, nil
	case graph.Int32:
		return math.MinInt32, math.MaxInt32, nil
	}
	return 0, 0, fmt.Errorf("%s is not a quantised type (uint8, int8, int32)", d)
}

// quantAxis is the channel layout of a per-axis scale of length nc over
// shape: C channels with inner elements each (C = 1 per tensor).
func quantAxis(n *graph.Node, shape []int64, nc int64) (C, inner int64, err error) {
	if nc == 1 {
		return 1, max(numel(shape), 1), nil
	}
	axis := n.AttrInt("axis", 1)
	if axis < 0 {
		axis += int64(len(shape))
	}
	if axis < 0 || axis >= int64(len(shape)) || shape[axis] != nc {
		return 0, 0, fmt.Errorf("scale of %d values does not fit axis %d of %v", nc, n.AttrInt("axis", 1), shape)
	}
	return nc, max(numel(shape[axis+1:]), 1), nil
}

// zeroPointAt is zero point z's value at channel c (0 when absent).
func zeroPointAt(z *Tensor, c int64) float32 {
	if z == nil {
		return 0
	}
	if z.Len() == 1 {
		c = 0
	}
	return float32(z.at(c))
}

func clampF(v, lo, hi float32) float32 { return min(max(v, lo), hi) }

// quantize1 is QuantizeLinear of one value (the QUANT kernel's mode 0).
func quantize1(x, s, z, lo, hi float32) float32 {
	if s == 0 {
		return clampF(z, lo, hi)
	}
	return clampF(float32(math.RoundToEven(float64(x/s)))+z, lo, hi)
}

func refQuantizeLinear(e *ev) ([]*Tensor, error) {
	x, s, err := e.need2(0, 1)
	if err != nil {
		return nil, err
	}
	z := e.in(2)
	dt := graph.Uint8
	if z != nil {
		dt = z.DType
	}
	lo, hi, err := quantRange(dt)
	if err != nil || dt == graph.Int32 {
		return nil, fmt.Errorf("output type %s: uint8 and int8 only", dt)
	}
	C, inner, err := quantAxis(e.n, x.Shape, s.Len())
	if err != nil {
		return nil, err
	}
	if z != nil && z.Len() != s.Len() {
		return nil, fmt.Errorf("zero point of %d values for %d scales", z.Len(), s.Len())
	}
	if !e.allKnown() {
		return one(shapeOnly(dt, x.Shape))
	}
	y := &Tensor{DType: dt, Shape: x.Shape, I: make([]int64, x.Len())}
	xf := x.floats()
	for i := range y.I {
		c := (int64(i) / inner) % C
		y.I[i] = int64(quantize1(xf[i], float32(s.at(c)), zeroPointAt(z, c), float32(lo), float32(hi)))
	}
	return one(y)
}

func refDequantizeLinear(e *ev) ([]*Tensor, error) {
	x, s, err := e.need2(0, 1)
	if err != nil {
		return nil, err
	}
	z := e.in(2)
	if _, _, err := quantRange(x.DType); err != nil {
		return nil, err
	}
	C, inner, err := quantAxis(e.n, x.Shape, s.Len())
	if err != nil {
		return nil, err
	}
	if z != nil && z.Len() != s.Len() {
		return nil, fmt.Errorf("zero point of %d values for %d scales", z.Len(), s.Len())
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, x.Shape))
	}
	y := NewFloat(x.Shape, nil)
	for i := range y.F {
		c := (int64(i) / inner) % C
		y.F[i] = (float32(x.I[i]) - zeroPointAt(z, c)) * float32(s.at(c))
	}
	return one(y)
}

// dynQuantParams is DynamicQuantizeLinear's scale and zero point for x
// (the QUANT kernel's modes 2 and 3).
func dynQuantParams(x []float32) (scale, zp float32) {
	var mn, mx float32
	for _, v := range x {
		mn, mx = min(mn, v), max(mx, v)
	}
	scale = (mx - mn) / 255
	if scale == 0 {
		return 0, 0
	}
	return scale, clampF(float32(math.RoundToEven(float64(0-mn/scale))), 0, 255)
}

func refDynamicQuantizeLinear(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if !x.IsFloat() {
		return nil, fmt.Errorf("input is %s, not float", x.DType)
	}
	if !e.allKnown() {
		return []*Tensor{shapeOnly(graph.Uint8, x.Shape), shapeOnly(graph.Float32, nil), shapeOnly(graph.Uint8, nil)}, nil
	}
	scale, zp := dynQuantParams(x.F)
	y := &Tensor{DType: graph.Uint8, Shape: x.Shape, I: make([]int64, x.Len())}
	for i, v := range x.F {
		y.I[i] = int64(quantize1(v, scale, zp, 0, 255))
	}
	return []*Tensor{y, {DType: graph.Float32, Shape: []int64{}, F: []float32{scale}},
		{DType: graph.Uint8, Shape: []int64{}, I: []int64{int64(zp)}}}, nil
}

// shifted returns t's values minus zero point z as float32 (exact for
// 8-bit values), z indexed per element by at (nil: one value).
func shifted(t, z *Tensor, at func(i int64) int64) *Tensor {
	y := NewFloat(t.Shape, nil)
	for i := range y.F {
		c := int64(0)
		if at != nil {
			c = at(int64(i))
		}
		y.F[i] = float32(t.at(int64(i)) - float64(zeroPointAt(z, c)))
	}
	return y
}

// checkQuantOperand checks that x is an 8-bit tensor and its zero point,
// if any, has its type and one value or n values.
func checkQuantOperand(what string, x, z *Tensor, n int64) error {
	if x.DType != graph.Uint8 && x.DType != graph.Int8 {
		return fmt.Errorf("%s is %s: uint8 or int8 only", what, x.DType)
	}
	if z == nil {
		return nil
	}
	if z.DType != x.DType {
		return fmt.Errorf("%s's zero point is %s, %s is %s", what, z.DType, what, x.DType)
	}
	if z.Len() != 1 && z.Len() != n {
		return fmt.Errorf("%s's zero point has %d values, want 1 or %d", what, z.Len(), n)
	}
	return nil
}

// integerMatMul is MatMulInteger's product as int32 values (in I), or its
// shape when a, b are not known.
func integerMatMul(e *ev, a, b, za, zb *Tensor) (*Tensor, error) {
	if len(a.Shape) < 1 || len(b.Shape) < 1 {
		return nil, fmt.Errorf("scalar operand")
	}
	M, K := int64(1), a.Shape[len(a.Shape)-1]
	if len(a.Shape) > 1 {
		M = a.Shape[len(a.Shape)-2]
	}
	N := int64(1)
	if len(b.Shape) > 1 {
		N = b.Shape[len(b.Shape)-1]
	}
	if err := checkQuantOperand("A", a, za, M); err != nil {
		return nil, err
	}
	if err := checkQuantOperand("B", b, zb, N); err != nil {
		return nil, err
	}
	sub := &ev{n: e.n, opset: e.opset, ins: []*Tensor{a, b}}
	if a.known() && b.known() {
		sub.ins[0] = shifted(a, za, func(i int64) int64 { return (i / K) % M })
		sub.ins[1] = shifted(b, zb, func(i int64) int64 { return i % N })
	}
	outs, err := refMatMul(sub)
	if err != nil {
		return nil, err
	}
	return toInt32(outs[0]), nil
}

// toInt32 retypes a float result of integer sums as int32.
func toInt32(t *Tensor) *Tensor {
	y := &Tensor{DType: graph.Int32, Shape: t.Shape}
	if t.F != nil {
		y.I = make([]int64, len(t.F))
		for i, v := range t.F {
			y.I[i] = int64(v)
		}
	}
	return y
}

// integerConv is ConvInteger's result as int32 values, or its shape. The
// padding reads as the input's zero point.
func integerConv(e *ev, x, w, zx, zw *Tensor) (*Tensor, error) {
	if len(w.Shape) < 3 || len(x.Shape) < 3 {
		return nil, fmt.Errorf("X %v, W %v: not a convolution", x.Shape, w.Shape)
	}
	M := w.Shape[0]
	if err := checkQuantOperand("X", x, zx, 1); err != nil {
		return nil, err
	}
	if err := checkQuantOperand("W", w, zw, M); err != nil {
		return nil, err
	}
	sub := &ev{n: e.n, opset: e.opset, ins: []*Tensor{x, w}}
	if x.known() && w.known() {
		per := numel(w.Shape[1:])
		sub.ins[0] = shifted(x, zx, nil)
		sub.ins[1] = shifted(w, zw, func(i int64) int64 { return i / per })
	}
	outs, err := refConv(sub)
	if err != nil {
		return nil, err
	}
	return toInt32(outs[0]), nil
}

func refMatMulInteger(e *ev) ([]*Tensor, error) {
	a, b, err := e.need2(0, 1)
	if err != nil {
		return nil, err
	}
	y, err := integerMatMul(e, a, b, e.in(2), e.in(3))
	if err != nil {
		return nil, err
	}
	return one(y)
}

func refConvInteger(e *ev) ([]*Tensor, error) {
	x, w, err := e.need2(0, 1)
	if err != nil {
		return nil, err
	}
	y, err := integerConv(e, x, w, e.in(2), e.in(3))
	if err != nil {
		return nil, err
	}
	return one(y)
}

// qlinear holds a QLinear operator's constant scales and output zero
// point: mult[c] = x_scale * w_scale[c] / y_scale, one per output channel
// or column (or one).
type qlinear struct {
	mult   []float32
	zy     float32
	lo, hi float32
	dt     graph.DType
}

// qlinearParams reads the scales at inputs as, ws, ys and the output zero
// point at yz; every one must be constant.
func qlinearParams(e *ev, as, ws, ys, yz int) (qlinear, error) {
	var q qlinear
	var ts [4]*Tensor
	for j, i := range []int{as, ws, ys, yz} {
		t, err := e.constIn(i, "a scale or zero point")
		if err != nil {
			return q, err
		}
		if t == nil {
			return q, fmt.Errorf("input %d missing", i)
		}
		ts[j] = t
	}
	if ts[0].Len() != 1 || ts[2].Len() != 1 || ts[3].Len() != 1 {
		return q, fmt.Errorf("the input's and output's scales and zero point must be single values")
	}
	q.dt = ts[3].DType
	lo, hi, err := quantRange(q.dt)
	if err != nil || q.dt == graph.Int32 {
		return q, fmt.Errorf("output type %s: uint8 and int8 only", q.dt)
	}
	q.lo, q.hi = float32(lo), float32(hi)
	q.zy = float32(ts[3].at(0))
	sa, sy := float32(ts[0].at(0)), float32(ts[2].at(0))
	q.mult = make([]float32, ts[1].Len())
	for c := range q.mult {
		q.mult[c] = sa * float32(ts[1].at(int64(c))) / sy
	}
	return q, nil
}

// requantize maps int32 sums to the output type (the QGEMM kernel's
// requantising epilogue); c gives each element's channel.
func (q qlinear) requantize(acc *Tensor, c func(i int64) int64) *Tensor {
	y := &Tensor{DType: q.dt, Shape: acc.Shape}
	if acc.I == nil {
		return y
	}
	y.I = make([]int64, len(acc.I))
	for i, v := range acc.I {
		m := q.mult[0]
		if len(q.mult) > 1 {
			m = q.mult[c(int64(i))]
		}
		f := float32(int32(v)) * m
		y.I[i] = int64(clampF(float32(math.RoundToEven(float64(f)))+q.zy, q.lo, q.hi))
	}
	return y
}

func refQLinearMatMul(e *ev) ([]*Tensor, error) {
	a, b, err := e.need2(0, 3)
	if err != nil {
		return nil, err
	}
	q, err := qlinearParams(e, 1, 4, 6, 7)
	if err != nil {
		return nil, err
	}
	acc, err := integerMatMul(e, a, b, e.in(2), e.in(5))
	if err != nil {
		return nil, err
	}
	N := acc.Shape[len(acc.Shape)-1]
	if len(q.mult) != 1 && int64(len(q.mult)) != N {
		return nil, fmt.Errorf("b_scale has %d values for %d columns", len(q.mult), N)
	}
	return one(q.requantize(acc, func(i int64) int64 { return i % N }))
}

func refQLinearConv(e *ev) ([]*Tensor, error) {
	x, w, err := e.need2(0, 3)
	if err != nil {
		return nil, err
	}
	q, err := qlinearParams(e, 1, 4, 6, 7)
	if err != nil {
		return nil, err
	}
	acc, err := integerConv(e, x, w, e.in(2), e.in(5))
	if err != nil {
		return nil, err
	}
	M := w.Shape[0]
	if len(q.mult) != 1 && int64(len(q.mult)) != M {
		return nil, fmt.Errorf("w_scale has %d values for %d output channels", len(q.mult), M)
	}
	plane := numel(acc.Shape[2:])
	ch := func(i int64) int64 { return (i / plane) % M }
	if bias := e.in(8); bias != nil {
		if bias.DType != graph.Int32 || bias.Len() != M {
			return nil, fmt.Errorf("bias is %s%v, want int32[%d]", bias.DType, bias.Shape, M)
		}
		if !bias.known() {
			return nil, fmt.Errorf("bias must be a constant")
		}
		if acc.I != nil {
			for i := range acc.I {
				acc.I[i] = int64(int32(acc.I[i]) + int32(bias.I[ch(int64(i))]))
			}
		}
	}
	return one(q.requantize(acc, ch))
}

// addQuantRefs adds the quantisation operators' reference implementations
// to refOps.
func addQuantRefs() {
	for op, f := range map[string]func(*ev) ([]*Tensor, error){
		"QuantizeLinear": refQuantizeLinear, "DequantizeLinear": refDequantizeLinear,
		"DynamicQuantizeLinear": refDynamicQuantizeLinear,
		"MatMulInteger":         refMatMulInteger, "ConvInteger": refConvInteger,
		"QLinearMatMul": refQLinearMatMul, "QLinearConv": refQLinearConv,
	} {
		refOps[op] = f
	}
}

package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Operators each of whose output elements is one element of its inputs
// (or a zero), at a position fixed by constants (indices, pads, a
// condition, a diagonal): GatherElements, GatherND, ScatterND and
// ScatterElements without a reduction, Compress, Pad, Trilu,
// ReverseSequence and MaxUnpool. The
// compiler computes that position for every output element once (an
// indexMap) and runs the node as one GATHER from its data inputs laid end
// to end (preceded by a COPY of each into a scratch buffer when there are
// several); the reference evaluator gathers by the same map. Pad with a
// constant value is two COPYs instead: the value everywhere, the input
// into the interior.

// maxIndexMap bounds an index map's entries (8 bytes each): a pad from a
// malformed model must fail, not allocate the machine away.
const maxIndexMap = 1 << 28

// indexMap is where each output element of a node comes from: position
// m[i] of its sources (the inputs srcs, flattened and laid end to end,
// then the constant values extra).
type indexMap struct {
	oshape []int64
	srcs   []int
	extra  []float32
	m      []int64
}

// indexMapOps are the operators indexMapOf describes.
var indexMapOps = map[string]bool{
	"GatherElements": true, "Trilu": true, "GatherND": true, "ScatterND": true, "ScatterElements": true, "Scatter": true,
	"Compress": true, "Pad": true, "ReverseSequence": true, "MaxUnpool": true,
}

// indexMapOf computes node e.n's index map from its constant inputs and
// its data inputs' shapes.
func indexMapOf(e *ev) (*indexMap, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	switch e.n.Op {
	case "GatherElements":
		m, oshape, err := gatherElementsArgs(e, x.Shape)
		if err != nil {
			return nil, err
		}
		return &indexMap{oshape: oshape, srcs: []int{0}, m: m}, nil
	case "Trilu":
		k, err := triluK(e)
		if err != nil {
			return nil, err
		}
		m, err := triluMap(e.n, x.Shape, k)
		if err != nil {
			return nil, err
		}
		// a cleared element is the zero after x (a product with a 0/1
		// mask would turn an infinity into NaN)
		return &indexMap{oshape: x.Shape, srcs: []int{0}, extra: []float32{0}, m: m}, nil
	case "GatherND":
		return gatherNDMap(e, x.Shape)
	case "ScatterND":
		return scatterNDMap(e, x.Shape)
	case "ScatterElements", "Scatter":
		return scatterElementsMap(e, x.Shape)
	case "Compress":
		return compressMap(e, x.Shape)
	case "Pad":
		return padMap(e, x.Shape)
	case "ReverseSequence":
		return reverseSequenceMap(e, x.Shape)
	case "MaxUnpool":
		return maxUnpoolMap(e, x.Shape)
	}
	return nil, fmt.Errorf("%s has no index map", e.n.Op)
}

// indexIn reads constant integer input i (indices): an error names what
// when it is missing, computed at run time or not integer.
func (e *ev) indexIn(i int, what string) (*Tensor, error) {
	t, err := e.constIn(i, what)
	if err != nil {
		return nil, err
	}
	if t == nil {
		return nil, fmt.Errorf("%s missing", what)
	}
	if t.IsFloat() {
		return nil, fmt.Errorf("%s are %s, want an integer type", what, t.DType)
	}
	return t, nil
}

// normIndex maps index v into [0, d) (negative: from the end).
func normIndex(v, d int64) (int64, error) {
	if v < -d || v >= d {
		return 0, fmt.Errorf("index %d out of range for a dimension of %d", v, d)
	}
	if v < 0 {
		v += d
	}
	return v, nil
}

func identityMap(n int64) []int64 {
	m := make([]int64, n)
	for i := range m {
		m[i] = int64(i)
	}
	return m
}

// gatherNDMap: output [indices dims but the last] + data dims after the
// batch dimensions and the k indexed ones.
func gatherNDMap(e *ev, ds []int64) (*indexMap, error) {
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return nil, err
	}
	is, b := it.Shape, e.n.AttrInt("batch_dims", 0)
	if len(is) < 1 || b < 0 || b >= int64(len(is)) {
		return nil, fmt.Errorf("indices of shape %v with batch_dims %d", is, b)
	}
	k := is[len(is)-1]
	if k < 1 || b+k > int64(len(ds)) || !eqShape(is[:b], ds[:b]) {
		return nil, fmt.Errorf("indices of shape %v (batch_dims %d) for data of shape %v", is, b, ds)
	}
	oshape := append(append([]int64{}, is[:len(is)-1]...), ds[b+k:]...)
	inner, batches, per := numel(ds[b+k:]), numel(ds[:b]), numel(is[b:len(is)-1])
	st, bstride := stridesOf(ds), numel(ds[b:])
	idx := it.ints()
	m := make([]int64, 0, numel(oshape))
	for bi := int64(0); bi < batches; bi++ {
		for mi := int64(0); mi < per; mi++ {
			off := bi * bstride
			t := idx[(bi*per+mi)*k : (bi*per+mi+1)*k]
			for j, v := range t {
				v, err := normIndex(v, ds[b+int64(j)])
				if err != nil {
					return nil, err
				}
				off += v * st[b+int64(j)]
			}
			for j := int64(0); j < inner; j++ {
				m = append(m, off+j)
			}
		}
	}
	return &indexMap{oshape: oshape, srcs: []int{0}, m: m}, nil
}

// scatterReduction reads a scatter's reduction; only "none" has an index
// map (the others combine values).
func scatterReduction(n *graph.Node) string { return n.AttrString("reduction", "none") }

// scatterNDMap: data with the slices the indices name replaced by the
// updates' (sources: data, then updates).
func scatterNDMap(e *ev, ds []int64) (*indexMap, error) {
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return nil, err
	}
	u, err := e.need(2)
	if err != nil {
		return nil, err
	}
	is := it.Shape
	if len(is) < 1 {
		return nil, fmt.Errorf("indices of rank 0")
	}
	k := is[len(is)-1]
	if k < 1 || k > int64(len(ds)) {
		return nil, fmt.Errorf("indices of shape %v for data of shape %v", is, ds)
	}
	if want := append(append([]int64{}, is[:len(is)-1]...), ds[k:]...); !eqShape(u.Shape, want) {
		return nil, fmt.Errorf("updates of shape %v, want %v", u.Shape, want)
	}
	n, inner, st := numel(ds), numel(ds[k:]), stridesOf(ds)
	m := identityMap(n)
	idx := it.ints()
	for ui := int64(0); ui < numel(is[:len(is)-1]); ui++ {
		off, err := ndOffset(idx[ui*k:(ui+1)*k], ds, st)
		if err != nil {
			return nil, err
		}
		for j := int64(0); j < inner; j++ {
			m[off+j] = n + ui*inner + j
		}
	}
	return &indexMap{oshape: ds, srcs: []int{0, 2}, m: m}, nil
}

// ndOffset is the flat offset of the slice a ScatterND/GatherND index
// tuple t names in data of shape ds (strides st).
func ndOffset(t, ds, st []int64) (int64, error) {
	var off int64
	for j, v := range t {
		v, err := normIndex(v, ds[j])
		if err != nil {
			return 0, err
		}
		off += v * st[j]
	}
	return off, nil
}

// scatterElementsMap: data with the elements the indices name along axis
// replaced by the updates' (sources: data, then updates).
func scatterElementsMap(e *ev, ds []int64) (*indexMap, error) {
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return nil, err
	}
	u, err := e.need(2)
	if err != nil {
		return nil, err
	}
	is := it.Shape
	if !eqShape(u.Shape, is) || len(is) != len(ds) {
		return nil, fmt.Errorf("indices %v and updates %v for data %v: want both of the data's rank and of one shape", is, u.Shape, ds)
	}
	axis, err := normAxis(e.n.AttrInt("axis", 0), int64(len(ds)))
	if err != nil {
		return nil, err
	}
	for d := range is {
		if int64(d) != axis && is[d] > ds[d] {
			return nil, fmt.Errorf("indices dimension %d is %d, more than the data's %d", d, is[d], ds[d])
		}
	}
	n, st := numel(ds), stridesOf(ds)
	m := identityMap(n)
	coord := make([]int64, len(is))
	for p, v := range it.ints() {
		v, err := normIndex(v, ds[axis])
		if err != nil {
			return nil, err
		}
		unravel(int64(p), is, coord)
		coord[axis] = v
		m[dot(coord, st)] = n + int64(p)
	}
	return &indexMap{oshape: ds, srcs: []int{0, 2}, m: m}, nil
}

// compressMap: the slices along axis (of the flattened input without
// one) where the condition holds.
func compressMap(e *ev, xs []int64) (*indexMap, error) {
	ct, err := e.constIn(1, "condition")
	if err != nil {
		return nil, err
	}
	if ct == nil || len(ct.Shape) != 1 {
		return nil, fmt.Errorf("condition must be a 1-D constant")
	}
	shape, axis := xs, int64(0)
	if a := e.n.Attr("axis"); a != nil {
		if axis, err = normAxis(a.I, int64(len(xs))); err != nil {
			return nil, err
		}
	} else {
		shape = []int64{numel(xs)}
	}
	if ct.Len() > shape[axis] {
		return nil, fmt.Errorf("condition of %d values for an axis of %d", ct.Len(), shape[axis])
	}
	var sel []int64
	for i := int64(0); i < ct.Len(); i++ {
		if ct.at(i) != 0 {
			sel = append(sel, i)
		}
	}
	oshape := append([]int64{}, shape...)
	oshape[axis] = int64(len(sel))
	outer, L, inner := numel(shape[:axis]), shape[axis], numel(shape[axis+1:])
	m := make([]int64, 0, numel(oshape))
	for o := int64(0); o < outer; o++ {
		for _, s := range sel {
			for j := int64(0); j < inner; j++ {
				m = append(m, (o*L+s)*inner+j)
			}
		}
	}
	return &indexMap{oshape: oshape, srcs: []int{0}, m: m}, nil
}

// reverseSequenceMap: each batch entry's first sequence_lens[b] steps
// along the time axis reversed, the rest as they are.
func reverseSequenceMap(e *ev, xs []int64) (*indexMap, error) {
	lt, err := e.indexIn(1, "sequence_lens")
	if err != nil {
		return nil, err
	}
	ba, ta := e.n.AttrInt("batch_axis", 1), e.n.AttrInt("time_axis", 0)
	if len(xs) < 2 || ba < 0 || ba > 1 || ta < 0 || ta > 1 || ba == ta {
		return nil, fmt.Errorf("batch_axis %d and time_axis %d for an input of rank %d", ba, ta, len(xs))
	}
	lens := lt.ints()
	if int64(len(lens)) != xs[ba] {
		return nil, fmt.Errorf("%d sequence lengths for a batch of %d", len(lens), xs[ba])
	}
	st := stridesOf(xs)
	m := identityMap(numel(xs))
	coord := make([]int64, len(xs))
	for i := range m {
		unravel(int64(i), xs, coord)
		b, t := coord[ba], coord[ta]
		if l := lens[b]; l < 0 || l > xs[ta] {
			return nil, fmt.Errorf("sequence length %d for a time axis of %d", l, xs[ta])
		} else if t < l {
			m[i] += (l - 1 - 2*t) * st[ta]
		}
	}
	return &indexMap{oshape: xs, srcs: []int{0}, m: m}, nil
}

// maxUnpoolMap: zeros of the output's shape with X's values at the
// positions its indices (MaxPool's) name. The indices are flat positions
// in the shape the pooling's kernel, strides and pads give; an
// output_shape larger than that holds them at the same coordinates (ONNX's
// reference), the rest zeros.
func maxUnpoolMap(e *ev, xs []int64) (*indexMap, error) {
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return nil, err
	}
	if !eqShape(it.Shape, xs) || len(xs) < 3 {
		return nil, fmt.Errorf("indices %v for X %v: want X's shape, of rank 3 or more", it.Shape, xs)
	}
	sp := len(xs) - 2
	ks, strides := e.n.AttrInts("kernel_shape", nil), e.n.AttrInts("strides", nil)
	pads := e.n.AttrInts("pads", make([]int64, 2*sp))
	if len(ks) != sp || len(pads) != 2*sp || (strides != nil && len(strides) != sp) {
		return nil, fmt.Errorf("kernel_shape %v, strides %v, pads %v for %d spatial dimensions", ks, strides, pads, sp)
	}
	dshape := append([]int64{}, xs[:2]...)
	for d := 0; d < sp; d++ {
		s := int64(1)
		if strides != nil {
			s = strides[d]
		}
		dshape = append(dshape, (xs[2+d]-1)*s+ks[d]-pads[d]-pads[sp+d])
	}
	oshape := dshape
	if ot, err := e.constIn(2, "output_shape"); err != nil {
		return nil, err
	} else if ot != nil {
		if oshape = ot.ints(); len(oshape) != len(xs) {
			return nil, fmt.Errorf("output_shape %v for X of rank %d", oshape, len(xs))
		}
	}
	total, dtotal := numel(oshape), numel(dshape)
	m := make([]int64, total)
	for i := range m {
		m[i] = numel(xs) // the zero after X
	}
	ost := stridesOf(oshape)
	coord := make([]int64, len(xs))
	for i, v := range it.ints() {
		if v < 0 || v >= dtotal {
			return nil, fmt.Errorf("index %d out of range for an unpooled shape %v", v, dshape)
		}
		unravel(v, dshape, coord)
		inside := true
		for d, c := range coord {
			inside = inside && c < oshape[d]
		}
		if inside {
			m[dot(coord, ost)] = int64(i)
		}
	}
	return &indexMap{oshape: oshape, srcs: []int{0}, extra: []float32{0}, m: m}, nil
}

// padArgs reads Pad's mode, per-axis begin and end pads and constant
// value (inputs from opset 11, attributes before; axes from opset 18).
func padArgs(e *ev, r int) (mode string, begin, end []int64, value float32, err error) {
	mode = e.n.AttrString("mode", "constant")
	switch mode {
	case "constant", "reflect", "edge", "wrap":
	default:
		return "", nil, nil, 0, fmt.Errorf("mode %q, want constant, reflect, edge or wrap", mode)
	}
	var pads []int64
	if e.opset < 11 {
		pads, value = e.n.AttrInts("pads", nil), e.n.AttrFloat("value", 0)
	} else {
		pt, err := e.indexIn(1, "pads")
		if err != nil {
			return "", nil, nil, 0, err
		}
		pads = pt.ints()
		if vt, err := e.constIn(2, "constant_value"); err != nil {
			return "", nil, nil, 0, err
		} else if vt != nil && vt.Len() == 1 {
			value = float32(vt.at(0))
		}
	}
	axes := make([]int64, r)
	for i := range axes {
		axes[i] = int64(i)
	}
	if at, err := e.constIn(3, "axes"); err != nil {
		return "", nil, nil, 0, err
	} else if at != nil {
		axes = at.ints()
	}
	if len(pads) != 2*len(axes) {
		return "", nil, nil, 0, fmt.Errorf("%d pads for %d axes, want %d", len(pads), len(axes), 2*len(axes))
	}
	begin, end = make([]int64, r), make([]int64, r)
	for i, a := range axes {
		a, err := normAxis(a, int64(r))
		if err != nil {
			return "", nil, nil, 0, err
		}
		begin[a], end[a] = pads[i], pads[len(axes)+i]
	}
	return mode, begin, end, value, nil
}

// padSource maps output position o along an axis of d input values
// padded by b before to its input position, or -1 for the constant.
func padSource(mode string, o, b, d int64) int64 {
	s := o - b
	if s >= 0 && s < d {
		return s
	}
	switch {
	case mode == "constant" || d == 0:
		return -1
	case mode == "edge":
		return min(max(s, 0), d-1)
	case mode == "wrap":
		return ((s % d) + d) % d
	case d == 1: // reflect
		return 0
	}
	for s < 0 || s >= d {
		if s < 0 {
			s = -s
		} else {
			s = 2*(d-1) - s
		}
	}
	return s
}

// padMap: each output element's input element, or the constant value
// (source position numel(xs)) outside the input in constant mode.
func padMap(e *ev, xs []int64) (*indexMap, error) {
	mode, begin, end, value, err := padArgs(e, len(xs))
	if err != nil {
		return nil, err
	}
	oshape := make([]int64, len(xs))
	for i, d := range xs {
		if oshape[i] = d + begin[i] + end[i]; oshape[i] < 0 {
			return nil, fmt.Errorf("pads %d, %d on an axis of %d", begin[i], end[i], d)
		}
		if mode != "constant" && d == 0 && oshape[i] > 0 {
			return nil, fmt.Errorf("%s padding of an empty axis", mode)
		}
	}
	n, st := numel(xs), stridesOf(xs)
	if numel(oshape) > maxIndexMap || checkValueShaped(oshape, false) != nil {
		return nil, fmt.Errorf("padding to %v: more than the %d values an index map holds", oshape, maxIndexMap)
	}
	m := make([]int64, numel(oshape))
	coord := make([]int64, len(xs))
	for i := range m {
		unravel(int64(i), oshape, coord)
		var off int64
		for a, o := range coord {
			s := padSource(mode, o, begin[a], xs[a])
			if s < 0 {
				off = -1
				break
			}
			off += s * st[a]
		}
		if off < 0 {
			off = n
		}
		m[i] = off
	}
	im := &indexMap{oshape: oshape, srcs: []int{0}, m: m}
	if mode == "constant" {
		im.extra = []float32{value}
	}
	return im, nil
}

// refIndexMap is the reference of the index-map operators (and of
// ScatterND and ScatterElements with a reduction, which combine values).
func refIndexMap(e *ev) ([]*Tensor, error) {
	if (e.n.Op == "ScatterND" || e.n.Op == "ScatterElements") && scatterReduction(e.n) != "none" {
		return refScatterReduce(e)
	}
	im, err := indexMapOf(e)
	if err != nil {
		return nil, err
	}
	x := e.in(0)
	var srcs []*Tensor
	for _, i := range im.srcs {
		t, err := e.need(i)
		if err != nil {
			return nil, err
		}
		if !t.known() {
			return one(shapeOnly(x.DType, im.oshape))
		}
		srcs = append(srcs, t)
	}
	var flat []float64
	for _, t := range srcs {
		for i := int64(0); i < t.Len(); i++ {
			flat = append(flat, t.at(i))
		}
	}
	for _, v := range im.extra {
		flat = append(flat, float64(v))
	}
	vals := make([]float64, len(im.m))
	for i, j := range im.m {
		vals[i] = flat[j]
	}
	return one(fromValues(x.DType, im.oshape, vals))
}

// fromValues is a tensor of type dt and shape holding vals (float types
// rounded to float32, integer types truncated).
func fromValues(dt graph.DType, shape []int64, vals []float64) *Tensor {
	y := &Tensor{DType: dt, Shape: shape}
	if y.IsFloat() {
		y.F = make([]float32, len(vals))
		for i, v := range vals {
			y.F[i] = float32(v)
		}
		return y
	}
	y.I = make([]int64, len(vals))
	for i, v := range vals {
		y.I[i] = int64(v)
	}
	return y
}

// refScatterReduce is ScatterND or ScatterElements with reduction add,
// mul, max or min: each update combined, in order, with the element it
// names.
func refScatterReduce(e *ev) ([]*Tensor, error) {
	red := scatterReduction(e.n)
	switch red {
	case "add", "mul", "max", "min":
	default:
		return nil, fmt.Errorf("reduction %q, want none, add, mul, max or min", red)
	}
	// each update element combined with its target in order: duplicates
	// combine too
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	u, err := e.need(2)
	if err != nil {
		return nil, err
	}
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return nil, err
	}
	if !x.known() || !u.known() {
		return one(shapeOnly(x.DType, x.Shape))
	}
	targets, err := scatterTargets(e, x.Shape, it, u.Shape)
	if err != nil {
		return nil, err
	}
	vals := make([]float64, x.Len())
	for i := range vals {
		vals[i] = x.at(int64(i))
	}
	for p, at := range targets {
		v := u.at(int64(p))
		switch red {
		case "add":
			vals[at] += v
		case "mul":
			vals[at] *= v
		case "max":
			vals[at] = max(vals[at], v)
		case "min":
			vals[at] = min(vals[at], v)
		}
	}
	return one(fromValues(x.DType, x.Shape, vals))
}

// scatterTargets is the data position each update element goes to.
func scatterTargets(e *ev, ds []int64, it *Tensor, us []int64) ([]int64, error) {
	idx, st := it.ints(), stridesOf(ds)
	targets := make([]int64, numel(us))
	if e.n.Op == "ScatterND" {
		is := it.Shape
		k := is[len(is)-1]
		inner := numel(ds[k:])
		for ui := int64(0); ui < numel(is[:len(is)-1]); ui++ {
			off, err := ndOffset(idx[ui*k:(ui+1)*k], ds, st)
			if err != nil {
				return nil, err
			}
			for j := int64(0); j < inner; j++ {
				targets[ui*inner+j] = off + j
			}
		}
		return targets, nil
	}
	axis, err := normAxis(e.n.AttrInt("axis", 0), int64(len(ds)))
	if err != nil {
		return nil, err
	}
	coord := make([]int64, len(us))
	for p, v := range idx {
		v, err := normIndex(v, ds[axis])
		if err != nil {
			return nil, err
		}
		unravel(int64(p), us, coord)
		coord[axis] = v
		targets[p] = dot(coord, st)
	}
	return targets, nil
}

// lowerIndexMap runs an index-map operator as a GATHER (after COPYs of
// its sources into one scratch buffer when it has several), or Pad with a
// constant as a fill and an interior COPY.
func (c *compiler) lowerIndexMap(g *group) error {
	n := c.node(g)
	if (n.Op == "ScatterND" || n.Op == "ScatterElements") && scatterReduction(n) != "none" {
		return c.lowerScatterReduce(g)
	}
	im, err := indexMapOf(c.evFor(n))
	if err != nil {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: err.Error()}
	}
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if len(im.m) == 0 {
		return nil
	}
	if n.Op == "Pad" && len(im.extra) == 1 {
		return c.lowerPadConstant(g, im, dst)
	}
	var total int64
	var ops []operand
	var lens []int64
	for _, i := range im.srcs {
		v, err := c.val(n.Inputs[i])
		if err != nil {
			return err
		}
		op, err := c.operand(n.Inputs[i])
		if err != nil {
			return err
		}
		ops, lens = append(ops, op), append(lens, v.t.Len())
		total += v.t.Len()
	}
	if len(ops) == 1 && len(im.extra) == 0 {
		c.gatherMap(g, ops[0], total, im.m, dst)
		return nil
	}
	if len(im.extra) > 0 {
		ops, lens = append(ops, c.newConst(im.extra)), append(lens, int64(len(im.extra)))
		total += int64(len(im.extra))
	}
	scratch := operand{sp: SpaceArena, buf: c.newBuf(total)}
	var at int64
	for i, op := range ops {
		if lens[i] > 0 {
			if err := c.copyKernel(g, "", op, 0, scratch, at, []int64{lens[i]}, []int64{1}, []int64{1}); err != nil {
				return err
			}
		}
		at += lens[i]
	}
	c.gatherMap(g, scratch, total, im.m, dst)
	return nil
}

// lowerScatterReduce runs a scatter with a reduction whose updates are
// constants as one broadcasting BINARY of the data with a constant the
// compiler builds: the updates combined per target position, in order,
// with the reduction's identity (0, 1, -inf, +inf) where none lands.
func (c *compiler) lowerScatterReduce(g *group) error {
	n := c.node(g)
	e := c.evFor(n)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	u, err := e.constIn(2, "updates")
	if err != nil {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: "a reduction of updates computed at run time is not supported (constant updates are)"}
	}
	it, err := e.indexIn(1, "indices")
	if err != nil {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: err.Error()}
	}
	targets, err := scatterTargets(e, x.t.Shape, it, u.Shape)
	if err != nil {
		return err
	}
	red := scatterReduction(n)
	op, ident := map[string]int{"add": BinAdd, "mul": BinMul, "max": BinMax, "min": BinMin}[red],
		map[string]float32{"add": 0, "mul": 1, "max": float32(math.Inf(-1)), "min": float32(math.Inf(1))}[red]
	delta := make([]float32, x.t.Len())
	for i := range delta {
		delta[i] = ident
	}
	for p, at := range targets {
		v := float32(u.at(int64(p)))
		switch red {
		case "add":
			delta[at] += v
		case "mul":
			delta[at] *= v
		case "max":
			delta[at] = max(delta[at], v)
		case "min":
			delta[at] = min(delta[at], v)
		}
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if x.t.Len() == 0 {
		return nil
	}
	return c.binaryKernel(g, op, src, x.t.Shape, c.newConst(delta), x.t.Shape, dst, x.t.Shape)
}

// lowerPadConstant fills Pad's output with its value (a COPY from one
// constant, stride 0) and copies the input's kept part into the interior
// (negative pads crop).
func (c *compiler) lowerPadConstant(g *group, im *indexMap, dst operand) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xs, os := x.t.Shape, im.oshape
	_, begin, _, _, err := padArgs(c.evFor(n), len(xs))
	if err != nil {
		return err
	}
	if err := c.copyView(g, c.newConst(im.extra), dst, os, make([]int64, len(os))); err != nil {
		return err
	}
	// the interior: input positions max(0, -b) .. , output positions max(0, b) ..
	xst, ost := stridesOf(xs), stridesOf(os)
	dims := make([]int64, len(xs))
	var soff, doff int64
	for a := range xs {
		s0, o0 := max(0, -begin[a]), max(0, begin[a])
		dims[a] = min(xs[a]-s0, os[a]-o0)
		if dims[a] <= 0 {
			return nil // nothing of the input is kept
		}
		soff += s0 * xst[a]
		doff += o0 * ost[a]
	}
	src, _ := c.operand(n.Inputs[0])
	src.off += soff
	dst.off += doff
	cd, st := collapse(dims, xst, ost)
	if len(cd) > MaxRank {
		return fmt.Errorf("a pad of rank %d > %d", len(cd), MaxRank)
	}
	return c.copyKernel(g, "", src, 0, dst, 0, cd, st[0], st[1])
}

// ---- EyeLike, OneHot (fold) -------------------------------------------------------------

// refEyeLike is a 2-D tensor of the input's shape with ones on diagonal k:
// known from the shape alone, so it folds at compile time even on a
// run-time input.
func refEyeLike(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) != 2 {
		return nil, fmt.Errorf("input of rank %d, want 2", len(x.Shape))
	}
	dt := x.DType
	if a := e.n.Attr("dtype"); a != nil {
		dt = graph.DType(a.I)
	}
	rows, cols, k := x.Shape[0], x.Shape[1], e.n.AttrInt("k", 0)
	y := &Tensor{DType: dt, Shape: append([]int64{}, x.Shape...)}
	if isFloatType(dt) {
		y.F = make([]float32, rows*cols)
	} else {
		y.I = make([]int64, rows*cols)
	}
	for r := int64(0); r < rows; r++ {
		if c := r + k; c >= 0 && c < cols {
			if y.F != nil {
				y.F[r*cols+c] = 1
			} else {
				y.I[r*cols+c] = 1
			}
		}
	}
	return one(y)
}

// oneHotArgs reads OneHot's constant depth and values and its axis for
// indices of shape is, and returns them with the output's shape.
func oneHotArgs(e *ev, is []int64) (depth, axis int64, vt *Tensor, oshape []int64, err error) {
	dt, err := e.constIn(1, "depth")
	if err != nil {
		return 0, 0, nil, nil, err
	}
	if vt, err = e.constIn(2, "values"); err != nil {
		return 0, 0, nil, nil, err
	}
	if dt == nil || vt == nil || dt.Len() != 1 || vt.Len() != 2 {
		return 0, 0, nil, nil, fmt.Errorf("want indices, a scalar depth and two values")
	}
	if depth = int64(dt.at(0)); depth < 1 {
		return 0, 0, nil, nil, fmt.Errorf("depth %d", depth)
	}
	if axis, err = normAxis(e.n.AttrInt("axis", -1), int64(len(is))+1); err != nil {
		return 0, 0, nil, nil, err
	}
	oshape = append(append(append([]int64{}, is[:axis]...), depth), is[axis:]...)
	return depth, axis, vt, oshape, nil
}

// refOneHot: values[1] where the index (negative: from depth's end) names
// the position along the new axis, values[0] elsewhere.
func refOneHot(e *ev) ([]*Tensor, error) {
	ix, err := e.need(0)
	if err != nil {
		return nil, err
	}
	depth, axis, vt, oshape, err := oneHotArgs(e, ix.Shape)
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped(oshape, ix.known()); err != nil {
		return nil, err
	}
	if !ix.known() {
		return one(shapeOnly(vt.DType, oshape))
	}
	outer, inner := numel(ix.Shape[:axis]), numel(ix.Shape[axis:])
	off, on := vt.at(0), vt.at(1)
	vals := make([]float64, numel(oshape))
	for o := int64(0); o < outer; o++ {
		for i := int64(0); i < inner; i++ {
			v := int64(ix.at(o*inner + i))
			if v < 0 {
				v += depth
			}
			for d := int64(0); d < depth; d++ {
				w := off
				if d == v {
					w = on
				}
				vals[(o*depth+d)*inner+i] = w
			}
		}
	}
	return one(fromValues(vt.DType, oshape, vals))
}

// lowerOneHot runs OneHot on float indices computed at run time: negative
// ones moved up by depth (a LESS with an affine activation, an ADD), then
// an EQUAL of the indices, broadcast along the new axis, with 0..depth-1,
// its affine activation mapping 1 and 0 to the two values. An index that
// is not a whole number matches no position.
func (c *compiler) lowerOneHot(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	is := x.t.Shape
	depth, axis, vt, oshape, err := oneHotArgs(c.evFor(n), is)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if numel(oshape) == 0 {
		return nil
	}
	neg := operand{sp: SpaceArena, buf: c.newBuf(x.t.Len())}
	if err := c.binaryKernelAct(g, BinLess, src, is, c.newConst([]float32{0}), []int64{}, neg, is, ActAffine, float32(depth), 0); err != nil {
		return err
	}
	norm := operand{sp: SpaceArena, buf: c.newBuf(x.t.Len())}
	if err := c.binaryKernel(g, BinAdd, src, is, neg, is, norm, is); err != nil {
		return err
	}
	iota := make([]float32, depth)
	for i := range iota {
		iota[i] = float32(i)
	}
	outer, inner := numel(is[:axis]), numel(is[axis:])
	off, on := float32(vt.at(0)), float32(vt.at(1))
	return c.binaryKernelAct(g, BinEqual, norm, []int64{outer, 1, inner}, c.newConst(iota), []int64{1, depth, 1},
		dst, []int64{outer, depth, inner}, ActAffine, on-off, off)
}

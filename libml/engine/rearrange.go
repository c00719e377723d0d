package engine

import (
	"fmt"

	"sluice/libml/graph"
)

// Operators that rearrange values (DepthToSpace, SpaceToDepth, Tile), the
// index maps of GatherElements and Trilu (run by indexmap.go) and CumSum:
// each has a reference implementation (folding, shape inference) and a
// lowering onto kernels every device already runs (COPY views, GATHER
// with a constant index map, GEMM), so no device needs a kernel of its
// own for them.

// Limits of the lowerings below: how many COPY kernels a view of rank
// above MaxRank may become, and the largest CumSum axis run as a GEMM
// (its L x L 0/1 matrix is a constant of the program).
const (
	maxViewCopies = 4096
	maxCumSumAxis = 2048
)

// ---- DepthToSpace, SpaceToDepth ---------------------------------------------------------

// spaceDepthView returns, for DepthToSpace or SpaceToDepth n of an NCHW
// input of shape xs, the output's shape and a view of the input (dims and
// strides, rank 6) whose row-major order is the output's: the reshape
// and transpose of ONNX's definition.
func spaceDepthView(n *graph.Node, xs []int64) (oshape, dims, strides []int64, err error) {
	if len(xs) != 4 {
		return nil, nil, nil, fmt.Errorf("input of rank %d, want 4 (NCHW)", len(xs))
	}
	b := n.AttrInt("blocksize", 0)
	if b < 1 {
		return nil, nil, nil, fmt.Errorf("blocksize %d, want at least 1", b)
	}
	N, C, H, W := xs[0], xs[1], xs[2], xs[3]
	var s6, perm []int64
	if n.Op == "DepthToSpace" {
		if C%(b*b) != 0 {
			return nil, nil, nil, fmt.Errorf("%d channels do not divide into blocks of %d x %d", C, b, b)
		}
		oshape = []int64{N, C / (b * b), H * b, W * b}
		switch mode := n.AttrString("mode", "DCR"); mode {
		case "DCR":
			s6, perm = []int64{N, b, b, C / (b * b), H, W}, []int64{0, 3, 4, 1, 5, 2}
		case "CRD":
			s6, perm = []int64{N, C / (b * b), b, b, H, W}, []int64{0, 1, 4, 2, 5, 3}
		default:
			return nil, nil, nil, fmt.Errorf("mode %q, want DCR or CRD", mode)
		}
	} else {
		if H%b != 0 || W%b != 0 {
			return nil, nil, nil, fmt.Errorf("%d x %d does not divide into blocks of %d x %d", H, W, b, b)
		}
		oshape = []int64{N, C * b * b, H / b, W / b}
		s6, perm = []int64{N, C, H / b, b, W / b, b}, []int64{0, 3, 5, 1, 2, 4}
	}
	st := stridesOf(s6)
	dims, strides = make([]int64, 6), make([]int64, 6)
	for i, p := range perm {
		dims[i], strides[i] = s6[p], st[p]
	}
	return oshape, dims, strides, nil
}

func refSpaceDepth(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	oshape, dims, strides, err := spaceDepthView(e.n, x.Shape)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	return one(alias(copyStrided(x, dims, strides, 0), oshape))
}

// ---- Tile ------------------------------------------------------------------------------------

// tileView returns Tile's output shape for input shape xs and repeats
// reps, and the view of the input (dims [r0 d0 r1 d1 ...], strides
// [0 s0 0 s1 ...]) whose row-major order is the output's.
func tileView(xs, reps []int64) (oshape, dims, strides []int64, err error) {
	if len(reps) != len(xs) {
		return nil, nil, nil, fmt.Errorf("%d repeats for an input of rank %d", len(reps), len(xs))
	}
	st := stridesOf(xs)
	oshape = make([]int64, len(xs))
	for i, r := range reps {
		if r < 0 {
			return nil, nil, nil, fmt.Errorf("repeat %d on axis %d is negative", r, i)
		}
		oshape[i] = xs[i] * r
		dims = append(dims, r, xs[i])
		strides = append(strides, 0, st[i])
	}
	return oshape, dims, strides, nil
}

func refTile(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r, err := e.constIn(1, "repeats")
	if err != nil {
		return nil, err
	}
	if r == nil {
		return nil, fmt.Errorf("repeats missing")
	}
	oshape, dims, strides, err := tileView(x.Shape, r.ints())
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped(dims, x.known()); err != nil { // oshape's product, without overflow
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	return one(alias(copyStrided(x, dims, strides, 0), oshape))
}

// ---- GatherElements, Trilu: a constant index map ---------------------------------------

// gatherElementsMap returns, for GatherElements of data of shape xs along
// axis by indices idx of shape is, the flat data offset of every output
// element.
func gatherElementsMap(xs, is, idx []int64, axis int64) ([]int64, error) {
	if len(is) != len(xs) {
		return nil, fmt.Errorf("indices of rank %d for data of rank %d", len(is), len(xs))
	}
	for d := range is {
		if int64(d) != axis && is[d] > xs[d] {
			return nil, fmt.Errorf("indices dimension %d is %d, more than the data's %d", d, is[d], xs[d])
		}
	}
	st := stridesOf(xs)
	coord := make([]int64, len(is))
	m := make([]int64, len(idx))
	for i, v := range idx {
		if v < -xs[axis] || v >= xs[axis] {
			return nil, fmt.Errorf("index %d out of range for axis %d of size %d", v, axis, xs[axis])
		}
		if v < 0 {
			v += xs[axis]
		}
		unravel(int64(i), is, coord)
		coord[axis] = v
		m[i] = dot(coord, st)
	}
	return m, nil
}

// gatherElementsArgs reads GatherElements' axis and constant indices for
// data of shape xs and returns the index map and the output shape.
func gatherElementsArgs(e *ev, xs []int64) ([]int64, []int64, error) {
	ix, err := e.constIn(1, "indices")
	if err != nil {
		return nil, nil, err
	}
	if ix == nil {
		return nil, nil, fmt.Errorf("indices missing")
	}
	if ix.IsFloat() {
		return nil, nil, fmt.Errorf("indices are %s, want int32 or int64", ix.DType)
	}
	axis, err := normAxis(e.n.AttrInt("axis", 0), int64(len(xs)))
	if err != nil {
		return nil, nil, err
	}
	m, err := gatherElementsMap(xs, ix.Shape, ix.ints(), axis)
	return m, ix.Shape, err
}

// triluMap returns, for Trilu n of an input of shape xs with diagonal k,
// each output element's input offset, or len (xs's element count) where
// the output is zero.
func triluMap(n *graph.Node, xs []int64, k int64) ([]int64, error) {
	r := len(xs)
	if r < 2 {
		return nil, fmt.Errorf("input of rank %d, want at least 2", r)
	}
	rows, cols := xs[r-2], xs[r-1]
	upper := n.AttrInt("upper", 1) != 0
	total := numel(xs)
	m := make([]int64, total)
	for i := range m {
		row, col := int64(i)/cols%rows, int64(i)%cols
		if keep := col-row >= k; keep == upper || (!upper && col-row == k) {
			m[i] = int64(i)
		} else {
			m[i] = total
		}
	}
	return m, nil
}

// triluK reads Trilu's optional diagonal k (a constant scalar).
func triluK(e *ev) (int64, error) {
	k, err := e.scalarIn(1, "k", 0)
	return int64(k), err
}

// ---- CumSum ----------------------------------------------------------------------------------

// cumSumArgs reads CumSum's axis (a constant scalar input) for an input of
// shape xs and returns the axis and its attributes.
func cumSumArgs(e *ev, xs []int64) (axis int64, exclusive, reverse bool, err error) {
	at, err := e.constIn(1, "axis")
	if err != nil {
		return 0, false, false, err
	}
	if at == nil || at.Len() != 1 {
		return 0, false, false, fmt.Errorf("axis must be one value")
	}
	if axis, err = normAxis(int64(at.at(0)), int64(len(xs))); err != nil {
		return 0, false, false, err
	}
	return axis, e.n.AttrInt("exclusive", 0) != 0, e.n.AttrInt("reverse", 0) != 0, nil
}

// cumSumTakes reports whether CumSum's output at position l along the axis
// sums the input at position k.
func cumSumTakes(k, l int64, exclusive, reverse bool) bool {
	if reverse {
		k, l = l, k
	}
	return k < l || (k == l && !exclusive)
}

func refCumSum(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	axis, exclusive, reverse, err := cumSumArgs(e, x.Shape)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, x.Shape))
	}
	L, inner := x.Shape[axis], numel(x.Shape[axis+1:])
	outer := numel(x.Shape[:axis])
	y := &Tensor{DType: x.DType, Shape: x.Shape}
	if x.IsFloat() {
		y.F = make([]float32, x.Len())
	} else {
		y.I = make([]int64, x.Len())
	}
	for o := int64(0); o < outer; o++ {
		for i := int64(0); i < inner; i++ {
			var fs float32
			var is int64
			for s := int64(0); s < L; s++ {
				l := s
				if reverse {
					l = L - 1 - s
				}
				at := (o*L+l)*inner + i
				if exclusive {
					if y.F != nil {
						y.F[at] = fs
					} else {
						y.I[at] = is
					}
				}
				if y.F != nil {
					fs += x.F[at]
				} else {
					is += x.I[at]
				}
				if !exclusive {
					if y.F != nil {
						y.F[at] = fs
					} else {
						y.I[at] = is
					}
				}
			}
		}
	}
	return one(y)
}

// ---- lowerings -------------------------------------------------------------------------------

// copyView copies the view (dims, strides) of src into dst in row-major
// order: one COPY kernel, or several when the view, collapsed, has more
// than MaxRank dimensions (one per index of the leading ones).
func (c *compiler) copyView(g *group, src, dst operand, dims, strides []int64) error {
	if numel(dims) == 0 {
		return nil
	}
	cd, st := collapse(dims, strides, stridesOf(dims))
	lead := len(cd) - MaxRank
	if lead <= 0 {
		return c.copyKernel(g, "", src, 0, dst, 0, cd, st[0], st[1])
	}
	count := numel(cd[:lead])
	if count > maxViewCopies {
		return fmt.Errorf("a view of rank %d needs %d copies, more than %d", len(cd), count, maxViewCopies)
	}
	idx := make([]int64, lead)
	for i := int64(0); i < count; i++ {
		unravel(i, cd[:lead], idx)
		if err := c.copyKernel(g, "", src, dot(idx, st[0][:lead]), dst, dot(idx, st[1][:lead]),
			cd[lead:], st[0][lead:], st[1][lead:]); err != nil {
			return err
		}
	}
	return nil
}

func (c *compiler) lowerSpaceDepth(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	_, dims, strides, err := spaceDepthView(n, x.t.Shape)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	return c.copyView(g, src, dst, dims, strides)
}

func (c *compiler) lowerTile(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	r, err := c.evFor(n).constIn(1, "repeats")
	if err != nil {
		return err
	}
	if r == nil {
		return fmt.Errorf("repeats missing")
	}
	_, dims, strides, err := tileView(x.t.Shape, r.ints())
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	return c.copyView(g, src, dst, dims, strides)
}

// gatherMap emits a GATHER of src's flat elements by the constant offsets
// m (src seen as one axis of size srcLen) into dst.
func (c *compiler) gatherMap(g *group, src operand, srcLen int64, m []int64, dst operand) {
	if len(m) == 0 {
		return
	}
	d := c.draft(g, OpGather)
	d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3] = 1, srcLen, 1, int64(len(m))
	d.k.Aux = m
	d.in[0], d.out = src, dst
	c.emit(d)
}

// lowerCumSum runs CumSum as one GEMM with a constant 0/1 matrix T over
// the axis (T[k][l] = 1 where output l sums input k): x seen as [outer, L]
// times T when the axis is the last one, else T^T times each [L, inner]
// slice. The sums are a GEMM's: deterministic, in the kernel's order.
func (c *compiler) lowerCumSum(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	axis, exclusive, reverse, err := cumSumArgs(c.evFor(n), xs)
	if err != nil {
		return err
	}
	L, inner, outer := xs[axis], numel(xs[axis+1:]), numel(xs[:axis])
	if L > maxCumSumAxis {
		return fmt.Errorf("a run-time CumSum over an axis of %d > %d values is not supported", L, maxCumSumAxis)
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if x.t.Len() == 0 {
		return nil
	}
	t := make([]float32, L*L)
	d := c.draft(g, OpGemm)
	var s gemmSpec
	if inner == 1 {
		// y[o, l] = sum_k x[o, k] T[k, l]
		for k := int64(0); k < L; k++ {
			for l := int64(0); l < L; l++ {
				if cumSumTakes(k, l, exclusive, reverse) {
					t[k*L+l] = 1
				}
			}
		}
		s = gemmSpec{M: outer, N: L, K: L, lda: L, ldb: L, ldc: L, alpha: 1}
		d.in[0], d.in[1] = src, c.newConst(t)
	} else {
		// y[o] = T^T x[o], x[o] and y[o] of shape [L, inner]
		for l := int64(0); l < L; l++ {
			for k := int64(0); k < L; k++ {
				if cumSumTakes(k, l, exclusive, reverse) {
					t[l*L+k] = 1
				}
			}
		}
		s = gemmSpec{M: L, N: inner, K: L, lda: L, ldb: inner, ldc: inner, alpha: 1}
		s.bd[0], s.sB[0], s.sC[0] = outer, L*inner, L*inner
		d.in[0], d.in[1] = c.newConst(t), src
	}
	s.set(&d.k)
	d.out = dst
	c.emit(d)
	return nil
}

// lowerWhere runs a Where whose condition is a constant (its values
// chosen run-time tensors; a constant condition on constants folded): X
// and Y, broadcast to the output's shape, are copied side by side into a
// scratch buffer and a GATHER picks each element from one of them.
func (c *compiler) lowerWhere(g *group) error {
	n := c.node(g)
	if len(n.Inputs) != 3 {
		return fmt.Errorf("%d inputs, want 3", len(n.Inputs))
	}
	cv, err := c.val(n.Inputs[0])
	if err != nil {
		return err
	}
	if cv.buf != -1 {
		return &UnsupportedError{Op: "Where", Node: n.Name, Why: "a run-time condition is not supported (a constant one is)"}
	}
	dst, ov, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	os := ov.t.Shape
	total := numel(os)
	if total == 0 {
		return nil
	}
	scratch := operand{sp: SpaceArena, buf: c.newBuf(2 * total)}
	for i, in := range n.Inputs[1:] {
		v, err := c.val(in)
		if err != nil {
			return err
		}
		src, err := c.operand(in)
		if err != nil {
			return err
		}
		half := scratch
		half.off = int64(i) * total
		if err := c.copyView(g, src, half, os, bstrides(v.t.Shape, os)); err != nil {
			return err
		}
	}
	sc := bstrides(cv.t.Shape, os)
	idx := make([]int64, len(os))
	m := make([]int64, total)
	for i := range m {
		unravel(int64(i), os, idx)
		m[i] = int64(i)
		if cv.t.at(dot(idx, sc)) == 0 {
			m[i] += total
		}
	}
	c.gatherMap(g, scratch, 2*total, m, dst)
	return nil
}

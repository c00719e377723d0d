package engine

import "sluice/libml/graph"

// opView is how a MatMul reads an operand that a Transpose would have
// copied: from the Transpose's input (src, row-major), element i of the
// operand's dimension d strides[d] elements apart.
type opView struct {
	src     string
	strides []int64
}

// matmulViews finds each Transpose whose output one batched MatMul alone
// reads (a transformer's attention: the heads split out of the Q, K and V
// projections, K transposed) where the GEMM can read the Transpose's
// input through strides: the operand's last dimension or the one before
// it one element apart (A or B as it lies, or transposed), its batch
// dimensions any distance apart. It records the view and drops the
// Transpose's group from last: the copy never runs. The GEMM computes
// each output's one chain of multiply-adds in k order whatever the
// strides, so the bits are those of the copy and the product.
func (c *compiler) matmulViews(last map[int]*group) {
	c.views = map[string]opView{}
	if c.m.opts.NoFusion {
		return
	}
	readers, outputs := c.nodeReaders(), c.graphOutputs()
	heads := map[int]bool{}
	for _, g := range last {
		heads[g.nodes[0]] = true
	}
	for gi, g := range last {
		n := c.rt[g.nodes[0]]
		if len(g.nodes) != 1 || n.Op != "Transpose" || len(n.Inputs) != 1 || len(n.Outputs) != 1 {
			continue
		}
		t := n.Outputs[0]
		rs := readers[t]
		if outputs[t] || len(rs) != 1 || !heads[rs[0]] {
			continue
		}
		mm := c.rt[rs[0]]
		if mm.Op != "MatMul" || len(mm.Inputs) != 2 || mm.Inputs[0] == mm.Inputs[1] {
			continue
		}
		src, tv := c.vals[n.Inputs[0]], c.vals[t]
		other := c.vals[mm.Inputs[0]]
		if mm.Inputs[0] == t {
			other = c.vals[mm.Inputs[1]]
		}
		if src == nil || tv == nil || other == nil || src.buf == -1 ||
			src.t.DType != graph.Float32 || tv.t.DType != graph.Float32 {
			continue
		}
		// the batched product only (both operands of rank 3 or more):
		// a rank-2 B folds A's batch into its rows, which a view's
		// strides do not allow
		xs, r := src.t.Shape, len(tv.t.Shape)
		if r < 3 || len(other.t.Shape) < 3 || len(xs) != r {
			continue
		}
		perm, err := transposePerm(n, r)
		if err != nil {
			continue
		}
		ss := stridesOf(xs)
		vst := make([]int64, r)
		for i, p := range perm {
			vst[i] = ss[p]
		}
		if vst[r-1] != 1 && vst[r-2] != 1 {
			continue
		}
		c.views[t] = opView{src: n.Inputs[0], strides: vst}
		delete(last, gi)
	}
}

// matmulOutViews finds each Transpose whose input only it reads and a
// batched MatMul writes (its group's output: no residual, whose layout
// would follow) where the MatMul can write the Transpose's output through
// strides: the Transpose keeps the product's last dimension last (one
// element apart), the other dimensions land any distance apart (the
// attention's heads merged back, [heads, tokens, d] into [tokens, heads,
// d]). It records, under the MatMul's output, the Transpose's output and
// where each of the product's dimensions lies in it, and drops the
// Transpose's group from last. The product's elements are the same; only
// where they are stored changes.
func (c *compiler) matmulOutViews(last map[int]*group) {
	c.outViews = map[string]opView{}
	if c.m.opts.NoFusion {
		return
	}
	readers, outputs := c.nodeReaders(), c.graphOutputs()
	producer := map[string]*group{}
	for _, g := range last {
		producer[c.outName(g)] = g
	}
	for gi, g := range last {
		n := c.rt[g.nodes[0]]
		if len(g.nodes) != 1 || n.Op != "Transpose" || len(n.Inputs) != 1 || len(n.Outputs) != 1 {
			continue
		}
		in, t := n.Inputs[0], n.Outputs[0]
		mg := producer[in]
		if mg == nil || outputs[in] || len(readers[in]) != 1 || mg.res != "" {
			continue
		}
		mm := c.rt[mg.nodes[0]]
		if mm.Op != "MatMul" || len(mm.Inputs) != 2 {
			continue
		}
		a, b, cv, tv := c.vals[mm.Inputs[0]], c.vals[mm.Inputs[1]], c.vals[in], c.vals[t]
		if a == nil || b == nil || cv == nil || tv == nil || cv.t.DType != graph.Float32 {
			continue
		}
		r := len(cv.t.Shape)
		if r < 3 || len(a.t.Shape) < 3 || len(b.t.Shape) < 3 || len(tv.t.Shape) != r {
			continue
		}
		perm, err := transposePerm(n, r)
		if err != nil || perm[r-1] != int64(r-1) {
			continue
		}
		ys := stridesOf(tv.t.Shape)
		cst := make([]int64, r)
		for i, p := range perm {
			cst[p] = ys[i]
		}
		c.outViews[in] = opView{src: t, strides: cst}
		delete(last, gi)
	}
}

// viewLayout returns a GEMM operand's transposition and leading dimension
// for view v (opView: the last or the one before it one element apart).
func (v opView) viewLayout() (trans, ld int64) {
	r := len(v.strides)
	if v.strides[r-1] == 1 {
		return 0, v.strides[r-2]
	}
	return 1, v.strides[r-1]
}

// batchStrides returns the strides (elements) of an operand of shape s
// (strides st, nil when it is row-major) along batch, the broadcast batch
// dimensions of a MatMul: 0 where the operand broadcasts.
func batchStrides(s, st, batch []int64) []int64 {
	if st == nil {
		st = stridesOf(s)
	}
	nb := len(s) - 2
	res := make([]int64, len(batch))
	off := len(batch) - nb
	for i := 0; i < nb; i++ {
		if s[i] != 1 {
			res[off+i] = st[i]
		}
	}
	return res
}

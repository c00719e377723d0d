package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Limits of the im2col workspace path for convolutions with few output
// positions (floats).
const im2colWorkspaceMax = 16 << 20

func (c *compiler) lower(g *group) error {
	n := c.node(g)
	if err := c.checkIntInputs(n); err != nil {
		return err
	}
	switch {
	case isQuantOp(n.Op):
		return c.lowerQuant(g)
	case isAliasOp(n.Op):
		return c.lowerAlias(g)
	case n.Op == "Conv":
		return c.lowerConv(g)
	case n.Op == "ConvTranspose":
		return c.lowerConvTranspose(g)
	case n.Op == "Gemm":
		return c.lowerGemm(g)
	case n.Op == "MatMul":
		return c.lowerMatMul(g)
	case n.Op == "BatchNormalization":
		return c.lowerBatchNorm(g)
	case n.Op == "Pow":
		if e := c.vals[n.Inputs[1]]; e != nil && e.buf == -1 && e.t.Len() == 1 {
			return c.lowerUnaryCode(g, ActPowC, float32(e.t.at(0)), 0)
		}
		return c.lowerBinary(g)
	case unaryActs[n.Op] != 0:
		act, a, b, err := actParams(n, c.m.opset, c.tensors(n))
		if err != nil {
			return err
		}
		return c.lowerUnaryCode(g, act, a, b)
	case n.Op == "Sum" || n.Op == "Mean" || ((n.Op == "Max" || n.Op == "Min") && len(n.Inputs) != 2):
		return c.lowerVariadic(g)
	case binaryOps[n.Op] != 0 || n.Op == "Add" || compareOps[n.Op] != 0 || n.Op == "Mod":
		return c.lowerBinary(g)
	case n.Op == opSelect:
		return c.lowerSelect(g)
	case n.Op == "Concat":
		return c.lowerConcat(g)
	case n.Op == "Transpose":
		return c.lowerTranspose(g)
	case n.Op == "Slice":
		return c.lowerSlice(g)
	case n.Op == "Split":
		return c.lowerSplit(g)
	case n.Op == "Expand":
		return c.lowerExpand(g)
	case n.Op == "Gather":
		return c.lowerGather(g)
	case n.Op == "DepthToSpace" || n.Op == "SpaceToDepth":
		return c.lowerSpaceDepth(g)
	case n.Op == "Tile":
		return c.lowerTile(g)
	case n.Op == "CumSum":
		return c.lowerCumSum(g)
	case n.Op == "DFT":
		return c.lowerDFT(g)
	case n.Op == "STFT":
		return c.lowerSTFT(g)
	case n.Op == "Where":
		return c.lowerWhere(g)
	case indexMapOps[n.Op]:
		return c.lowerIndexMap(g)
	case n.Op == "OneHot":
		return c.lowerOneHot(g)
	case n.Op == "Einsum":
		return c.lowerEinsum(g)
	case n.Op == "ArgMax" || n.Op == "ArgMin":
		return c.lowerArgMinMax(g)
	case n.Op == "GridSample":
		return c.lowerGridSample(g)
	case n.Op == "TopK":
		return c.lowerTopK(g)
	case n.Op == "CenterCropPad":
		return c.lowerCenterCropPad(g)
	case n.Op == "AffineGrid":
		return c.lowerAffineGrid(g)
	case n.Op == "RoiAlign":
		return c.lowerRoiAlign(g)
	case n.Op == "Det":
		return c.lowerDet(g)
	case n.Op == "MaxPool" || n.Op == "AveragePool":
		return c.lowerPool(g)
	case n.Op == "GlobalAveragePool" || n.Op == "GlobalMaxPool":
		return c.lowerGlobalPool(g)
	case n.Op == "Softmax" || n.Op == "LogSoftmax":
		return c.lowerSoftmax(g)
	case n.Op == "LayerNormalization":
		return c.lowerLayerNorm(g)
	case reduceOps[n.Op] != 0 || n.Op == "ReduceMean":
		return c.lowerReduce(g)
	case n.Op == "Resize" || n.Op == "Upsample":
		return c.lowerResize(g)
	case n.Op == "RNN" || n.Op == "GRU" || n.Op == "LSTM":
		return c.lowerRecurrent(g)
	}
	// unsupported, not wrong: ONNX Runtime can serve the model
	return &UnsupportedError{Op: n.Op, Node: n.Name,
		Why: "the engine evaluates it at load only, on constants; here an input is computed at run time"}
}

func (c *compiler) draft(g *group, op Op) draft {
	n := c.node(g)
	return draft{k: Kernel{Op: op, Name: n.Name, Ops: c.opsName(g)}}
}

func (c *compiler) setAct(d *draft, g *group) {
	d.k.P[PAct] = int64(g.act)
	d.k.F[FActA] = g.a
	d.k.F[FActB] = g.b
}

// rtIn returns a runtime input value (error for a constant one).
func (c *compiler) rtIn(n *graph.Node, i int) (*cval, error) {
	if i >= len(n.Inputs) {
		return nil, fmt.Errorf("input %d missing", i)
	}
	v, err := c.val(n.Inputs[i])
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (c *compiler) optOperand(n *graph.Node, i int) (operand, error) {
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return noOperand, nil
	}
	return c.operand(n.Inputs[i])
}

func (c *compiler) lowerAlias(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	out, err := c.val(n.Outputs[0])
	if err != nil {
		return err
	}
	out.buf = x.buf
	return nil
}

// ---- GEMM -----------------------------------------------------------------------

// transpose2D returns the cols x rows transpose of the rows x cols matrix x.
func transpose2D(x []float32, rows, cols int64) []float32 {
	t := make([]float32, len(x))
	for r := int64(0); r < rows; r++ {
		for c := int64(0); c < cols; c++ {
			t[c*rows+r] = x[r*cols+c]
		}
	}
	return t
}

type gemmSpec struct {
	M, N, K, tA, tB, lda, ldb, ldc int64
	bd, sA, sB, sC, sBias          [3]int64
	biasMode                       int64
	alpha                          float32
	// panels: B is a constant stored in panels (PGemmPanels); ldb is
	// then the distance between panels. apanels: A is, transposed
	// (PGemmAPanels; lda their distance); tprod: the product is computed
	// transposed (PGemmTProd)
	panels, apanels, tprod bool
}

func (s *gemmSpec) set(k *Kernel) {
	p := &k.P
	p[0], p[1], p[2], p[3], p[4] = s.M, s.N, s.K, s.tA, s.tB
	p[5], p[6], p[7] = s.lda, s.ldb, s.ldc
	for i := 0; i < 3; i++ {
		bd := s.bd[i]
		if bd == 0 {
			bd = 1
		}
		p[8+i] = bd
		p[11+i], p[14+i], p[17+i], p[20+i] = s.sA[i], s.sB[i], s.sC[i], s.sBias[i]
	}
	p[23] = s.biasMode
	if s.panels {
		p[PGemmPanels] = 1
	}
	if s.apanels {
		p[PGemmAPanels] = 1
	}
	if s.tprod {
		p[PGemmTProd] = 1
	}
	k.F[0] = s.alpha
}

func (c *compiler) lowerGemm(g *group) error {
	n := c.node(g)
	a, err := c.val(n.Inputs[0])
	if err != nil {
		return err
	}
	b, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	ta, tb := n.AttrInt("transA", 0) != 0, n.AttrInt("transB", 0) != 0
	alpha, beta := n.AttrFloat("alpha", 1), n.AttrFloat("beta", 1)
	M, K := a.t.Shape[0], a.t.Shape[1]
	if ta {
		M, K = K, M
	}
	N := b.t.Shape[1]
	if tb {
		N = b.t.Shape[0]
	}
	s := gemmSpec{M: M, N: N, K: K, lda: a.t.Shape[1], ldb: b.t.Shape[1], ldc: N, alpha: alpha}
	if ta {
		s.tA = 1
	}
	if tb {
		s.tB = 1
	}
	d := c.draft(g, OpGemm)
	if d.in[0], err = c.operand(n.Inputs[0]); err != nil {
		return err
	}
	if po, ok := c.panelOperand(n.Inputs[1], tb); ok && b.buf == -1 {
		d.in[1] = po
		s.tB, s.ldb, s.panels = 0, K*GemmPanel, true
	} else if tb && b.buf == -1 && b.t.IsFloat() {
		// constant weights stored N x K (a fully connected layer) are
		// transposed once here, so the kernel reads K x N rows instead of
		// transposing them on every call
		d.in[1] = c.newConst(transpose2D(b.t.F, N, K))
		s.tB, s.ldb = 0, N
	} else if d.in[1], err = c.operand(n.Inputs[1]); err != nil {
		return err
	}
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		cv, err := c.val(n.Inputs[2])
		if err != nil {
			return err
		}
		cs := cv.t.Shape
		switch {
		case cv.buf == -1:
			data := make([]float32, cv.t.Len())
			for i, v := range cv.t.F {
				data[i] = v * beta
			}
			switch {
			case cv.t.Len() == 1:
				full := make([]float32, N)
				for i := range full {
					full[i] = data[0]
				}
				d.in[2], s.biasMode = c.newConst(full), 2
			case cv.t.Len() == N && (len(cs) == 1 || cs[0] == 1):
				d.in[2], s.biasMode = c.newConst(data), 2
			case len(cs) == 2 && cs[1] == 1 && cs[0] == M:
				d.in[2], s.biasMode = c.newConst(data), 1
			case len(cs) == 2 && cs[0] == M && cs[1] == N:
				d.in[3] = c.newConst(data)
			default:
				return fmt.Errorf("C %v does not broadcast to [%d %d]", cs, M, N)
			}
		case beta == 1 && eqShape(cs, []int64{M, N}):
			d.in[3], _ = c.operand(n.Inputs[2])
		case beta == 1 && cv.t.Len() == N && (len(cs) == 1 || cs[0] == 1):
			d.in[2], _ = c.operand(n.Inputs[2])
			s.biasMode = 2
		default:
			return fmt.Errorf("runtime C %v with beta %g is not supported", cs, beta)
		}
	}
	if g.res != "" {
		if d.in[3], err = c.operand(g.res); err != nil {
			return err
		}
	}
	s.set(&d.k)
	c.setAct(&d, g)
	if d.out, _, err = c.output(c.outName(g)); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// collapse merges adjacent dimensions that are contiguous in every stride
// set and drops size-1 dimensions.
func collapse(dims []int64, strides ...[]int64) ([]int64, [][]int64) {
	var od []int64
	os := make([][]int64, len(strides))
	for i, d := range dims {
		if d == 1 {
			continue
		}
		if len(od) > 0 {
			last := len(od) - 1
			merge := true
			for k, s := range strides {
				if os[k][last] != s[i]*d {
					merge = false
				}
			}
			if merge {
				od[last] *= d
				for k, s := range strides {
					os[k][last] = s[i]
				}
				continue
			}
		}
		od = append(od, d)
		for k, s := range strides {
			os[k] = append(os[k], s[i])
		}
	}
	if len(od) == 0 {
		od = []int64{1}
		for k := range os {
			os[k] = []int64{1}
		}
	}
	return od, os
}

// matmulOperands reads a MatMul's operands ai and bi and their shapes,
// a 1-D A as one row and a 1-D B as one column.
func (c *compiler) matmulOperands(n *graph.Node, ai, bi int) (a, b *cval, as, bs []int64, err error) {
	if a, err = c.val(n.Inputs[ai]); err != nil {
		return
	}
	if b, err = c.val(n.Inputs[bi]); err != nil {
		return
	}
	as, bs = a.t.Shape, b.t.Shape
	if len(as) == 1 {
		as = []int64{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int64{bs[0], 1}
	}
	return
}

// matmulBatch is the batch of a MatMul of A (as) and B (bs), both of
// rank 2 or more: its dimensions, collapsed where contiguous, and the
// strides of A, B and the result along them (elements), at most max of
// them. A and B are row-major.
func matmulBatch(as, bs []int64, max int) ([]int64, [][]int64, error) {
	return matmulBatchStrided(as, bs, nil, nil, nil, max)
}

// matmulBatchStrided is matmulBatch for operands whose dimensions lie
// ast and bst elements apart, and a result whose batch dimensions lie
// cst apart (nil: row-major; opView).
func matmulBatchStrided(as, bs, ast, bst, cst []int64, max int) ([]int64, [][]int64, error) {
	M, N := as[len(as)-2], bs[len(bs)-1]
	batch, err := broadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, nil, err
	}
	sa, sb := batchStrides(as, ast, batch), batchStrides(bs, bst, batch)
	sc := stridesOf(batch)
	for i := range batch {
		sc[i] *= M * N
	}
	if cst != nil {
		copy(sc, cst[:len(batch)])
	}
	dims, st := collapse(batch, sa, sb, sc)
	if len(dims) > max {
		return nil, nil, fmt.Errorf("batch dimensions %v do not collapse to %d", batch, max)
	}
	return dims, st, nil
}

func (c *compiler) lowerMatMul(g *group) error {
	n := c.node(g)
	_, _, as, bs, err := c.matmulOperands(n, 0, 1)
	if err != nil {
		return err
	}
	M, K, N := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	s := gemmSpec{N: N, K: K, lda: K, ldb: N, ldc: N, alpha: 1}
	if g.scaled {
		s.alpha = g.scale
	}
	// an operand read through a Transpose's view (matmulViews): from the
	// Transpose's input, transposed or not, with its strides
	va, viewA := c.views[n.Inputs[0]]
	vb, viewB := c.views[n.Inputs[1]]
	ain, bin := n.Inputs[0], n.Inputs[1]
	var ast, bst []int64
	if viewA {
		ain, ast = va.src, va.strides
		s.tA, s.lda = va.viewLayout()
	}
	if viewB {
		bin, bst = vb.src, vb.strides
		s.tB, s.ldb = vb.viewLayout()
	}
	// the result written through a Transpose's view (matmulOutViews):
	// into the Transpose's output, rows ldc apart
	out := c.outName(g)
	var cst []int64
	if vc, ok := c.outViews[out]; ok {
		out, cst = vc.src, vc.strides
		s.ldc = cst[len(cst)-2]
	}
	if len(bs) == 2 {
		// B is one matrix: every row of A's batch is one GEMM row
		s.M = numel(as[:len(as)-1])
	} else {
		s.M = M
		dims, st, err := matmulBatchStrided(as, bs, ast, bst, cst, 3)
		if err != nil {
			return err
		}
		for i := range dims {
			s.bd[i] = dims[i]
			s.sA[i], s.sB[i], s.sC[i] = st[0][i], st[1][i], st[2][i]
		}
	}
	d := c.draft(g, OpGemm)
	if d.in[0], err = c.operand(ain); err != nil {
		return err
	}
	if po, ok := c.panelOperand(bin, false); ok && len(bs) == 2 && !viewB {
		d.in[1] = po
		s.ldb, s.panels = K*GemmPanel, true
	} else if d.in[1], err = c.operand(bin); err != nil {
		return err
	}
	if g.bias != "" {
		if d.in[2], err = c.operand(g.bias); err != nil {
			return err
		}
		s.biasMode = 2
	}
	if g.res != "" {
		if d.in[3], err = c.operand(g.res); err != nil {
			return err
		}
	}
	s.set(&d.k)
	c.setAct(&d, g)
	if d.out, _, err = c.output(out); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// ---- convolution ----------------------------------------------------------------

// convP lays out the 16 convolution parameters (1-D becomes H = 1).
func convP(xs []int64, cout, grp int64, gm geom) [16]int64 {
	var p [16]int64
	p[0], p[1], p[4], p[5] = xs[0], xs[1], cout, grp
	if len(gm.out) == 2 {
		p[2], p[3], p[6], p[7] = xs[2], xs[3], gm.k[0], gm.k[1]
		p[8], p[9], p[10], p[11] = gm.s[0], gm.s[1], gm.pb[0], gm.pb[1]
		p[12], p[13], p[14], p[15] = gm.d[0], gm.d[1], gm.out[0], gm.out[1]
	} else {
		p[2], p[3], p[6], p[7] = 1, xs[2], 1, gm.k[0]
		p[8], p[9], p[10], p[11] = 1, gm.s[0], 0, gm.pb[0]
		p[12], p[13], p[14], p[15] = 1, gm.d[0], 1, gm.out[0]
	}
	return p
}

// winogradMinTiles is the fewest 2x2 output tiles per image a convolution
// needs to run as Winograd. Each of Winograd's 16 GEMMs has one column
// per tile, and its transformed weights are 16/9 the direct ones: with
// few tiles the GEMMs stream weights for little work and run narrow
// (measured on an AVX-512 Xeon, 2 units: ResNet-18 at batch 1 is 1.45x
// faster with its 7x7 layers direct, ResNet-50 1.17x; batch 8 0.92x and
// 0.98x). The rule looks at one image, never at the batch size, so a
// request's output does not depend on the batch it runs in.
const winogradMinTiles = 32

// winogradOK reports whether a convolution runs as Winograd F(2x2, 3x3):
// ungrouped 3x3, stride 1, dilation 1, enough channels and output tiles to
// pay for the transforms.
func winogradOK(p [16]int64) bool {
	return p[5] == 1 && p[6] == 3 && p[7] == 3 && p[8] == 1 && p[9] == 1 &&
		p[12] == 1 && p[13] == 1 && p[1] >= 16 && p[4] >= 16 &&
		p[14] >= 4 && p[15] >= 4 && ((p[14]+1)/2)*((p[15]+1)/2) >= winogradMinTiles &&
		16*(p[1]+p[4])*((p[15]+1)/2) <= 4<<20 // a tile row's scratch
}

// winogradWeights transforms 3x3 weights w [Cout][C][3][3] into
// U = G g G^T, each of its 16 points' C x Cout matrix (U^T: a Winograd
// block's products are tiles x C times C x Cout) in panels of 32 output
// channels, zero past Cout: [16][ceil(Cout/GemmPanel)][C][GemmPanel]
// (the layout of panels.go, which sk_gemm_panels reads).
func winogradWeights(w []float32, cout, cin int64) []float32 {
	const panel = GemmPanel
	np := (cout + panel - 1) / panel
	u := make([]float32, 16*np*panel*cin)
	for o := int64(0); o < cout; o++ {
		for i := int64(0); i < cin; i++ {
			g := w[(o*cin+i)*9 : (o*cin+i)*9+9]
			// t = G g (4x3), G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
			var t [4][3]float64
			for j := 0; j < 3; j++ {
				g0, g1, g2 := float64(g[j]), float64(g[3+j]), float64(g[6+j])
				t[0][j] = g0
				t[1][j] = 0.5 * (g0 + g1 + g2)
				t[2][j] = 0.5 * (g0 - g1 + g2)
				t[3][j] = g2
			}
			for a := 0; a < 4; a++ {
				r := [4]float64{t[a][0], 0.5 * (t[a][0] + t[a][1] + t[a][2]),
					0.5 * (t[a][0] - t[a][1] + t[a][2]), t[a][2]}
				for b := 0; b < 4; b++ {
					u[((int64(a*4+b)*np+o/panel)*cin+i)*panel+o%panel] = float32(r[b])
				}
			}
		}
	}
	return u
}

// depthwise reports whether a convolution of G groups of Cg input
// channels each is depthwise (one input channel a group).
func depthwise(G, Cg int64) bool { return G > 1 && Cg == 1 }

// convDims are a convolution's sizes, from its parameters (convP).
type convDims struct {
	N, C, H, W, G, Cout int64
	OHW, Cg, Mg, Kd     int64 // output positions, channels per group, reduction
}

func dimsOf(p [16]int64) convDims {
	d := convDims{N: p[0], C: p[1], H: p[2], W: p[3], G: p[5], Cout: p[4], OHW: p[14] * p[15]}
	d.Cg, d.Mg = d.C/d.G, d.Cout/d.G
	d.Kd = d.Cg * p[6] * p[7]
	return d
}

// convInputs are a convolution's run-time input xi and its weights wi,
// which must be constants.
func (c *compiler) convInputs(n *graph.Node, xi, wi int) (x, w *cval, err error) {
	if x, err = c.rtIn(n, xi); err != nil {
		return
	}
	if w, err = c.val(n.Inputs[wi]); err != nil {
		return
	}
	if w.buf != -1 {
		err = fmt.Errorf("runtime convolution weights are not supported")
	}
	return
}

// convOperands reads a 1-D or 2-D convolution's run-time input xi and
// constant weights wi (convInputs) and lays out its 16 parameters (convP).
func (c *compiler) convOperands(n *graph.Node, xi, wi int) (x, w *cval, p [16]int64, err error) {
	if x, w, err = c.convInputs(n, xi, wi); err != nil {
		return
	}
	xs := x.t.Shape
	if len(xs) != 3 && len(xs) != 4 {
		err = fmt.Errorf("only 1-D and 2-D convolutions (X %v)", xs)
		return
	}
	gm, err := convGeom(n, xs[2:], w.t.Shape[2:], false)
	if err != nil {
		return
	}
	p = convP(xs, w.t.Shape[0], n.AttrInt("group", 1), gm)
	return
}

func (c *compiler) lowerConv(g *group) error {
	n := c.node(g)
	if x, err := c.rtIn(n, 0); err == nil && len(x.t.Shape) == 5 {
		return c.lowerConv3D(g)
	}
	_, w, p, err := c.convOperands(n, 0, 1)
	if err != nil {
		return err
	}
	// the weights stored transposed in panels (addPanelWeights), or as
	// they are
	wop, wpanels := c.panelOperand(n.Inputs[1], true)
	if !wpanels || p[5] != 1 {
		if wop, err = c.operand(n.Inputs[1]); err != nil {
			return err
		}
		wpanels = false
	}
	bias, res, err := c.convBiasRes(g)
	if err != nil {
		return err
	}
	xop, _ := c.operand(n.Inputs[0])
	out, _, err := c.output(c.outName(g))
	if err != nil {
		return err
	}
	return c.emitConv(g, p, xop, wop, wpanels, n.Inputs[1], w.t.F, bias, res, out)
}

// convBiasRes are a convolution group's bias (its third input, or a bias
// Add fused into it) and residual (a fused Add), or noOperand.
func (c *compiler) convBiasRes(g *group) (bias, res operand, err error) {
	n := c.node(g)
	if bias, err = c.optOperand(n, 2); err != nil {
		return
	}
	if g.bias != "" {
		if bias, err = c.operand(g.bias); err != nil {
			return
		}
	}
	res = noOperand
	if g.res != "" {
		res, err = c.operand(g.res)
	}
	return
}

// emitConv emits the 2-D convolution p (convP's parameters) of xop by the
// weights wop (wvals their values, wname their initializer: Winograd's
// transformed copy may already be in the weights; wpanels: wop is them
// stored transposed in panels, an ungrouped convolution's only) with bias,
// residual and the group's activation, into out: depthwise, pointwise as
// one GEMM, Winograd, im2col and a GEMM, or the direct kernel.
func (c *compiler) emitConv(g *group, p [16]int64, xop, wop operand, wpanels bool, wname string, wvals []float32,
	bias, res, out operand) error {
	dm := dimsOf(p)
	N, C, H, W, G, Cout := dm.N, dm.C, dm.H, dm.W, dm.G, dm.Cout
	OHW, Cg, Mg, Kd := dm.OHW, dm.Cg, dm.Mg, dm.Kd
	units := int64(c.m.opts.Units)
	pointwise := p[6] == 1 && p[7] == 1 && p[8] == 1 && p[9] == 1 && p[10] == 0 && p[11] == 0 &&
		OHW == H*W
	switch {
	case depthwise(G, Cg):
		d := c.draft(g, OpDWConv)
		copy(d.k.P[:16], p[:])
		d.in = [MaxIn]operand{xop, wop, bias, res}
		c.setAct(&d, g)
		d.out = out
		c.emit(d)
	case pointwise:
		d := c.draft(g, OpGemm)
		s := gemmSpec{M: Mg, N: OHW, K: Cg, lda: Cg, ldb: OHW, ldc: OHW, alpha: 1,
			bd: [3]int64{N, G, 1}, sA: [3]int64{0, Mg * Cg}, sB: [3]int64{C * OHW, Cg * OHW},
			sC: [3]int64{Cout * OHW, Mg * OHW}, sBias: [3]int64{0, Mg}}
		if bias.sp != SpaceNone {
			s.biasMode = 1
		}
		s.weightPanels(wpanels)
		s.set(&d.k)
		d.in = [MaxIn]operand{wop, xop, bias, res}
		c.setAct(&d, g)
		d.out = out
		c.emit(d)
	case !c.m.opts.NoWinograd && winogradOK(p) && (wvals != nil || c.hasWeights(wname+winogradSuffix)):
		// 3x3 stride 1: Winograd F(2x2, 3x3) (P[16] = 1) on weights
		// transformed here
		d := c.draft(g, OpConv)
		copy(d.k.P[:16], p[:])
		d.k.P[16] = 1
		// The transformed weights live once in the model's arena
		// (addWinogradWeights); a program copy is the fallback.
		wt := noOperand
		if off, ok := c.m.wOff[wname+winogradSuffix]; ok && wname != "" {
			wt = operand{sp: SpaceWeights, off: off}
		} else {
			wt = c.newConst(winogradWeights(wvals, Cout, C))
		}
		d.in = [MaxIn]operand{xop, wt, bias, res}
		c.setAct(&d, g)
		d.out = out
		c.emit(d)
	case (OHW < 256 || N*G*((OHW+63)/64) < 4*units) && N*G*Kd*OHW <= im2colWorkspaceMax:
		// few output positions per image: one im2col feeds a GEMM tiled
		// over output channels (tiling the positions would leave the
		// blocks tiny or repeat the im2col per channel tile)
		ws := c.newBuf(N * G * Kd * OHW)
		d := c.draft(g, OpIm2col)
		d.k.Ops = "im2col"
		copy(d.k.P[:16], p[:])
		d.in[0] = xop
		d.out = operand{sp: SpaceArena, buf: ws}
		c.emit(d)
		d2 := c.draft(g, OpGemm)
		s := gemmSpec{M: Mg, N: OHW, K: Kd, lda: Kd, ldb: OHW, ldc: OHW, alpha: 1,
			bd: [3]int64{N, G, 1}, sA: [3]int64{0, Mg * Kd}, sB: [3]int64{G * Kd * OHW, Kd * OHW},
			sC: [3]int64{Cout * OHW, Mg * OHW}, sBias: [3]int64{0, Mg}}
		if bias.sp != SpaceNone {
			s.biasMode = 1
		}
		s.weightPanels(wpanels)
		s.set(&d2.k)
		d2.in = [MaxIn]operand{wop, {sp: SpaceArena, buf: ws}, bias, res}
		c.setAct(&d2, g)
		d2.out = out
		c.emit(d2)
	default:
		d := c.draft(g, OpConv)
		copy(d.k.P[:16], p[:])
		if wpanels {
			d.k.P[PConvWPanels] = 1
		}
		d.in = [MaxIn]operand{xop, wop, bias, res}
		c.setAct(&d, g)
		d.out = out
		c.emit(d)
	}
	return nil
}

// hasWeights reports whether the weight arena holds the constant name.
func (c *compiler) hasWeights(name string) bool {
	_, ok := c.m.wOff[name]
	return ok
}

func (c *compiler) lowerConvTranspose(g *group) error {
	n := c.node(g)
	x, w, err := c.convInputs(n, 0, 1)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	if len(xs) == 5 {
		return c.lowerConvTranspose3D(g)
	}
	if len(xs) != 3 && len(xs) != 4 {
		return fmt.Errorf("only 1-D and 2-D transposed convolutions (X %v)", xs)
	}
	G := n.AttrInt("group", 1)
	gm, _, err := convTGeom(n, xs[2:], w.t.Shape[2:])
	if err != nil {
		return err
	}
	Mg := w.t.Shape[1]
	Cout := Mg * G
	p := convP(xs, Cout, G, gm)
	N, C := xs[0], xs[1]
	HW := p[2] * p[3]
	Cg := C / G
	Mk := Mg * p[6] * p[7]
	wop, _ := c.operand(n.Inputs[1])
	xop, _ := c.operand(n.Inputs[0])
	bias, err := c.optOperand(n, 2)
	if err != nil {
		return err
	}
	ws := c.newBuf(N * G * Mk * HW)
	d := c.draft(g, OpGemm)
	d.k.Ops = "ConvTranspose:gemm"
	s := gemmSpec{M: Mk, N: HW, K: Cg, tA: 1, lda: Mk, ldb: HW, ldc: HW, alpha: 1,
		bd: [3]int64{N, G, 1}, sA: [3]int64{0, Cg * Mk}, sB: [3]int64{C * HW, Cg * HW},
		sC: [3]int64{G * Mk * HW, Mk * HW}}
	s.set(&d.k)
	d.in[0], d.in[1] = wop, xop
	d.out = operand{sp: SpaceArena, buf: ws}
	c.emit(d)
	d2 := c.draft(g, OpCol2im)
	copy(d2.k.P[:16], p[:])
	d2.in[0] = operand{sp: SpaceArena, buf: ws}
	d2.in[1] = bias
	c.setAct(&d2, g)
	if d2.out, _, err = c.output(c.outName(g)); err != nil {
		return err
	}
	c.emit(d2)
	return nil
}

// ---- normalization ----------------------------------------------------------------

func (c *compiler) lowerBatchNorm(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	if len(x.t.Shape) < 2 {
		return fmt.Errorf("X %v: rank < 2", x.t.Shape)
	}
	C := x.t.Shape[1]
	var p [4]*Tensor
	for i := range p {
		v, err := c.val(n.Inputs[i+1])
		if err != nil {
			return err
		}
		if v.buf != -1 {
			return fmt.Errorf("runtime BatchNormalization parameters are not supported")
		}
		p[i] = v.t
	}
	eps := float64(n.AttrFloat("epsilon", 1e-5))
	scale, shift := make([]float32, C), make([]float32, C)
	for i := int64(0); i < C; i++ {
		s := p[0].at(i) / math.Sqrt(p[3].at(i)+eps)
		scale[i] = float32(s)
		shift[i] = float32(p[1].at(i) - p[2].at(i)*s)
	}
	d := c.draft(g, OpChAffine)
	d.k.P[0], d.k.P[1], d.k.P[2] = x.t.Shape[0], C, numel(x.t.Shape[2:])
	d.in[0], _ = c.operand(n.Inputs[0])
	d.in[1], d.in[2] = c.newConst(scale), c.newConst(shift)
	c.setAct(&d, g)
	if err := c.outMaybeInPlace(&d, g, n.Inputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// outMaybeInPlace gives the group's output the buffer of value in when the
// group is its last reader, marking the kernel in-place; else a new buffer.
func (c *compiler) outMaybeInPlace(d *draft, g *group, in string) error {
	on := c.outName(g)
	ov, err := c.val(on)
	if err != nil {
		return err
	}
	if c.inPlace(in, ov.t.Shape) {
		ov.buf = c.vals[in].buf
		d.out = operand{sp: SpaceArena, buf: ov.buf}
		d.k.Flags |= FlagInPlace
		return nil
	}
	d.out, _, err = c.output(on)
	return err
}

func (c *compiler) lowerLayerNorm(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	axis, err := normAxis(n.AttrInt("axis", -1), int64(len(x.t.Shape)))
	if err != nil {
		return err
	}
	norm := x.t.Shape[axis:]
	cols := numel(norm)
	d := c.draft(g, OpLayerNorm)
	d.k.P[0], d.k.P[1] = x.t.Len()/cols, cols
	d.k.F[0] = n.AttrFloat("epsilon", 1e-5)
	d.in[0], _ = c.operand(n.Inputs[0])
	for i := 1; i <= 2; i++ {
		if i >= len(n.Inputs) || n.Inputs[i] == "" {
			continue
		}
		v, err := c.val(n.Inputs[i])
		if err != nil {
			return err
		}
		switch {
		case v.t.Len() == cols:
			d.in[i], _ = c.operand(n.Inputs[i])
		case v.buf == -1:
			e := copyStrided(v.t, norm, bstrides(v.t.Shape, norm), 0)
			d.in[i] = c.newConst(e.F)
		default:
			return fmt.Errorf("runtime scale / bias %v does not cover %v", v.t.Shape, norm)
		}
	}
	if err := c.outMaybeInPlace(&d, g, n.Inputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

func (c *compiler) lowerSoftmax(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	def := int64(-1)
	if c.m.opset < 13 {
		def = 1
	}
	axis, err := normAxis(n.AttrInt("axis", def), int64(len(x.t.Shape)))
	if err != nil {
		return err
	}
	outer, cnt, inner := softmaxDims(x.t.Shape, axis, c.m.opset)
	d := c.draft(g, OpSoftmax)
	d.k.P[0], d.k.P[1], d.k.P[2] = outer, cnt, inner
	if n.Op == "LogSoftmax" {
		d.k.P[3] = 1
	}
	d.in[0], _ = c.operand(n.Inputs[0])
	if err := c.outMaybeInPlace(&d, g, n.Inputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// ---- elementwise ---------------------------------------------------------------------

func (c *compiler) lowerUnaryCode(g *group, act int, a, b float32) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	d := c.draft(g, OpUnary)
	d.k.P[0] = max(x.t.Len(), 1)
	d.k.P[PAct] = int64(act)
	d.k.F[FActA], d.k.F[FActB] = a, b
	d.in[0], _ = c.operand(n.Inputs[0])
	if err := c.outMaybeInPlace(&d, g, n.Inputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

func (c *compiler) lowerBinary(g *group) error {
	n := c.node(g)
	if len(n.Inputs) != 2 {
		return fmt.Errorf("%d inputs: only 2 are supported", len(n.Inputs))
	}
	a, err := c.val(n.Inputs[0])
	if err != nil {
		return err
	}
	b, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	out, err := c.val(n.Outputs[0])
	if err != nil {
		return err
	}
	os := out.t.Shape
	dims, st := collapse(os, bstrides(a.t.Shape, os), bstrides(b.t.Shape, os))
	if len(dims) > MaxRank {
		return fmt.Errorf("broadcast of %v and %v needs rank %d > %d", a.t.Shape, b.t.Shape, len(dims), MaxRank)
	}
	d := c.draft(g, OpBinary)
	d.k.P[0] = int64(binaryOps[n.Op])
	if op, ok := compareOps[n.Op]; ok {
		d.k.P[0] = int64(op)
	}
	if n.Op == "Mod" {
		d.k.P[0] = BinMod // refMod refused a float Mod without fmod = 1
	}
	d.k.P[1] = int64(len(dims))
	for i := range dims {
		d.k.P[2+i], d.k.P[8+i], d.k.P[14+i] = dims[i], st[0][i], st[1][i]
	}
	if d.in[0], err = c.operand(n.Inputs[0]); err != nil {
		return err
	}
	if d.in[1], err = c.operand(n.Inputs[1]); err != nil {
		return err
	}
	c.setAct(&d, g)
	on := c.outName(g)
	switch {
	case n.Inputs[0] != n.Inputs[1] && a.buf >= 0 && c.inPlace(n.Inputs[0], os):
		err = c.outMaybeInPlace(&d, g, n.Inputs[0])
	case n.Inputs[0] != n.Inputs[1] && b.buf >= 0 && c.inPlace(n.Inputs[1], os):
		err = c.outMaybeInPlace(&d, g, n.Inputs[1])
	default:
		d.out, _, err = c.output(on)
	}
	if err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// binaryKernel emits out = op(a, b) with broadcasting.
func (c *compiler) binaryKernel(g *group, op int, a operand, as []int64, b operand, bs []int64, out operand, os []int64) error {
	return c.binaryKernelAct(g, op, a, as, b, bs, out, os, ActNone, 0, 0)
}

// binaryKernelAct is binaryKernel with activation act (parameters fa, fb)
// applied to each result.
func (c *compiler) binaryKernelAct(g *group, op int, a operand, as []int64, b operand, bs []int64, out operand, os []int64,
	act int, fa, fb float32) error {
	dims, st := collapse(os, bstrides(as, os), bstrides(bs, os))
	if len(dims) > MaxRank {
		return fmt.Errorf("broadcast of %v and %v needs rank %d > %d", as, bs, len(dims), MaxRank)
	}
	d := c.draft(g, OpBinary)
	d.k.P[0] = int64(op)
	d.k.P[1] = int64(len(dims))
	for i := range dims {
		d.k.P[2+i], d.k.P[8+i], d.k.P[14+i] = dims[i], st[0][i], st[1][i]
	}
	d.in[0], d.in[1], d.out = a, b, out
	d.k.P[PAct], d.k.F[FActA], d.k.F[FActB] = int64(act), fa, fb
	c.emit(d)
	return nil
}

// copyValue copies value in into a new buffer for value out.
func (c *compiler) copyValue(g *group, in, out string) error {
	src, err := c.operand(in)
	if err != nil {
		return err
	}
	dst, ov, err := c.output(out)
	if err != nil {
		return err
	}
	n := max(ov.t.Len(), 1)
	return c.copyKernel(g, "", src, 0, dst, 0, []int64{n}, []int64{1}, []int64{1})
}

// lowerVariadic lowers Max, Min, Sum and Mean over any number of inputs as
// a chain of binary kernels.
func (c *compiler) lowerVariadic(g *group) error {
	n := c.node(g)
	op := BinAdd
	switch n.Op {
	case "Max":
		op = BinMax
	case "Min":
		op = BinMin
	}
	first, err := c.val(n.Inputs[0])
	if err != nil {
		return err
	}
	if len(n.Inputs) == 1 {
		return c.copyValue(g, n.Inputs[0], n.Outputs[0])
	}
	acc, err := c.operand(n.Inputs[0])
	if err != nil {
		return err
	}
	accShape := first.t.Shape
	for i := 1; i < len(n.Inputs); i++ {
		v, err := c.val(n.Inputs[i])
		if err != nil {
			return err
		}
		b, err := c.operand(n.Inputs[i])
		if err != nil {
			return err
		}
		os, err := broadcastShape(accShape, v.t.Shape)
		if err != nil {
			return err
		}
		var dst operand
		if i == len(n.Inputs)-1 && n.Op != "Mean" {
			if dst, _, err = c.output(n.Outputs[0]); err != nil {
				return err
			}
		} else {
			dst = operand{sp: SpaceArena, buf: c.newBuf(numel(os))}
		}
		if err := c.binaryKernel(g, op, acc, accShape, b, v.t.Shape, dst, os); err != nil {
			return err
		}
		acc, accShape = dst, os
	}
	if n.Op == "Mean" {
		dst, _, err := c.output(n.Outputs[0])
		if err != nil {
			return err
		}
		k := c.newConst([]float32{float32(len(n.Inputs))})
		return c.binaryKernel(g, BinDiv, acc, accShape, k, []int64{}, dst, accShape)
	}
	return nil
}

// ---- data movement -------------------------------------------------------------------

// copyKernel emits a COPY of the view (dims, sin) at src+soff into the view
// (dims, sout) at dst+doff.
func (c *compiler) copyKernel(g *group, ops string, src operand, soff int64, dst operand, doff int64,
	dims, sin, sout []int64) error {
	d, err := c.copyDraft(g, ops, src, soff, dst, doff, dims, sin, sout)
	if err != nil {
		return err
	}
	c.emit(d)
	return nil
}

// copyDraft is copyKernel's COPY, not yet emitted.
func (c *compiler) copyDraft(g *group, ops string, src operand, soff int64, dst operand, doff int64,
	dims, sin, sout []int64) (draft, error) {
	cd, st := collapse(dims, sin, sout)
	if len(cd) > MaxRank {
		return draft{}, fmt.Errorf("copy of rank %d > %d", len(cd), MaxRank)
	}
	d := c.draft(g, OpCopy)
	if ops != "" {
		d.k.Ops = ops
	}
	d.k.P[0] = int64(len(cd))
	for i := range cd {
		d.k.P[1+i], d.k.P[7+i], d.k.P[13+i] = cd[i], st[0][i], st[1][i]
	}
	src.off += soff
	dst.off += doff
	d.in[0] = src
	d.out = dst
	return d, nil
}

func (c *compiler) lowerConcat(g *group) error {
	n := c.node(g)
	on := n.Outputs[0]
	dst, ov, err := c.output(on)
	if err != nil {
		return err
	}
	os := ov.t.Shape
	axis, err := normAxis(n.AttrInt("axis", 0), int64(len(os)))
	if err != nil {
		return err
	}
	outer, inner := numel(os[:axis]), numel(os[axis+1:])
	var at int64
	for _, in := range n.Inputs {
		v, err := c.val(in)
		if err != nil {
			return err
		}
		di := v.t.Shape[axis]
		if di > 0 {
			src, err := c.operand(in)
			if err != nil {
				return err
			}
			if err := c.copyKernel(g, "", src, 0, dst, at*inner, []int64{outer, di * inner},
				[]int64{di * inner, 1}, []int64{os[axis] * inner, 1}); err != nil {
				return err
			}
		}
		at += di
	}
	return nil
}

func (c *compiler) lowerTranspose(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	perm, err := transposePerm(n, len(x.t.Shape))
	if err != nil {
		return err
	}
	st := stridesOf(x.t.Shape)
	dims := make([]int64, len(perm))
	sin := make([]int64, len(perm))
	for i, p := range perm {
		dims[i], sin[i] = x.t.Shape[p], st[p]
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	return c.copyKernel(g, "", src, 0, dst, 0, dims, sin, stridesOf(dims))
}

func (c *compiler) evFor(n *graph.Node) *ev {
	return &ev{n: n, opset: c.m.opset, ins: c.tensors(n)}
}

func (c *compiler) lowerSlice(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	starts, ends, axes, steps, err := c.evFor(n).sliceArgs()
	if err != nil {
		return err
	}
	shape, strides, off, err := sliceView(x.t.Shape, starts, ends, axes, steps)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if numel(shape) == 0 {
		return nil
	}
	return c.copyKernel(g, "", src, off, dst, 0, shape, strides, stridesOf(shape))
}

func (c *compiler) lowerSplit(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	e := c.evFor(n)
	axis, err := normAxis(n.AttrInt("axis", 0), int64(len(x.t.Shape)))
	if err != nil {
		return err
	}
	sizes, err := e.splitSizes(x.t.Shape[axis])
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	var start int64
	for i, sz := range sizes {
		shape, strides, off, err := sliceView(x.t.Shape, []int64{start}, []int64{start + sz}, []int64{axis}, nil)
		if err != nil {
			return err
		}
		start += sz
		if n.Outputs[i] == "" {
			continue
		}
		dst, _, err := c.output(n.Outputs[i])
		if err != nil {
			return err
		}
		if numel(shape) == 0 {
			continue
		}
		if err := c.copyKernel(g, "", src, off, dst, 0, shape, strides, stridesOf(shape)); err != nil {
			return err
		}
	}
	return nil
}

func (c *compiler) lowerExpand(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	dst, ov, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	os := ov.t.Shape
	return c.copyKernel(g, "", src, 0, dst, 0, os, bstrides(x.t.Shape, os), stridesOf(os))
}

func (c *compiler) lowerGather(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	iv, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	if iv.buf != -1 {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: "indices computed at run time are not supported (constant ones are)"}
	}
	axis, err := normAxis(n.AttrInt("axis", 0), int64(len(x.t.Shape)))
	if err != nil {
		return err
	}
	d := c.draft(g, OpGather)
	xs := x.t.Shape
	d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3] = numel(xs[:axis]), xs[axis], numel(xs[axis+1:]), iv.t.Len()
	d.k.Aux = append([]int64{}, iv.t.ints()...)
	d.in[0], _ = c.operand(n.Inputs[0])
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	if iv.t.Len() == 0 || numel(xs[:axis])*numel(xs[axis+1:]) == 0 {
		return nil
	}
	c.emit(d)
	return nil
}

// ---- pooling, reduction, resize ------------------------------------------------------------

func (c *compiler) lowerPool(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	gm, err := convGeom(n, xs[2:], n.AttrInts("kernel_shape", nil), true)
	if err != nil {
		return err
	}
	src, _ := c.operand(n.Inputs[0])
	params := [][17]int64{poolParams(xs, gm, n)}
	if len(xs) == 5 {
		// 3-D: (H, W) of each depth slice, then depth (pool3dParams)
		p1, p2 := pool3dParams(xs, gm, n)
		params = [][17]int64{p1, p2}
	}
	for i, p := range params {
		d := c.draft(g, OpPool)
		copy(d.k.P[:17], p[:])
		d.in[0] = src
		if i == len(params)-1 {
			if d.out, _, err = c.output(n.Outputs[0]); err != nil {
				return err
			}
		} else {
			d.out = operand{sp: SpaceArena, buf: c.newBuf(p[0] * p[3] * p[4])}
		}
		c.emit(d)
		src = d.out
	}
	return nil
}

func (c *compiler) lowerGlobalPool(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	d := c.draft(g, OpGPool)
	d.k.P[0], d.k.P[1] = xs[0]*xs[1], numel(xs[2:])
	if n.Op == "GlobalAveragePool" {
		d.k.P[2] = 1
	}
	d.in[0], _ = c.operand(n.Inputs[0])
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

func (c *compiler) lowerReduce(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	e := c.evFor(n)
	xs := append([]int64{}, x.t.Shape...)
	axes, err := e.reduceAxes(int64(len(xs)))
	if err != nil {
		return err
	}
	on := n.Outputs[0]
	if len(axes) == 0 {
		return c.copyValue(g, n.Inputs[0], on)
	}
	// runs of consecutive axes
	var runs [][2]int64
	for _, a := range axes {
		if len(runs) > 0 && runs[len(runs)-1][1] == a {
			runs[len(runs)-1][1] = a + 1
		} else {
			runs = append(runs, [2]int64{a, a + 1})
		}
	}
	mode := int64(reduceOps[n.Op])
	if len(runs) > 1 && mode == RedL2 {
		return fmt.Errorf("ReduceL2 over non-adjacent axes %v is not supported", axes)
	}
	src, _ := c.operand(n.Inputs[0])
	for i, r := range runs {
		d := c.draft(g, OpReduce)
		d.k.P[0], d.k.P[1], d.k.P[2] = numel(xs[:r[0]]), numel(xs[r[0]:r[1]]), numel(xs[r[1]:])
		m := mode
		if i > 0 && mode == RedSumSq {
			m = RedSum
		}
		d.k.P[3] = m
		for j := r[0]; j < r[1]; j++ {
			xs[j] = 1
		}
		d.in[0] = src
		if i == len(runs)-1 {
			if d.out, _, err = c.output(on); err != nil {
				return err
			}
		} else {
			d.out = operand{sp: SpaceArena, buf: c.newBuf(numel(xs))}
		}
		c.emit(d)
		src = d.out
	}
	return nil
}

func (c *compiler) lowerResize(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	rs, err := c.evFor(n).resizeSpec(x.t)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	r := len(xs)
	H, W, OH, OW := int64(1), xs[r-1], int64(1), rs.out[r-1]
	if r >= 4 {
		H, OH = xs[r-2], rs.out[r-2]
	}
	planes := x.t.Len() / (H * W)
	src, _ := c.operand(n.Inputs[0])
	out, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if !rs.depth {
		c.emitResize(g, rs, src, out, planes, H, W, OH, OW, rs.scaleH, rs.scaleW, rs.roi)
		return nil
	}
	// a 5-D input resized in depth too: (H, W) of every depth slice,
	// then (D, OH*OW) of every channel with scale 1 along its second axis
	// (nearest and linear are separable; an identity axis maps each
	// output to its own input exactly)
	D, OD := xs[2], rs.out[2]
	tmp := operand{sp: SpaceArena, buf: c.newBuf(planes * OH * OW)}
	c.emitResize(g, rs, src, tmp, planes, H, W, OH, OW, rs.scaleH, rs.scaleW, rs.roi)
	c.emitResize(g, rs, tmp, out, planes/D, D, OH*OW, OD, OH*OW, rs.scaleD, 1, [4]float32{rs.roiD[0], rs.roiD[1], 0, 1})
	return nil
}

// emitResize emits one RESIZE of planes of H x W values to OH x OW with
// rs's mode, coordinates and extrapolation at the scales and crop given.
func (c *compiler) emitResize(g *group, rs resizeSpec, src, dst operand, planes, H, W, OH, OW int64,
	scaleH, scaleW float32, roi [4]float32) {
	d := c.draft(g, OpResize)
	d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3], d.k.P[4] = planes, H, W, OH, OW
	d.k.P[5], d.k.P[6], d.k.P[7], d.k.P[8] = rs.mode, rs.coord, rs.nearest, rs.exclude
	d.k.F[0], d.k.F[1], d.k.F[2] = scaleH, scaleW, rs.cubicA
	d.k.F[3], d.k.F[4], d.k.F[5], d.k.F[6], d.k.F[7] = roi[0], roi[1], roi[2], roi[3], rs.extrap
	d.in[0] = src
	d.out = dst
	c.emit(d)
}

// lowerSelect copies Select's a or b, as its run-time condition says (a
// COPY whose p[19] reads the condition).
func (c *compiler) lowerSelect(g *group) error {
	n := c.node(g)
	if len(n.Inputs) != 3 {
		return fmt.Errorf("%d inputs, want 3", len(n.Inputs))
	}
	var ops [3]operand
	for i := range ops {
		var err error
		if ops[i], err = c.operand(n.Inputs[i]); err != nil {
			return err
		}
	}
	out, ov, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	n1 := max(ov.t.Len(), 1)
	d, err := c.copyDraft(g, "If", ops[1], 0, out, 0, []int64{n1}, []int64{1}, []int64{1})
	if err != nil {
		return err
	}
	d.in[1], d.in[2] = ops[2], ops[0]
	d.k.P[19] = 1
	c.emit(d)
	return nil
}

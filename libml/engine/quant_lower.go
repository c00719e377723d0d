package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Lowering of the quantisation operators to the QUANT and QGEMM kernels.

// QUANT kernel modes (P[3]).
const (
	quantModeQuantize   = 0
	quantModeDequantize = 1
	quantModeDynScale   = 2
	quantModeDynZero    = 3
	quantModeRequant    = 4
)

func (c *compiler) lowerQuant(g *group) error {
	n := c.node(g)
	switch n.Op {
	case "QuantizeLinear", "DequantizeLinear":
		return c.lowerQuantizeLinear(g)
	case "DynamicQuantizeLinear":
		return c.lowerDynamicQuantize(g)
	case "MatMulInteger", "QLinearMatMul":
		return c.lowerQMatMul(g)
	case "ConvInteger", "QLinearConv":
		return c.lowerQConv(g)
	}
	return fmt.Errorf("operator %s is not a quantisation operator", n.Op)
}

// quantDraft is a QUANT kernel over x (n elements, C channels of inner).
func (c *compiler) quantDraft(g *group, mode, n, C, inner int64, lo, hi int64, in ...operand) draft {
	d := c.draft(g, OpQuant)
	d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3], d.k.P[4], d.k.P[5] = max(n, 1), C, inner, mode, lo, hi
	copy(d.in[:], in)
	return d
}

func (c *compiler) lowerQuantizeLinear(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	s, err := c.val(n.Inputs[1])
	if err != nil {
		return err
	}
	C, inner, err := quantAxis(n, x.t.Shape, s.t.Len())
	if err != nil {
		return err
	}
	var ops [3]operand
	for i := range ops {
		if ops[i], err = c.optOperand(n, i); err != nil {
			return err
		}
	}
	out, ov, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	mode, lo, hi := int64(quantModeDequantize), int64(0), int64(0)
	if n.Op == "QuantizeLinear" {
		mode = quantModeQuantize
		if lo, hi, err = quantRange(ov.t.DType); err != nil {
			return err
		}
	}
	d := c.quantDraft(g, mode, x.t.Len(), C, inner, lo, hi, ops[:]...)
	d.out = out
	c.emit(d)
	return nil
}

func (c *compiler) lowerDynamicQuantize(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	xop, err := c.operand(n.Inputs[0])
	if err != nil {
		return err
	}
	// scale and zero point: one value each, reduced over the whole input
	var params [2]operand
	for i, mode := range []int64{quantModeDynScale, quantModeDynZero} {
		name := ""
		if i+1 < len(n.Outputs) {
			name = n.Outputs[i+1]
		}
		var out operand
		if name != "" {
			if out, _, err = c.output(name); err != nil {
				return err
			}
		} else {
			out = operand{sp: SpaceArena, buf: c.newBuf(1)}
		}
		d := c.quantDraft(g, mode, x.t.Len(), 1, 1, 0, 255, xop)
		d.out = out
		c.emit(d)
		params[i] = out
	}
	out, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	d := c.quantDraft(g, quantModeQuantize, x.t.Len(), 1, max(x.t.Len(), 1), 0, 255, xop, params[0], params[1])
	d.out = out
	c.emit(d)
	return nil
}

// qgemmSpec is a QGEMM kernel's parameters (sluice_cpu.h).
type qgemmSpec struct {
	M, N, K, lda, ldb, ldc int64
	bd                     [2]int64 // batch dimensions
	sA, sB, sY, sRow       [2]int64 // their strides
	aSigned, bSigned       bool
	zaPerRow, zbPerCol     bool
	multMode, biasMode     int64
	requant                bool
	lo, hi                 int64
	zy                     float32
	packedB, packedA       bool
	im2col                 bool      // B is the im2col of a convolution's input
	rows                   bool      // and A the weights in panels, run transposed (p[27] = 2)
	pad                    float32   // its padding value
	conv                   [16]int64 // its geometry (convP)
}

func (s *qgemmSpec) set(k *Kernel) {
	p := &k.P
	p[0], p[1], p[2], p[3], p[4], p[5] = s.M, s.N, s.K, s.lda, s.ldb, s.ldc
	p[6], p[7] = max(s.bd[0], 1), max(s.bd[1], 1)
	p[8], p[9], p[10], p[11] = s.sA[0], s.sA[1], s.sB[0], s.sB[1]
	p[12], p[13], p[14], p[15] = s.sY[0], s.sY[1], s.sRow[0], s.sRow[1]
	p[16], p[17], p[18], p[19] = b2i(s.aSigned), b2i(s.bSigned), b2i(s.zaPerRow), b2i(s.zbPerCol)
	p[20], p[21], p[22], p[23], p[24] = s.multMode, s.biasMode, b2i(s.requant), s.lo, s.hi
	p[25], p[26], p[27] = b2i(s.packedB), b2i(s.packedA), b2i(s.im2col)
	if s.rows {
		p[27] = 2
	}
	p[28] = qgemmKPad(s.K)
	k.F[0], k.F[1] = s.zy, s.pad
	if s.im2col {
		k.Aux = append([]int64(nil), s.conv[:]...)
	}
}

// qgemmKPad is the reduction length QGEMM's packed operands are padded
// to: a multiple of 64 (whole AMX tiles) from K = 128 on (a first
// convolution's 3x7x7 = 147 pads to 192: AMX's rate pays for it many
// times), else of 4 (one vpdpbusd step). The packing at load and every
// device's kernel read it from the kernel's p[28].
func qgemmKPad(K int64) int64 {
	if K >= 128 {
		return (K + 63) / 64 * 64
	}
	return (K + 3) / 4 * 4
}

// packQGemmA lays out constant integer matrix a (rows x K, row-major)
// the way the QGEMM kernel reads its A operand: rows of uint8 (int8
// values plus 128), K padded to qgemmKPad with zeros; and each row's sum.
func packQGemmA(a []int64, rows, K int64, signed bool) (packed, sums []float32) {
	kp := qgemmKPad(K)
	off := int64(0)
	if signed {
		off = 128
	}
	bytes := make([]byte, rows*kp)
	sums = make([]float32, rows)
	for r := int64(0); r < rows; r++ {
		var s int32
		for k := int64(0); k < K; k++ {
			v := a[r*K+k] + off
			bytes[r*kp+k] = byte(v)
			s += int32(v)
		}
		sums[r] = int32Bits(s)
	}
	return bytesToSlots(bytes), sums
}

// bytesToSlots packs bytes into float32 slots, 4 to a slot (zero padded).
func bytesToSlots(b []byte) []float32 {
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return out
}

// packQGemmB lays out constant integer matrix b (K x N, row-major; with
// trans, b is its transpose, N x K row-major: a convolution's weights as
// the B of its transposed product) the way the QGEMM kernel reads its B
// operand: s8 panels of 16 columns by 4 reduction steps, strip after strip
// (uint8 values less 128), K padded to qgemmKPad and N to 16 with zeros;
// and each column's sum. Both are returned as float32 slots holding the
// bytes (int32 sums bit for bit).
func packQGemmB(b []int64, K, N int64, trans, signed bool) (panels, sums []float32) {
	kp, np := qgemmKPad(K), (N+15)/16*16
	off := int64(128)
	if signed {
		off = 0
	}
	bytes := make([]byte, np*kp)
	colSum := make([]int32, np)
	k4n := kp / 4
	ldk, ldn := N, int64(1)
	if trans {
		ldk, ldn = 1, K
	}
	for k := int64(0); k < K; k++ {
		for n := int64(0); n < N; n++ {
			v := b[k*ldk+n*ldn] - off
			bytes[((n/16)*k4n+k/4)*64+(n%16)*4+k%4] = byte(int8(v))
			colSum[n] += int32(v)
		}
	}
	panels = bytesToSlots(bytes)
	sums = make([]float32, np)
	for i, v := range colSum {
		sums[i] = int32Bits(v)
	}
	return panels, sums
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// qlinearSpec reads a QLinear operator's constant scales into s (the
// multiplier per row or per column, as perRow says) and returns the
// multiplier's operand.
func (c *compiler) qlinearSpec(n *graph.Node, s *qgemmSpec, perRow bool) (operand, error) {
	q, err := qlinearParams(&ev{n: n, opset: c.m.opset, ins: c.tensors(n)}, 1, 4, 6, 7)
	if err != nil {
		return noOperand, err
	}
	s.requant = true
	s.zy = q.zy
	s.lo, s.hi = int64(q.lo), int64(q.hi)
	switch {
	case len(q.mult) == 1:
		s.multMode = 1
	case perRow:
		s.multMode = 2
	default:
		s.multMode = 3
	}
	return c.newConst(q.mult), nil
}

// zeroPoint returns the operand of optional zero point input i and
// whether it has one value per row or column (more than one value).
func (c *compiler) zeroPoint(n *graph.Node, i int) (operand, bool, error) {
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return noOperand, false, nil
	}
	v, err := c.val(n.Inputs[i])
	if err != nil {
		return noOperand, false, err
	}
	o, err := c.operand(n.Inputs[i])
	return o, v.t.Len() > 1 && !uniformConst(v), err
}

// uniformConst reports whether v is a constant whose values are all
// equal (per-channel zero points that are all 0, as symmetric weights
// have): read as one value, its first.
func uniformConst(v *cval) bool {
	if v.buf != -1 || !v.t.known() {
		return false
	}
	for i := int64(1); i < v.t.Len(); i++ {
		if v.t.at(i) != v.t.at(0) {
			return false
		}
	}
	return true
}

func (c *compiler) lowerQMatMul(g *group) error {
	n := c.node(g)
	ai, bi, zai, zbi := 0, 1, 2, 3
	qlin := n.Op == "QLinearMatMul"
	if qlin {
		ai, bi, zai, zbi = 0, 3, 2, 5
	}
	a, b, as, bs, err := c.matmulOperands(n, ai, bi)
	if err != nil {
		return err
	}
	M, K, N := as[len(as)-2], as[len(as)-1], bs[len(bs)-1]
	s := qgemmSpec{N: N, K: K, lda: K, ldb: N, ldc: N,
		aSigned: a.t.DType == graph.Int8, bSigned: b.t.DType == graph.Int8}
	za, zaRows, err := c.zeroPoint(n, zai)
	if err != nil {
		return err
	}
	zb, zbCols, err := c.zeroPoint(n, zbi)
	if err != nil {
		return err
	}
	s.zaPerRow, s.zbPerCol = zaRows, zbCols
	if len(bs) == 2 && !zaRows {
		// B is one matrix: every row of A's batch is one GEMM row
		s.M = numel(as[:len(as)-1])
	} else {
		s.M = M
		dims, st, err := matmulBatch(as, bs, 2)
		if err != nil {
			return err
		}
		if zaRows && numel(dims) > 1 {
			return fmt.Errorf("a per-row zero point of A needs a 2-D A")
		}
		for i := range dims {
			s.bd[i] = dims[i]
			s.sA[i], s.sB[i], s.sY[i] = st[0][i], st[1][i], st[2][i]
		}
	}
	var mult operand
	if qlin {
		if mult, err = c.qlinearSpec(n, &s, false); err != nil {
			return err
		}
	}
	d := c.draft(g, OpQGemm)
	if d.in[0], err = c.operand(n.Inputs[ai]); err != nil {
		return err
	}
	if d.in[1], err = c.operand(n.Inputs[bi]); err != nil {
		return err
	}
	d.in[2], d.in[3], d.in[4] = za, zb, mult
	if b.buf == -1 && len(b.t.Shape) == 2 {
		// constant weights: packed once at load (or here), not by every
		// block
		if data, sums, ok := c.packedWeights(n.Inputs[bi], qpackBSuffix); ok {
			d.in[1], d.in[6] = data, sums
		} else if b.t.I != nil {
			panels, sums := packQGemmB(b.t.I, K, N, false, s.bSigned)
			d.in[1], d.in[6] = c.newConst(panels), c.newConst(sums)
		} else {
			return fmt.Errorf("weights %q: no packed form", n.Inputs[bi])
		}
		s.packedB = true
	}
	if a.buf == -1 && len(a.t.Shape) == 2 && a.t.I != nil && s.bd[0] <= 1 && s.bd[1] <= 1 {
		packed, sums := packQGemmA(a.t.I, M, K, s.aSigned)
		d.in[0], d.in[7] = c.newConst(packed), c.newConst(sums)
		s.packedA = true
	}
	s.set(&d.k)
	if d.out, _, err = c.output(n.Outputs[0]); err != nil {
		return err
	}
	c.emit(d)
	return nil
}

func (c *compiler) lowerQConv(g *group) error {
	n := c.node(g)
	qlin := n.Op == "QLinearConv"
	xi, wi, zxi, zwi := 0, 1, 2, 3
	if qlin {
		xi, wi, zxi, zwi = 0, 3, 2, 5
	}
	if x, err := c.rtIn(n, xi); err == nil && len(x.t.Shape) == 5 {
		return c.lowerQConv3D(g, n, qlin, xi, wi, zxi, zwi)
	}
	x, w, p, err := c.convOperands(n, xi, wi)
	if err != nil {
		return err
	}
	xop, err := c.operand(n.Inputs[xi])
	if err != nil {
		return err
	}
	if dm := dimsOf(p); depthwise(dm.G, dm.Cg) {
		ok, err := c.lowerQDepthwise(g, n, p, w, qlin, wi, zxi, zwi, xop)
		if ok || err != nil {
			return err
		}
	}
	out, _, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	return c.emitQConv(g, n, qconvArgs{qlin: qlin, wi: wi, zxi: zxi, zwi: zwi,
		aSigned: w.t.DType == graph.Int8, bSigned: x.t.DType == graph.Int8}, p, xop, out)
}

// qconvArgs are what emitQConv reads of a QLinearConv or ConvInteger node:
// its form, the inputs' positions, and whether the weights (A) and the
// input (B) are signed.
type qconvArgs struct {
	qlin             bool
	wi, zxi, zwi     int
	aSigned, bSigned bool
}

// constZeroPoint returns input i's zero point as a float (0 when absent);
// it must be a constant.
func (c *compiler) constZeroPoint(n *graph.Node, i int) (float32, error) {
	if i >= len(n.Inputs) || n.Inputs[i] == "" {
		return 0, nil
	}
	zv, err := c.val(n.Inputs[i])
	if err != nil {
		return 0, err
	}
	if zv.buf != -1 {
		return 0, fmt.Errorf("the input's zero point must be a constant")
	}
	return float32(zv.t.at(0)), nil
}

// emitQConv emits QGEMM for the 2-D integer convolution p of node n over
// xop into out: the weights packed as A rows (their [Cout, Cg*K...]
// flattening is the reduction's order), the input as B, pointwise read in
// place or else built by each block as im2col columns padded with the
// input's zero point; QLinearConv's requantisation and bias fused.
func (c *compiler) emitQConv(g *group, n *graph.Node, a qconvArgs, p [16]int64, xop, out operand) error {
	dm := dimsOf(p)
	N, C, H, W, G, Cout := dm.N, dm.C, dm.H, dm.W, dm.G, dm.Cout
	OHW, Cg, Mg, Kd := dm.OHW, dm.Cg, dm.Mg, dm.Kd
	zw, zwRows, err := c.zeroPoint(n, a.zwi)
	if err != nil {
		return err
	}
	zx, _, err := c.zeroPoint(n, a.zxi)
	if err != nil {
		return err
	}
	s := qgemmSpec{M: Mg, N: OHW, K: Kd, lda: Kd, ldb: OHW, ldc: OHW,
		bd: [2]int64{N, G}, sA: [2]int64{0, Mg * Kd}, sY: [2]int64{Cout * OHW, Mg * OHW},
		sRow: [2]int64{0, Mg}, aSigned: a.aSigned, bSigned: a.bSigned, zaPerRow: zwRows}
	pointwise := p[6] == 1 && p[7] == 1 && p[8] == 1 && p[9] == 1 && p[10] == 0 && p[11] == 0 &&
		OHW == H*W
	if pointwise {
		s.sB = [2]int64{C * OHW, Cg * OHW}
	} else {
		// each block builds its im2col columns, padding with the
		// input's zero point
		if s.pad, err = c.constZeroPoint(n, a.zxi); err != nil {
			return err
		}
		s.im2col = true
		s.conv = p
	}
	var mult, bias operand
	if a.qlin {
		if mult, err = c.qlinearSpec(n, &s, true); err != nil {
			return err
		}
		if len(n.Inputs) > 8 && n.Inputs[8] != "" {
			bv, err := c.val(n.Inputs[8])
			if err != nil {
				return err
			}
			if bv.buf != -1 || bv.t.DType != graph.Int32 || bv.t.Len() != Cout {
				return fmt.Errorf("bias must be a constant int32[%d]", Cout)
			}
			bits := make([]float32, Cout)
			for i, v := range bv.t.I {
				bits[i] = int32Bits(int32(v))
			}
			bias = c.newConst(bits)
			s.biasMode = 1
		}
	}
	// the weights, packed once at load (or here); the A strides count rows.
	// Where the loader packed them in panels (few output positions:
	// rowsConv), QGEMM runs transposed, positions as its rows.
	wp, ws, ok := c.packedWeights(n.Inputs[a.wi], qpackRowsSuffix)
	if ok && s.im2col && G == 1 {
		s.rows = true
	} else {
		wp, ws, ok = c.packedWeights(n.Inputs[a.wi], qpackASuffix)
	}
	if !ok {
		w, err := c.val(n.Inputs[a.wi])
		if err != nil {
			return err
		}
		if w.t.I == nil {
			return fmt.Errorf("weights %q: no packed form", n.Inputs[a.wi])
		}
		packed, sums := packQGemmA(w.t.I, Cout, Kd, s.aSigned)
		wp, ws = c.newConst(packed), c.newConst(sums)
	}
	s.packedA = true
	s.sA = [2]int64{0, Mg}
	d := c.draft(g, OpQGemm)
	d.in = [MaxIn]operand{wp, xop, zw, zx, mult, bias, noOperand, ws}
	s.set(&d.k)
	d.out = out
	c.emit(d)
	return nil
}

// int32Bits stores int32 v in a float32 slot bit for bit (the QGEMM
// kernel's bias).
func int32Bits(v int32) float32 { return math.Float32frombits(uint32(v)) }

// exactFloat is the largest magnitude float32 holds every integer up to.
const exactFloat = 1 << 24

// lowerQDepthwise lowers a depthwise QLinearConv / ConvInteger to the
// float depthwise kernel where that is exact: the input less its zero
// point, the weights less theirs, products of at most 255 x 255 summed
// over a window small enough that every partial sum (bias included) is an
// integer below 2^24, so float32 computes it exactly in any order. One
// DWCONV kernel shifts the input, convolves and requantises (QUANT's
// modes, plane by plane). It returns false (nothing emitted) when the
// window is too large.
func (c *compiler) lowerQDepthwise(g *group, n *graph.Node, p [16]int64, w *cval, qlin bool, wi, zxi, zwi int, xop operand) (bool, error) {
	Cout, win := w.t.Shape[0], p[6]*p[7]
	var bias []float32
	maxBias := 0.0
	if qlin && len(n.Inputs) > 8 && n.Inputs[8] != "" {
		bv, err := c.val(n.Inputs[8])
		if err != nil {
			return false, err
		}
		if bv.buf != -1 || bv.t.DType != graph.Int32 || bv.t.Len() != Cout {
			return false, fmt.Errorf("bias must be a constant int32[%d]", Cout)
		}
		bias = make([]float32, Cout)
		for i, v := range bv.t.I {
			bias[i] = float32(v)
			maxBias = max(maxBias, math.Abs(float64(v)))
		}
	}
	if float64(win)*255*255+maxBias >= exactFloat {
		return false, nil
	}
	tens := c.tensors(n)
	zx, zw := float32(0), tens[zwi]
	if zxi < len(tens) && tens[zxi] != nil {
		if !tens[zxi].known() {
			return false, fmt.Errorf("the input's zero point must be a constant")
		}
		zx = float32(tens[zxi].at(0))
	}
	if zw != nil && !zw.known() {
		return false, fmt.Errorf("the weights' zero point must be a constant")
	}
	// the weights less theirs (at load, or here)
	wop := noOperand
	if off, ok := c.m.wOff[n.Inputs[wi]+qdwSuffix]; ok {
		wop = operand{sp: SpaceWeights, off: off}
	} else {
		per := w.t.Len() / Cout
		wf := make([]float32, w.t.Len())
		for i := range wf {
			wf[i] = float32(w.t.I[i]) - zeroPointAt(zw, int64(i)/per)
		}
		wop = c.newConst(wf)
	}
	// One pass: each block shifts an input plane by the input's zero
	// point, convolves it and, for QLinearConv, requantises the output
	// plane while it is in cache (QUANT's modes 1 and 4, the same bits as
	// the three passes over the whole tensors they replace).
	dw := c.draft(g, OpDWConv)
	copy(dw.k.P[:16], p[:])
	dw.k.P[16], dw.k.F[0] = 1, zx
	dw.in[0], dw.in[1] = xop, wop
	if bias != nil {
		dw.in[2] = c.newConst(bias)
	}
	out, _, err := c.output(n.Outputs[0])
	if err != nil {
		return false, err
	}
	dw.out = out
	if qlin {
		q, err := qlinearParams(&ev{n: n, opset: c.m.opset, ins: tens}, 1, 4, 6, 7)
		if err != nil {
			return false, err
		}
		mult := make([]float32, Cout)
		for i := range mult {
			mult[i] = q.mult[0]
			if len(q.mult) > 1 {
				mult[i] = q.mult[i]
			}
		}
		dw.k.P[17], dw.k.P[18], dw.k.P[19], dw.k.F[1] = 1, int64(q.lo), int64(q.hi), q.zy
		dw.in[4] = c.newConst(mult)
	}
	c.emit(dw)
	return true, nil
}

// Suffixes of the quantised weights' load-time forms (packQuantWeights).
const (
	qpackASuffix = "#qpackA" // QGEMM A rows, uint8
	qpackBSuffix = "#qpackB" // QGEMM B panels, int8
	// QGEMM's A of a convolution run transposed (rowsConv): the weights
	// as B panels of output channels, int8 (packQGemmB of W, transposed)
	qpackRowsSuffix = "#qpackRows"
	qpackSumSufix   = ".sums"       // their int32 row / column sums
	qdwSuffix       = "#qdepthwise" // depthwise weights less their zero points, float
)

// quantWeightInputs gives a quantisation node's weight input, zero point
// input and whether the weight is QGEMM's A operand, or ok = false.
func quantWeightInputs(n *graph.Node) (wi, zwi int, asA, ok bool) {
	switch n.Op {
	case "ConvInteger":
		return 1, 3, true, true
	case "QLinearConv":
		return 3, 5, true, true
	case "MatMulInteger":
		return 1, 3, false, true
	case "QLinearMatMul":
		return 3, 5, false, true
	}
	return 0, 0, false, false
}

// packQuantWeights packs every constant weight of the integer convolutions
// and products once, at load, into constants the weight arena holds (one
// copy shared by every batch size's program): QGEMM's A rows for
// convolutions, its B panels for MatMul's constant B, the exact float
// weights of depthwise convolutions. A weight nothing else reads is then
// dropped in its integer form (8 bytes a value), keeping its type and
// shape.
func (m *Model) packQuantWeights() {
	packedBy := map[string]int{}
	var shapes map[string][]int64 // at batch 1, once a convolution asks (rowsConv)
	for i := range m.nodes {
		n := &m.nodes[i]
		wi, zwi, asA, ok := quantWeightInputs(n)
		if !ok || wi >= len(n.Inputs) {
			continue
		}
		name := n.Inputs[wi]
		w := m.consts[name]
		if w == nil || w.I == nil || w.IsFloat() {
			continue
		}
		signed := w.DType == graph.Int8
		switch {
		case asA && len(w.Shape) >= 3 && depthwise(n.AttrInt("group", 1), w.Shape[1]):
			// depthwise: the float path's weights (the integer ones stay:
			// lowerQDepthwise falls back to QGEMM for large windows)
			if _, done := m.consts[name+qdwSuffix]; done {
				continue
			}
			var zw *Tensor
			if zwi < len(n.Inputs) {
				zw = m.consts[n.Inputs[zwi]]
			}
			per := w.Len() / w.Shape[0]
			wf := make([]float32, w.Len())
			for j := range wf {
				wf[j] = float32(w.I[j]) - zeroPointAt(zw, int64(j)/per)
			}
			m.consts[name+qdwSuffix] = NewFloat(w.Shape, wf)
			continue
		case asA && len(w.Shape) == 4 && !m.opts.NoConvRows && m.rowsConv(n, w.Shape, &shapes):
			rows := w.Shape[0]
			if _, done := m.consts[name+qpackRowsSuffix]; !done {
				panels, sums := packQGemmB(channelLastWindows(w.I, w.Shape), w.Len()/rows, rows, true, signed)
				m.consts[name+qpackRowsSuffix] = NewFloat([]int64{int64(len(panels))}, panels)
				m.consts[name+qpackRowsSuffix+qpackSumSufix] = NewFloat([]int64{int64(len(sums))}, sums)
			}
		case asA && len(w.Shape) >= 3:
			rows := w.Shape[0]
			if _, done := m.consts[name+qpackASuffix]; !done {
				packed, sums := packQGemmA(w.I, rows, w.Len()/rows, signed)
				m.consts[name+qpackASuffix] = NewFloat([]int64{int64(len(packed))}, packed)
				m.consts[name+qpackASuffix+qpackSumSufix] = NewFloat([]int64{rows}, sums)
			}
		case !asA && len(w.Shape) == 2:
			K, N := w.Shape[0], w.Shape[1]
			if _, done := m.consts[name+qpackBSuffix]; !done {
				panels, sums := packQGemmB(w.I, K, N, false, signed)
				m.consts[name+qpackBSuffix] = NewFloat([]int64{int64(len(panels))}, panels)
				m.consts[name+qpackBSuffix+qpackSumSufix] = NewFloat([]int64{int64(len(sums))}, sums)
			}
		default:
			continue
		}
		packedBy[name]++
	}
	m.dropPacked(packedBy)
}

// rowsMaxPositions is the most output positions an image of an integer
// convolution run transposed has (native/cpu quant.c, qg_block_rows):
// the positions are then QGEMM's rows and the channels its 16-lane
// strips, where 49 positions would fill 64 lanes, and a block builds only
// its own positions' im2col. Measured on Zen 5 (BenchmarkQConv): faster
// at 7x7 and 14x14 (196 positions), slower at 28x28.
const rowsMaxPositions = 256

// rowsConv reports whether 2-D integer convolution n, of weights shaped
// ws [Cout, Cin, KH, KW], runs transposed: one group, a window wider than
// 1x1, and at most rowsMaxPositions output positions an image, as the
// shapes inferred at load (batch 1, computed into *shapes on first use)
// say. Its weights are then packed only in that form, so every batch
// size's program runs it so.
func (m *Model) rowsConv(n *graph.Node, ws []int64, shapes *map[string][]int64) bool {
	if n.AttrInt("group", 1) != 1 || len(n.Outputs) == 0 {
		return false
	}
	if ws[2] == 1 && ws[3] == 1 {
		// 1x1: the column form reads a pointwise input in place and
		// gathers a strided one. Run transposed, MobileNetV2's
		// expansions (few input channels) were 1.2-2.2x slower a
		// layer: their output is stored transposed, a few bytes a
		// channel (docs/benchmarks.md, seventh session)
		return false
	}
	if *shapes == nil {
		*shapes, _ = m.loadShapes(1)
	}
	y := (*shapes)[n.Outputs[0]]
	return len(y) == 4 && y[2] > 0 && y[3] > 0 && y[2]*y[3] <= rowsMaxPositions
}

// channelLastWindows reorders convolution weights w shaped [Cout, Cin, KH,
// KW] so that each output channel's window runs (kh, kw, c), the channel
// fastest: the order of the transposed form's im2col rows, built from a
// channel-last image (native/cpu quant.c, qg_rows_im2col_cl).
func channelLastWindows(w []int64, shape []int64) []int64 {
	cout, cin, kh, kw := shape[0], shape[1], shape[2], shape[3]
	out := make([]int64, len(w))
	win := cin * kh * kw
	for o := int64(0); o < cout; o++ {
		for c := int64(0); c < cin; c++ {
			for h := int64(0); h < kh; h++ {
				for x := int64(0); x < kw; x++ {
					out[o*win+(h*kw+x)*cin+c] = w[o*win+(c*kh+h)*kw+x]
				}
			}
		}
	}
	return out
}

// packedWeights returns the load-time packed form of weight name (suffix
// qpackASuffix or qpackBSuffix) and its sums, from the weight arena.
func (c *compiler) packedWeights(name, suffix string) (data, sums operand, ok bool) {
	off, ok1 := c.m.wOff[name+suffix]
	soff, ok2 := c.m.wOff[name+suffix+qpackSumSufix]
	if !ok1 || !ok2 {
		return noOperand, noOperand, false
	}
	return operand{sp: SpaceWeights, off: off}, operand{sp: SpaceWeights, off: soff}, true
}

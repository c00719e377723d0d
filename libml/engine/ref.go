package engine

import (
	"fmt"
	"math"
	"strings"

	"sluice/libml/graph"
)

// Eval runs node n with the engine's naive reference implementation: the
// compiler uses it to fold constant subgraphs and to infer shapes, the
// tests to check the C kernels. ins[i] is nil for an omitted optional
// input. An input without data (F and I both nil) is known by shape only;
// outputs that depend on its values then come back with shapes only.
func Eval(n *graph.Node, opset int64, ins []*Tensor) ([]*Tensor, error) {
	if _, ok := decomposedOps[nodeOp(n)]; ok {
		outs, err := evalDecomposed(n, opset, ins)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", n.Op, n.Name, err)
		}
		return outs, nil
	}
	f, ok := refOps[nodeOp(n)]
	if !ok {
		return nil, fmt.Errorf("%s: no reference implementation", n.Op)
	}
	e := &ev{n: n, opset: opset, ins: ins}
	outs, err := f(e)
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", n.Op, n.Name, err)
	}
	return outs, nil
}

type ev struct {
	n     *graph.Node
	opset int64
	ins   []*Tensor
}

func (e *ev) in(i int) *Tensor {
	if i < len(e.ins) {
		return e.ins[i]
	}
	return nil
}

func (e *ev) need(i int) (*Tensor, error) {
	t := e.in(i)
	if t == nil {
		return nil, fmt.Errorf("input %d missing", i)
	}
	return t, nil
}

// constIn returns input i's data, or an error when it is not constant.
func (e *ev) constIn(i int, what string) (*Tensor, error) {
	t := e.in(i)
	if t == nil {
		return nil, nil
	}
	if !t.known() {
		return nil, fmt.Errorf("%s (input %d) must be a constant", what, i)
	}
	return t, nil
}

// scalarIn reads optional constant scalar input i (def when omitted).
func (e *ev) scalarIn(i int, what string, def float64) (float64, error) {
	t, err := e.constIn(i, what)
	if err != nil || t == nil {
		return def, err
	}
	if t.Len() != 1 {
		return 0, fmt.Errorf("%s has %d values, want one", what, t.Len())
	}
	return t.at(0), nil
}

func (t *Tensor) known() bool { return t != nil && (t.F != nil || t.I != nil) }

func (e *ev) allKnown() bool {
	for _, t := range e.ins {
		if t != nil && !t.known() {
			return false
		}
	}
	return true
}

func shapeOnly(dt graph.DType, shape []int64) *Tensor {
	if isFloatType(dt) {
		dt = graph.Float32
	}
	return &Tensor{DType: dt, Shape: shape}
}

func one(t *Tensor) ([]*Tensor, error) { return []*Tensor{t}, nil }

var refOps map[string]func(*ev) ([]*Tensor, error)

func init() {
	refOps = map[string]func(*ev) ([]*Tensor, error){
		"Conv": refConv, "ConvTranspose": refConvTranspose,
		"Gemm": refGemm, "MatMul": refMatMul,
		"BatchNormalization": refBatchNorm,
		"MaxPool":            refPool, "AveragePool": refPool,
		"GlobalAveragePool": refGlobalPool, "GlobalMaxPool": refGlobalPool,
		"Concat": refConcat, "Reshape": refReshape, "Flatten": refFlatten,
		"Transpose": refTranspose, "Resize": refResize, "Upsample": refResize,
		"Softmax": refSoftmax, "LogSoftmax": refSoftmax,
		"LayerNormalization": refLayerNorm,
		"Shape":              refShape, "Size": refSize, "Gather": refGather,
		"Unsqueeze": refUnsqueeze, "Squeeze": refSqueeze,
		"Constant": refConstant, "ConstantOfShape": refConstantOfShape,
		"Slice": refSlice, "Split": refSplit, "Expand": refExpand,
		"Identity": refIdentity, "Dropout": refIdentity, "Cast": refCast,
		"Range": refRange, "Where": refWhere, "Not": refNot,
		"RNN": refRecurrent, "GRU": refRecurrent, "LSTM": refRecurrent,
		"If": refIf, opSelect: refSelect,
		"DepthToSpace": refSpaceDepth, "SpaceToDepth": refSpaceDepth,
		"Tile": refTile, "CumSum": refCumSum, "DFT": refDFT, "STFT": refSTFT, "CastLike": refCast,
		"ArgMax": refArgMinMax, "ArgMin": refArgMinMax, "Mod": refMod,
		"IsNaN": refIsNaNInf, "IsInf": refIsNaNInf,
		"EyeLike": refEyeLike, "OneHot": refOneHot, "HannWindow": refWindow, "HammingWindow": refWindow, "BlackmanWindow": refWindow, "MelWeightMatrix": refMelWeightMatrix, "NonZero": refNonZero, "Unique": refUnique, "AffineGrid": refAffineGrid, "CenterCropPad": refCenterCropPad, "BitShift": refBitShift, "Einsum": refEinsum, "GridSample": refGridSample, "TopK": refTopK, "RoiAlign": refRoiAlign, "NonMaxSuppression": refNonMaxSuppression, "TfIdfVectorizer": refTfIdfVectorizer, "Det": refDet,
	}
	for op := range indexMapOps {
		refOps[op] = refIndexMap
	}
	for op := range unaryActs {
		refOps[op] = refUnary
	}
	for op := range binaryOps {
		refOps[op] = refBinary
	}
	for _, op := range []string{"Max", "Min", "Sum", "Mean"} {
		refOps[op] = refVariadic
	}
	for _, op := range []string{"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor"} {
		refOps[op] = refBinary
	}
	for op := range reduceOps {
		refOps[op] = refReduce
	}
	addQuantRefs()
}

// ---- geometry -------------------------------------------------------------

// geom is the spatial geometry of a convolution or pooling window.
type geom struct {
	k, s, d, pb, pe, out []int64
}

// on3Axes is the geometry of a 1-D, 2-D or 3-D convolution over spatial
// input shape in on three axes (depth, height, width), the missing
// leading ones of size 1 (stride and dilation 1, no padding): the input,
// kernel and output sizes, strides, dilations and leading pads.
func (g geom) on3Axes(in []int64) (x, k, out, st, dl, pb [3]int64) {
	lead := 3 - len(g.out)
	for i := range 3 {
		x[i], k[i], out[i], st[i], dl[i] = 1, 1, 1, 1, 1
		if j := i - lead; j >= 0 {
			x[i], k[i], out[i], st[i], dl[i], pb[i] = in[j], g.k[j], g.out[j], g.s[j], g.d[j], g.pb[j]
		}
	}
	return
}

// convGeom computes pads and output sizes for spatial input sizes in and
// kernel sizes k from n's attributes (auto_pad, pads, strides, dilations).
// pool selects pooling's ceil_mode rule.
func convGeom(n *graph.Node, in, k []int64, pool bool) (geom, error) {
	r := len(in)
	g := geom{k: k, s: make([]int64, r), d: make([]int64, r), pb: make([]int64, r),
		pe: make([]int64, r), out: make([]int64, r)}
	strides := n.AttrInts("strides", nil)
	dils := n.AttrInts("dilations", nil)
	pads := n.AttrInts("pads", nil)
	if len(k) != r || (strides != nil && len(strides) != r) || (dils != nil && len(dils) != r) ||
		(pads != nil && len(pads) != 2*r) {
		return g, fmt.Errorf("attribute lengths do not match %d spatial dims (kernel %v strides %v dilations %v pads %v)",
			r, k, strides, dils, pads)
	}
	ceil := pool && n.AttrInt("ceil_mode", 0) != 0
	auto := n.AttrString("auto_pad", "NOTSET")
	for i := 0; i < r; i++ {
		g.s[i], g.d[i] = 1, 1
		if strides != nil {
			g.s[i] = strides[i]
		}
		if dils != nil {
			g.d[i] = dils[i]
		}
		if g.s[i] < 1 || g.d[i] < 1 || k[i] < 1 {
			return g, fmt.Errorf("bad kernel %v / strides / dilations", k)
		}
		ek := (k[i]-1)*g.d[i] + 1
		switch auto {
		case "SAME_UPPER", "SAME_LOWER":
			o := (in[i] + g.s[i] - 1) / g.s[i]
			total := (o-1)*g.s[i] + ek - in[i]
			if total < 0 {
				total = 0
			}
			if auto == "SAME_UPPER" {
				g.pb[i] = total / 2
			} else {
				g.pb[i] = total - total/2
			}
			g.pe[i] = total - g.pb[i]
			g.out[i] = o
			continue
		case "VALID":
		case "NOTSET", "":
			if pads != nil {
				g.pb[i], g.pe[i] = pads[i], pads[i+r]
			}
		default:
			return g, fmt.Errorf("auto_pad %q not supported", auto)
		}
		num := in[i] + g.pb[i] + g.pe[i] - ek
		if num < 0 {
			return g, fmt.Errorf("kernel %d (dilated) larger than padded input %d", ek, in[i]+g.pb[i]+g.pe[i])
		}
		if ceil {
			g.out[i] = (num+g.s[i]-1)/g.s[i] + 1
			if (g.out[i]-1)*g.s[i] >= in[i]+g.pb[i] {
				g.out[i]--
			}
		} else {
			g.out[i] = num/g.s[i] + 1
		}
	}
	return g, nil
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// convTGeom is convGeom for ConvTranspose.
func convTGeom(n *graph.Node, in, k []int64) (geom, []int64, error) {
	r := len(in)
	g := geom{k: k, s: make([]int64, r), d: make([]int64, r), pb: make([]int64, r),
		pe: make([]int64, r), out: make([]int64, r)}
	strides := n.AttrInts("strides", nil)
	dils := n.AttrInts("dilations", nil)
	pads := n.AttrInts("pads", nil)
	opad := n.AttrInts("output_padding", nil)
	oshape := n.AttrInts("output_shape", nil)
	auto := n.AttrString("auto_pad", "NOTSET")
	if len(oshape) > r {
		oshape = oshape[len(oshape)-r:]
	}
	op := make([]int64, r)
	for i := 0; i < r; i++ {
		g.s[i], g.d[i] = 1, 1
		if i < len(strides) {
			g.s[i] = strides[i]
		}
		if i < len(dils) {
			g.d[i] = dils[i]
		}
		if i < len(opad) {
			op[i] = opad[i]
		}
		if pads != nil && len(pads) == 2*r {
			g.pb[i], g.pe[i] = pads[i], pads[i+r]
		}
		ek := (k[i]-1)*g.d[i] + 1
		full := g.s[i]*(in[i]-1) + op[i] + ek
		switch {
		case len(oshape) == r:
			// ONNX halves with floor division: a negative total (an output
			// larger than the full result) pads the end negatively
			total := full - oshape[i]
			half := floorDiv(total, 2)
			if auto == "SAME_UPPER" {
				g.pb[i] = half
				g.pe[i] = total - half
			} else {
				g.pb[i] = total - half
				g.pe[i] = half
			}
			g.out[i] = oshape[i]
		case auto == "SAME_UPPER" || auto == "SAME_LOWER":
			o := in[i] * g.s[i]
			total := full - o
			if auto == "SAME_UPPER" {
				g.pb[i] = total / 2
				g.pe[i] = total - total/2
			} else {
				g.pb[i] = total - total/2
				g.pe[i] = total / 2
			}
			g.out[i] = o
		default:
			g.out[i] = full - g.pb[i] - g.pe[i]
		}
		if g.out[i] < 1 {
			return g, nil, fmt.Errorf("output size %d < 1", g.out[i])
		}
	}
	return g, op, nil
}

// ---- convolution ------------------------------------------------------------

func refConv(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	w, err := e.need(1)
	if err != nil {
		return nil, err
	}
	b := e.in(2)
	if len(x.Shape) < 3 || len(x.Shape) > 5 || len(w.Shape) != len(x.Shape) {
		return nil, fmt.Errorf("only 1-D, 2-D and 3-D convolutions: X %v W %v", x.Shape, w.Shape)
	}
	G := e.n.AttrInt("group", 1)
	N, C := x.Shape[0], x.Shape[1]
	M := w.Shape[0]
	if G < 1 || C%G != 0 || M%G != 0 || w.Shape[1] != C/G {
		return nil, fmt.Errorf("X %v, W %v, group %d do not agree", x.Shape, w.Shape, G)
	}
	if ks := e.n.AttrInts("kernel_shape", nil); ks != nil && !eqShape(ks, w.Shape[2:]) {
		return nil, fmt.Errorf("kernel_shape %v != W %v", ks, w.Shape)
	}
	g, err := convGeom(e.n, x.Shape[2:], w.Shape[2:], false)
	if err != nil {
		return nil, err
	}
	oshape := append([]int64{N, M}, g.out...)
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, oshape))
	}
	if err := checkFoldWork(e, float64(numel(oshape))*float64(numel(w.Shape[1:]))); err != nil {
		return nil, err
	}
	in, k, out, st, dl, pb := g.on3Axes(x.Shape[2:])
	D, H, W := in[0], in[1], in[2]
	KD, KH, KW := k[0], k[1], k[2]
	Cg, Mg := C/G, M/G
	y := NewFloat(oshape, nil)
	xf, wf := x.floats(), w.floats()
	for n := int64(0); n < N; n++ {
		for oc := int64(0); oc < M; oc++ {
			gi := oc / Mg
			for od := int64(0); od < out[0]; od++ {
				for oh := int64(0); oh < out[1]; oh++ {
					for ow := int64(0); ow < out[2]; ow++ {
						var s float64
						if b != nil {
							s = b.at(oc)
						}
						for ic := int64(0); ic < Cg; ic++ {
							xc := xf[((n*C)+gi*Cg+ic)*D*H*W:]
							wc := wf[(oc*Cg+ic)*KD*KH*KW:]
							for kd := int64(0); kd < KD; kd++ {
								id := od*st[0] - pb[0] + kd*dl[0]
								if id < 0 || id >= D {
									continue
								}
								for kh := int64(0); kh < KH; kh++ {
									ih := oh*st[1] - pb[1] + kh*dl[1]
									if ih < 0 || ih >= H {
										continue
									}
									for kw := int64(0); kw < KW; kw++ {
										iw := ow*st[2] - pb[2] + kw*dl[2]
										if iw < 0 || iw >= W {
											continue
										}
										s += float64(xc[(id*H+ih)*W+iw]) * float64(wc[(kd*KH+kh)*KW+kw])
									}
								}
							}
						}
						y.F[(((n*M+oc)*out[0]+od)*out[1]+oh)*out[2]+ow] = float32(s)
					}
				}
			}
		}
	}
	return one(y)
}

func attrFloats(n *graph.Node, name string) []float32 {
	if a := n.Attr(name); a != nil {
		return a.Floats
	}
	return nil
}

func refConvTranspose(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	w, err := e.need(1)
	if err != nil {
		return nil, err
	}
	b := e.in(2)
	if len(x.Shape) < 3 || len(x.Shape) > 5 || len(w.Shape) != len(x.Shape) {
		return nil, fmt.Errorf("only 1-D, 2-D and 3-D transposed convolutions: X %v W %v", x.Shape, w.Shape)
	}
	G := e.n.AttrInt("group", 1)
	N, C := x.Shape[0], x.Shape[1]
	if G < 1 || C%G != 0 || w.Shape[0] != C {
		return nil, fmt.Errorf("X %v, W %v, group %d do not agree", x.Shape, w.Shape, G)
	}
	Mg := w.Shape[1]
	M := Mg * G
	g, _, err := convTGeom(e.n, x.Shape[2:], w.Shape[2:])
	if err != nil {
		return nil, err
	}
	oshape := append([]int64{N, M}, g.out...)
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, oshape))
	}
	if err := checkFoldWork(e, float64(x.Len())*float64(numel(w.Shape[1:]))); err != nil {
		return nil, err
	}
	in, k, out, st, dl, pb := g.on3Axes(x.Shape[2:])
	K := k[0] * k[1] * k[2]
	OS := out[0] * out[1] * out[2]
	Cg := C / G
	acc := make([]float64, numel(oshape))
	xf, wf := x.floats(), w.floats()
	for n := int64(0); n < N; n++ {
		for ic := int64(0); ic < C; ic++ {
			gi := ic / Cg
			for id := int64(0); id < in[0]; id++ {
				for ih := int64(0); ih < in[1]; ih++ {
					for iw := int64(0); iw < in[2]; iw++ {
						xv := float64(xf[(((n*C+ic)*in[0]+id)*in[1]+ih)*in[2]+iw])
						for c := int64(0); c < Mg; c++ {
							oc := gi*Mg + c
							wc := wf[(ic*Mg+c)*K:]
							for kd := int64(0); kd < k[0]; kd++ {
								od := id*st[0] - pb[0] + kd*dl[0]
								if od < 0 || od >= out[0] {
									continue
								}
								for kh := int64(0); kh < k[1]; kh++ {
									oh := ih*st[1] - pb[1] + kh*dl[1]
									if oh < 0 || oh >= out[1] {
										continue
									}
									for kw := int64(0); kw < k[2]; kw++ {
										ow := iw*st[2] - pb[2] + kw*dl[2]
										if ow < 0 || ow >= out[2] {
											continue
										}
										acc[(n*M+oc)*OS+(od*out[1]+oh)*out[2]+ow] += xv * float64(wc[(kd*k[1]+kh)*k[2]+kw])
									}
								}
							}
						}
					}
				}
			}
		}
	}
	y := NewFloat(oshape, nil)
	for i := range acc {
		v := acc[i]
		if b != nil {
			v += b.at(int64(i) / OS % M)
		}
		y.F[i] = float32(v)
	}
	return one(y)
}

// ---- GEMM -----------------------------------------------------------------

func refGemm(e *ev) ([]*Tensor, error) {
	a, err := e.need(0)
	if err != nil {
		return nil, err
	}
	b, err := e.need(1)
	if err != nil {
		return nil, err
	}
	c := e.in(2)
	if len(a.Shape) != 2 || len(b.Shape) != 2 {
		return nil, fmt.Errorf("A %v and B %v must be matrices", a.Shape, b.Shape)
	}
	ta, tb := e.n.AttrInt("transA", 0) != 0, e.n.AttrInt("transB", 0) != 0
	alpha, beta := float64(e.n.AttrFloat("alpha", 1)), float64(e.n.AttrFloat("beta", 1))
	M, K := a.Shape[0], a.Shape[1]
	if ta {
		M, K = K, M
	}
	K2, N := b.Shape[0], b.Shape[1]
	if tb {
		K2, N = N, K2
	}
	if K != K2 {
		return nil, fmt.Errorf("A %v and B %v do not multiply (transA %v transB %v)", a.Shape, b.Shape, ta, tb)
	}
	var cs []int64
	if c != nil {
		if _, err := broadcastShape(c.Shape, []int64{M, N}); err != nil || len(c.Shape) > 2 {
			return nil, fmt.Errorf("C %v does not broadcast to [%d %d]", c.Shape, M, N)
		}
		cs = bstrides(c.Shape, []int64{M, N})
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, []int64{M, N}))
	}
	if err := checkFoldWork(e, float64(M)*float64(K)*float64(N)); err != nil {
		return nil, err
	}
	y := NewFloat([]int64{M, N}, nil)
	af, bf := a.floats(), b.floats()
	for i := int64(0); i < M; i++ {
		for j := int64(0); j < N; j++ {
			var s float64
			for k := int64(0); k < K; k++ {
				av := af[i*K+k]
				if ta {
					av = af[k*M+i]
				}
				bv := bf[k*N+j]
				if tb {
					bv = bf[j*K+k]
				}
				s += float64(av) * float64(bv)
			}
			s *= alpha
			if c != nil {
				s += beta * c.at(i*cs[0]+j*cs[1])
			}
			y.F[i*N+j] = float32(s)
		}
	}
	return one(y)
}

func refMatMul(e *ev) ([]*Tensor, error) {
	a, err := e.need(0)
	if err != nil {
		return nil, err
	}
	b, err := e.need(1)
	if err != nil {
		return nil, err
	}
	as, bs := a.Shape, b.Shape
	if len(as) == 0 || len(bs) == 0 {
		return nil, fmt.Errorf("scalar operand")
	}
	if len(as) == 1 {
		as = []int64{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int64{bs[0], 1}
	}
	M, K := as[len(as)-2], as[len(as)-1]
	K2, N := bs[len(bs)-2], bs[len(bs)-1]
	if K != K2 {
		return nil, fmt.Errorf("A %v and B %v do not multiply", a.Shape, b.Shape)
	}
	batch, err := broadcastShape(as[:len(as)-2], bs[:len(bs)-2])
	if err != nil {
		return nil, err
	}
	oshape := append(append([]int64{}, batch...), M, N)
	final := append([]int64{}, batch...)
	if len(a.Shape) > 1 {
		final = append(final, M)
	}
	if len(b.Shape) > 1 {
		final = append(final, N)
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, final))
	}
	if err := checkFoldWork(e, float64(numel(batch))*float64(M)*float64(K)*float64(N)); err != nil {
		return nil, err
	}
	sa := bstrides(as[:len(as)-2], batch)
	sb := bstrides(bs[:len(bs)-2], batch)
	for i := range sa {
		sa[i] *= M * K
		sb[i] *= K * N
	}
	y := NewFloat(oshape, nil)
	af, bf := a.floats(), b.floats()
	nb := numel(batch)
	idx := make([]int64, len(batch))
	for bi := int64(0); bi < nb; bi++ {
		rem := bi
		var oa, ob int64
		for d := len(batch) - 1; d >= 0; d-- {
			idx[d] = rem % batch[d]
			rem /= batch[d]
			oa += idx[d] * sa[d]
			ob += idx[d] * sb[d]
		}
		for i := int64(0); i < M; i++ {
			for j := int64(0); j < N; j++ {
				var s float64
				for k := int64(0); k < K; k++ {
					s += float64(af[oa+i*K+k]) * float64(bf[ob+k*N+j])
				}
				y.F[(bi*M+i)*N+j] = float32(s)
			}
		}
	}
	y.Shape = final
	return one(y)
}

// ---- normalization ----------------------------------------------------------

func refBatchNorm(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) < 2 {
		return nil, fmt.Errorf("X %v: rank < 2", x.Shape)
	}
	for i := 1; i <= 4; i++ {
		t, err := e.need(i)
		if err != nil {
			return nil, err
		}
		if t.Len() != x.Shape[1] {
			return nil, fmt.Errorf("parameter %d has %d values for %d channels", i, t.Len(), x.Shape[1])
		}
	}
	if len(e.n.Outputs) > 1 {
		for _, o := range e.n.Outputs[1:] {
			if o != "" {
				return nil, fmt.Errorf("training-mode outputs are not supported")
			}
		}
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, x.Shape))
	}
	eps := float64(e.n.AttrFloat("epsilon", 1e-5))
	C := x.Shape[1]
	inner := numel(x.Shape[2:])
	y := NewFloat(x.Shape, nil)
	sc, bi, mu, va := e.ins[1], e.ins[2], e.ins[3], e.ins[4]
	for i := range y.F {
		c := int64(i) / inner % C
		v := (float64(x.F[i]) - mu.at(c)) / math.Sqrt(va.at(c)+eps)
		y.F[i] = float32(v*sc.at(c) + bi.at(c))
	}
	return one(y)
}

func refLayerNorm(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	axis, err := normAxis(e.n.AttrInt("axis", -1), int64(len(x.Shape)))
	if err != nil {
		return nil, err
	}
	for _, o := range e.n.Outputs[1:] {
		if o != "" {
			return nil, fmt.Errorf("Mean / InvStdDev outputs are not supported")
		}
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, x.Shape))
	}
	eps := float64(e.n.AttrFloat("epsilon", 1e-5))
	cols := numel(x.Shape[axis:])
	rows := x.Len() / cols
	norm := x.Shape[axis:]
	var sc, bi []int64
	if t := e.in(1); t != nil {
		sc = bstrides(t.Shape, norm)
	}
	if t := e.in(2); t != nil {
		bi = bstrides(t.Shape, norm)
	}
	y := NewFloat(x.Shape, nil)
	idx := make([]int64, len(norm))
	for r := int64(0); r < rows; r++ {
		row := x.F[r*cols : (r+1)*cols]
		var m, v float64
		for _, f := range row {
			m += float64(f)
		}
		m /= float64(cols)
		for _, f := range row {
			v += (float64(f) - m) * (float64(f) - m)
		}
		v /= float64(cols)
		rs := 1 / math.Sqrt(v+eps)
		for c := int64(0); c < cols; c++ {
			z := (float64(row[c]) - m) * rs
			unravel(c, norm, idx)
			if sc != nil {
				z *= e.ins[1].at(dot(idx, sc))
			}
			if bi != nil {
				z += e.ins[2].at(dot(idx, bi))
			}
			y.F[r*cols+c] = float32(z)
		}
	}
	return one(y)
}

func unravel(i int64, shape, idx []int64) {
	for d := len(shape) - 1; d >= 0; d-- {
		idx[d] = i % shape[d]
		i /= shape[d]
	}
}

func dot(a, b []int64) int64 {
	var s int64
	for i := range a {
		s += a[i] * b[i]
	}
	return s
}

func refSoftmax(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	def := int64(-1)
	if e.opset < 13 {
		def = 1
	}
	axis, err := normAxis(e.n.AttrInt("axis", def), r)
	if err != nil {
		return nil, err
	}
	if !e.allKnown() {
		return one(shapeOnly(graph.Float32, x.Shape))
	}
	outer, n, inner := softmaxDims(x.Shape, axis, e.opset)
	lg := e.n.Op == "LogSoftmax"
	y := NewFloat(x.Shape, nil)
	for o := int64(0); o < outer; o++ {
		for i := int64(0); i < inner; i++ {
			base := o*n*inner + i
			m := math.Inf(-1)
			for j := int64(0); j < n; j++ {
				m = math.Max(m, float64(x.F[base+j*inner]))
			}
			var s float64
			for j := int64(0); j < n; j++ {
				s += math.Exp(float64(x.F[base+j*inner]) - m)
			}
			for j := int64(0); j < n; j++ {
				v := float64(x.F[base+j*inner]) - m
				if lg {
					y.F[base+j*inner] = float32(v - math.Log(s))
				} else {
					y.F[base+j*inner] = float32(math.Exp(v) / s)
				}
			}
		}
	}
	return one(y)
}

// softmaxDims views shape as [outer][n][inner] for a softmax over axis
// (opset < 13: coerced to 2-D at axis).
func softmaxDims(shape []int64, axis, opset int64) (outer, n, inner int64) {
	outer = numel(shape[:axis])
	if opset < 13 {
		return outer, numel(shape[axis:]), 1
	}
	return outer, shape[axis], numel(shape[axis+1:])
}

// ---- pooling -----------------------------------------------------------------

func refPool(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) < 3 || len(x.Shape) > 5 {
		return nil, fmt.Errorf("only 1-D, 2-D and 3-D pooling: X %v", x.Shape)
	}
	for _, o := range e.n.Outputs[1:] {
		if o != "" {
			return nil, fmt.Errorf("the Indices output is not supported")
		}
	}
	k := e.n.AttrInts("kernel_shape", nil)
	if len(k) != len(x.Shape)-2 {
		return nil, fmt.Errorf("kernel_shape %v for X %v", k, x.Shape)
	}
	g, err := convGeom(e.n, x.Shape[2:], k, true)
	if err != nil {
		return nil, err
	}
	oshape := append([]int64{x.Shape[0], x.Shape[1]}, g.out...)
	if !e.allKnown() {
		return one(shapeOnly(x.DType, oshape))
	}
	var yf []float32
	if len(x.Shape) == 5 {
		p1, p2 := pool3dParams(x.Shape, g, e.n)
		yf = poolPlanes(p2, poolPlanes(p1, x.floats()))
	} else {
		yf = poolPlanes(poolParams(x.Shape, g, e.n), x.floats())
	}
	y := NewFloat(oshape, yf)
	if !x.IsFloat() {
		yi := NewInt(oshape, nil)
		yi.DType = x.DType
		for i, v := range y.F {
			yi.I[i] = int64(v)
		}
		return one(yi)
	}
	return one(y)
}

// poolPlanes is the POOL kernel's arithmetic over p[0] planes of xf (the
// layout of poolParams), in float64 per window.
func poolPlanes(p [17]int64, xf []float32) []float32 {
	H, W, OH, OW, KH, KW := p[1], p[2], p[3], p[4], p[5], p[6]
	SH, SW, PT, PL, DH, DW, avg, incl, PB, PR := p[7], p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15], p[16]
	y := make([]float32, p[0]*OH*OW)
	for pl := int64(0); pl < p[0]; pl++ {
		xs := xf[pl*H*W:]
		for oh := int64(0); oh < OH; oh++ {
			for ow := int64(0); ow < OW; ow++ {
				m := math.Inf(-1)
				var s float64
				var cnt int64
				for kh := int64(0); kh < KH; kh++ {
					ih := oh*SH - PT + kh*DH
					if ih < 0 || ih >= H {
						continue
					}
					for kw := int64(0); kw < KW; kw++ {
						iw := ow*SW - PL + kw*DW
						if iw < 0 || iw >= W {
							continue
						}
						v := float64(xs[ih*W+iw])
						m = math.Max(m, v)
						s += v
						cnt++
					}
				}
				var out float64
				if avg == 0 {
					out = m
					if cnt == 0 {
						out = 0
					}
				} else {
					if incl != 0 {
						he := min(oh*SH-PT+KH, H+PB)
						we := min(ow*SW-PL+KW, W+PR)
						cnt = (he - (oh*SH - PT)) * (we - (ow*SW - PL))
					}
					if cnt > 0 {
						out = s / float64(cnt)
					}
				}
				y[(pl*OH+oh)*OW+ow] = float32(out)
			}
		}
	}
	return y
}

// poolParams lays out the POOL kernel's parameters (1-D pools become H=1).
func poolParams(xs []int64, g geom, n *graph.Node) [17]int64 {
	var p [17]int64
	p[0] = xs[0] * xs[1]
	if len(g.out) == 2 {
		p[1], p[2], p[3], p[4], p[5], p[6] = xs[2], xs[3], g.out[0], g.out[1], g.k[0], g.k[1]
		p[7], p[8], p[9], p[10], p[11], p[12] = g.s[0], g.s[1], g.pb[0], g.pb[1], g.d[0], g.d[1]
		p[15], p[16] = g.pe[0], g.pe[1]
	} else {
		p[1], p[2], p[3], p[4], p[5], p[6] = 1, xs[2], 1, g.out[0], 1, g.k[0]
		p[7], p[8], p[9], p[10], p[11], p[12] = 1, g.s[0], 0, g.pb[0], 1, g.d[0]
		p[15], p[16] = 0, g.pe[0]
	}
	if n.Op == "AveragePool" {
		p[13] = 1
		p[14] = n.AttrInt("count_include_pad", 0)
	}
	return p
}

// pool3dParams splits a 3-D pool into two POOL kernels: the first pools
// (H, W) of every depth slice (planes N*C*D), the second pools depth over
// planes N*C whose rows are the depth slices and whose columns are the
// OH*OW pooled positions (window KD x 1). Max is separable; so is
// average, whose window count is the product of the per-axis counts,
// with or without the padding. The second kernel sums the first's
// averages, so its rounding differs from one sum over the whole window.
func pool3dParams(xs []int64, g geom, n *graph.Node) (p1, p2 [17]int64) {
	p1[0] = xs[0] * xs[1] * xs[2]
	p1[1], p1[2], p1[3], p1[4], p1[5], p1[6] = xs[3], xs[4], g.out[1], g.out[2], g.k[1], g.k[2]
	p1[7], p1[8], p1[9], p1[10], p1[11], p1[12] = g.s[1], g.s[2], g.pb[1], g.pb[2], g.d[1], g.d[2]
	p1[15], p1[16] = g.pe[1], g.pe[2]
	p2[0] = xs[0] * xs[1]
	p2[1], p2[2], p2[3], p2[4], p2[5], p2[6] = xs[2], g.out[1]*g.out[2], g.out[0], g.out[1]*g.out[2], g.k[0], 1
	p2[7], p2[8], p2[9], p2[10], p2[11], p2[12] = g.s[0], 1, g.pb[0], 0, g.d[0], 1
	p2[15], p2[16] = g.pe[0], 0
	if n.Op == "AveragePool" {
		p1[13], p2[13] = 1, 1
		p1[14] = n.AttrInt("count_include_pad", 0)
		p2[14] = p1[14]
	}
	return p1, p2
}

func refGlobalPool(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if len(x.Shape) < 2 {
		return nil, fmt.Errorf("X %v: rank < 2", x.Shape)
	}
	oshape := []int64{x.Shape[0], x.Shape[1]}
	for range x.Shape[2:] {
		oshape = append(oshape, 1)
	}
	if !e.allKnown() {
		return one(shapeOnly(x.DType, oshape))
	}
	hw := numel(x.Shape[2:])
	y := NewFloat(oshape, nil)
	for p := range y.F {
		m := math.Inf(-1)
		var s float64
		for _, v := range x.F[int64(p)*hw : int64(p+1)*hw] {
			m = math.Max(m, float64(v))
			s += float64(v)
		}
		if e.n.Op == "GlobalMaxPool" {
			y.F[p] = float32(m)
		} else {
			y.F[p] = float32(s / float64(hw))
		}
	}
	return one(y)
}

// ---- elementwise ---------------------------------------------------------------

// actParams returns the activation code and parameters of a unary node (its
// constant inputs, for Clip, must be given).
func actParams(n *graph.Node, opset int64, ins []*Tensor) (int, float32, float32, error) {
	act, ok := unaryActs[n.Op]
	if !ok {
		return 0, 0, 0, fmt.Errorf("%s is not an activation", n.Op)
	}
	var a, b float32
	switch n.Op {
	case "Clip":
		a, b = float32(math.Inf(-1)), float32(math.Inf(1))
		if opset < 11 {
			a, b = n.AttrFloat("min", a), n.AttrFloat("max", b)
		}
		if len(ins) > 1 && ins[1] != nil {
			if !ins[1].known() || ins[1].Len() != 1 {
				return 0, 0, 0, fmt.Errorf("Clip min must be a constant scalar")
			}
			a = float32(ins[1].at(0))
		}
		if len(ins) > 2 && ins[2] != nil {
			if !ins[2].known() || ins[2].Len() != 1 {
				return 0, 0, 0, fmt.Errorf("Clip max must be a constant scalar")
			}
			b = float32(ins[2].at(0))
		}
		if a == 0 && math.IsInf(float64(b), 1) {
			return ActRelu, 0, 0, nil
		}
	case "LeakyRelu":
		a = n.AttrFloat("alpha", 0.01)
	case "Elu":
		a = n.AttrFloat("alpha", 1)
	case "HardSigmoid":
		a, b = n.AttrFloat("alpha", 0.2), n.AttrFloat("beta", 0.5)
	case "ThresholdedRelu":
		a = n.AttrFloat("alpha", 1)
	case "Shrink":
		a, b = n.AttrFloat("lambd", 0.5), n.AttrFloat("bias", 0)
	case "Gelu":
		switch n.AttrString("approximate", "none") {
		case "none":
		case "tanh":
			act = ActGeluTanh
		default:
			return 0, 0, 0, fmt.Errorf("Gelu approximate=%q", n.AttrString("approximate", ""))
		}
	}
	return act, a, b, nil
}

// actRef is the float64 reference of an activation.
func actRef(act int, x, a, b float64) float64 {
	switch act {
	case ActRelu:
		return math.Max(x, 0)
	case ActClip:
		return math.Min(math.Max(x, a), b)
	case ActSigmoid:
		return 1 / (1 + math.Exp(-x))
	case ActHardSigmoid:
		return math.Max(0, math.Min(1, a*x+b))
	case ActHardSwish:
		return x * math.Max(0, math.Min(1, x/6+0.5))
	case ActTanh:
		return math.Tanh(x)
	case ActGelu:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case ActGeluTanh:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case ActLeakyRelu:
		if x >= 0 {
			return x
		}
		return a * x
	case ActExp:
		return math.Exp(x)
	case ActLog:
		return math.Log(x)
	case ActNeg:
		return -x
	case ActAbs:
		return math.Abs(x)
	case ActSqrt:
		return math.Sqrt(x)
	case ActRecip:
		return 1 / x
	case ActErf:
		return math.Erf(x)
	case ActFloor:
		return math.Floor(x)
	case ActCeil:
		return math.Ceil(x)
	case ActPowC:
		return math.Pow(x, a)
	case ActAffine:
		return a*x + b
	case ActSoftplus:
		return math.Log1p(math.Exp(x))
	case ActElu:
		if x >= 0 {
			return x
		}
		return a * (math.Exp(x) - 1)
	case ActRound:
		return math.RoundToEven(x)
	case ActSin:
		return math.Sin(x)
	case ActCos:
		return math.Cos(x)
	case ActF16:
		return float64(RoundF16(float32(x)))
	case ActSinh:
		return math.Sinh(x)
	case ActAsinh:
		return math.Asinh(x)
	case ActAtanh:
		return math.Atanh(x)
	case ActAsin:
		return math.Asin(x)
	case ActAcos:
		return math.Acos(x)
	case ActAtan:
		return math.Atan(x)
	case ActSign:
		if x > 0 {
			return 1
		}
		if x < 0 {
			return -1
		}
		return x
	case ActThreshRelu:
		if x > a {
			return x
		}
		return 0
	case ActShrink:
		if x < -a {
			return x + b
		}
		if x > a {
			return x - b
		}
		return 0
	}
	return x
}

// RoundF16 rounds x to the nearest float16 value (ties to even), kept as
// a float32, as the kernels do (SK_ACT_F16): an infinity past 65504, NaN
// as it is.
func RoundF16(x float32) float32 {
	u := math.Float32bits(x)
	a := u & 0x7fffffff
	switch {
	case a >= 0x7f800000:
		return x
	case a >= 0x477ff000:
		return float32(math.Inf(int(1 - 2*int32(u>>31))))
	case a < 0x38800000:
		return float32(math.RoundToEven(float64(x)*16777216) / 16777216)
	}
	u += 0xfff + (u>>13)&1
	return math.Float32frombits(u &^ 0x1fff)
}

func refUnary(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	act, a, b, err := actParams(e.n, e.opset, e.ins)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, x.Shape))
	}
	if !x.IsFloat() {
		// integer Neg / Abs / Clip / Relu for shape arithmetic
		y := NewInt(x.Shape, nil)
		y.DType = x.DType
		for i, v := range x.I {
			y.I[i] = int64(actRef(act, float64(v), float64(a), float64(b)))
		}
		return one(y)
	}
	y := NewFloat(x.Shape, nil)
	for i, v := range x.F {
		y.F[i] = float32(actRef(act, float64(v), float64(a), float64(b)))
	}
	return one(y)
}

func binRef(op string, x, z float64) float64 {
	switch op {
	case "Add":
		return x + z
	case "Sub":
		return x - z
	case "Mul":
		return x * z
	case "Div":
		return x / z
	case "Pow":
		return math.Pow(x, z)
	case "Max":
		return math.Max(x, z)
	case "Min":
		return math.Min(x, z)
	case "PRelu":
		if x < 0 {
			return x * z
		}
		return x
	case "Equal":
		return b2f(x == z)
	case "Greater":
		return b2f(x > z)
	case "Less":
		return b2f(x < z)
	case "GreaterOrEqual":
		return b2f(x >= z)
	case "LessOrEqual":
		return b2f(x <= z)
	case "And":
		return b2f(x != 0 && z != 0)
	case "Or":
		return b2f(x != 0 || z != 0)
	case "Xor":
		return b2f((x != 0) != (z != 0))
	}
	return math.NaN()
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// refVariadic folds Max, Min, Sum and Mean over any number of inputs.
func refVariadic(e *ev) ([]*Tensor, error) {
	if len(e.ins) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	op := e.n.Op
	if op == "Sum" || op == "Mean" {
		op = "Add"
	}
	acc, err := e.need(0)
	if err != nil {
		return nil, err
	}
	acc = alias(acc, acc.Shape)
	for i := 1; i < len(e.ins); i++ {
		b, err := e.need(i)
		if err != nil {
			return nil, err
		}
		n := graph.Node{Op: op, Name: e.n.Name}
		out, err := refBinary(&ev{n: &n, opset: e.opset, ins: []*Tensor{acc, b}})
		if err != nil {
			return nil, err
		}
		acc = out[0]
	}
	if e.n.Op == "Mean" && acc.known() && acc.IsFloat() {
		y := NewFloat(acc.Shape, nil)
		for i, v := range acc.F {
			y.F[i] = v / float32(len(e.ins))
		}
		acc = y
	}
	return one(acc)
}

func refBinary(e *ev) ([]*Tensor, error) {
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
	dt := a.DType
	cmp := false
	switch e.n.Op {
	case "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor":
		dt, cmp = graph.Bool, true
	case "PRelu":
		if !eqShape(oshape, a.Shape) {
			return nil, fmt.Errorf("slope %v does not broadcast to X %v", b.Shape, a.Shape)
		}
	}
	if !e.allKnown() {
		return one(shapeOnly(dt, oshape))
	}
	sa, sb := bstrides(a.Shape, oshape), bstrides(b.Shape, oshape)
	n := numel(oshape)
	idx := make([]int64, len(oshape))
	var y *Tensor
	if isFloatType(dt) {
		y = NewFloat(oshape, nil)
	} else {
		y = NewInt(oshape, nil)
		y.DType = dt
	}
	intDiv := !a.IsFloat() && !cmp && e.n.Op == "Div"
	for i := int64(0); i < n; i++ {
		unravel(i, oshape, idx)
		x, z := a.at(dot(idx, sa)), b.at(dot(idx, sb))
		if y.F != nil {
			y.F[i] = float32(binRef(e.n.Op, x, z))
		} else if intDiv {
			if z == 0 {
				return nil, fmt.Errorf("integer division by zero")
			}
			y.I[i] = int64(x) / int64(z)
		} else {
			y.I[i] = int64(binRef(e.n.Op, x, z))
		}
	}
	return one(y)
}

func refWhere(e *ev) ([]*Tensor, error) {
	c, err := e.need(0)
	if err != nil {
		return nil, err
	}
	a, err := e.need(1)
	if err != nil {
		return nil, err
	}
	b, err := e.need(2)
	if err != nil {
		return nil, err
	}
	oshape, err := broadcastShape(c.Shape, a.Shape, b.Shape)
	if err != nil {
		return nil, err
	}
	if !e.allKnown() {
		return one(shapeOnly(a.DType, oshape))
	}
	sc, sa, sb := bstrides(c.Shape, oshape), bstrides(a.Shape, oshape), bstrides(b.Shape, oshape)
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
		src, j := b, dot(idx, sb)
		if c.at(dot(idx, sc)) != 0 {
			src, j = a, dot(idx, sa)
		}
		if y.F != nil {
			y.F[i] = float32(src.at(j))
		} else {
			y.I[i] = int64(src.at(j))
		}
	}
	return one(y)
}

func refNot(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(graph.Bool, x.Shape))
	}
	y := NewInt(x.Shape, nil)
	y.DType = graph.Bool
	for i := range y.I {
		y.I[i] = int64(b2f(x.at(int64(i)) == 0))
	}
	return one(y)
}

// ---- layout --------------------------------------------------------------------

// copyStrided copies the view (shape, strides, offset) of src into a new
// contiguous tensor.
func copyStrided(src *Tensor, shape, strides []int64, off int64) *Tensor {
	n := numel(shape)
	y := &Tensor{DType: src.DType, Shape: append([]int64{}, shape...)}
	if src.IsFloat() {
		y.F = make([]float32, n)
	} else {
		y.I = make([]int64, n)
	}
	idx := make([]int64, len(shape))
	for i := int64(0); i < n; i++ {
		unravel(i, shape, idx)
		j := off + dot(idx, strides)
		if y.F != nil {
			y.F[i] = src.F[j]
		} else {
			y.I[i] = src.I[j]
		}
	}
	return y
}

// alias returns x's data under a new shape.
func alias(x *Tensor, shape []int64) *Tensor {
	return &Tensor{DType: x.DType, Shape: shape, F: x.F, I: x.I}
}

func refIdentity(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	if e.n.Op == "Dropout" && len(e.n.Outputs) > 1 && e.n.Outputs[1] != "" {
		return nil, fmt.Errorf("the mask output is not supported")
	}
	return one(alias(x, x.Shape))
}

func refCast(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	to := graph.DType(e.n.AttrInt("to", int64(graph.Float32)))
	if e.n.Op == "CastLike" {
		// the loader made every CastLike whose target type it could read
		// (a graph input's or an initializer's) a Cast; the engine's own
		// values know float32 for every float type
		like, err := e.need(1)
		if err != nil {
			return nil, err
		}
		to = like.DType
	}
	if !x.known() {
		if intStorage(x.DType) && isFloatType(to) {
			// integer values already stored as float32 (int32 rounded
			// as this cast rounds)
			return one(shapeOnly(graph.Float32, x.Shape))
		}
		if isFloatType(to) != x.IsFloat() {
			// unsupported, not wrong: ONNX Runtime can serve the model
			return nil, &UnsupportedError{Op: "Cast", Node: e.n.Name,
				Why: fmt.Sprintf("runtime cast %s -> %s is not supported (float32 only)", x.DType, to)}
		}
		return one(shapeOnly(to, x.Shape))
	}
	y := &Tensor{DType: to, Shape: x.Shape}
	if isFloatType(to) {
		y.DType = graph.Float32
		y.F = x.floats()
		if to == graph.Float16 {
			y.F = append([]float32{}, y.F...)
			for i, v := range y.F {
				y.F[i] = RoundF16(v)
			}
		}
	} else {
		y.I = make([]int64, x.Len())
		for i := range y.I {
			v := x.at(int64(i))
			if to == graph.Bool {
				y.I[i] = int64(b2f(v != 0))
			} else {
				y.I[i] = int64(v)
			}
		}
	}
	return one(y)
}

func refConcat(e *ev) ([]*Tensor, error) {
	if len(e.ins) == 0 {
		return nil, fmt.Errorf("no inputs")
	}
	x0, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x0.Shape))
	axis, err := normAxis(e.n.AttrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	oshape := append([]int64{}, x0.Shape...)
	oshape[axis] = 0
	for i, t := range e.ins {
		if t == nil || int64(len(t.Shape)) != r {
			return nil, fmt.Errorf("input %d: rank mismatch", i)
		}
		for d := range t.Shape {
			if int64(d) != axis && t.Shape[d] != x0.Shape[d] {
				return nil, fmt.Errorf("input %d shape %v vs %v", i, t.Shape, x0.Shape)
			}
		}
		oshape[axis] += t.Shape[axis]
	}
	if !e.allKnown() {
		return one(shapeOnly(x0.DType, oshape))
	}
	outer, inner := numel(oshape[:axis]), numel(oshape[axis+1:])
	y := &Tensor{DType: x0.DType, Shape: oshape}
	if x0.IsFloat() {
		y.F = make([]float32, 0, numel(oshape))
	} else {
		y.I = make([]int64, 0, numel(oshape))
	}
	for o := int64(0); o < outer; o++ {
		for _, t := range e.ins {
			blk := t.Shape[axis] * inner
			if y.F != nil {
				y.F = append(y.F, t.floats()[o*blk:(o+1)*blk]...)
			} else {
				y.I = append(y.I, t.ints()[o*blk:(o+1)*blk]...)
			}
		}
	}
	return one(y)
}

func refReshape(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	var spec []int64
	if e.opset < 5 || e.n.Attr("shape") != nil {
		spec = e.n.AttrInts("shape", nil)
	} else {
		s, err := e.constIn(1, "shape")
		if err != nil {
			return nil, err
		}
		if s == nil {
			return nil, fmt.Errorf("shape input missing")
		}
		spec = s.ints()
	}
	shape, err := reshapeTo(x.Shape, spec, e.n.AttrInt("allowzero", 0) != 0)
	if err != nil {
		return nil, err
	}
	return one(alias(x, shape))
}

func reshapeTo(in, spec []int64, allowZero bool) ([]int64, error) {
	out := make([]int64, len(spec))
	infer := -1
	known := int64(1)
	for i, d := range spec {
		switch {
		case d == -1:
			if infer >= 0 {
				return nil, fmt.Errorf("shape %v has two -1", spec)
			}
			infer = i
			continue
		case d == 0 && !allowZero:
			if i >= len(in) {
				return nil, fmt.Errorf("shape %v: 0 at %d beyond input rank %d", spec, i, len(in))
			}
			d = in[i]
		case d < 0:
			return nil, fmt.Errorf("shape %v: bad dimension", spec)
		}
		out[i] = d
		known *= d
	}
	total := numel(in)
	if infer >= 0 {
		if known == 0 || total%known != 0 {
			return nil, fmt.Errorf("cannot reshape %v to %v", in, spec)
		}
		out[infer] = total / known
	} else if known != total {
		return nil, fmt.Errorf("cannot reshape %v (%d elements) to %v", in, total, spec)
	}
	return out, nil
}

func refFlatten(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	a := e.n.AttrInt("axis", 1)
	if a < 0 {
		a += r
	}
	if a < 0 || a > r {
		return nil, fmt.Errorf("axis %d for rank %d", a, r)
	}
	return one(alias(x, []int64{numel(x.Shape[:a]), numel(x.Shape[a:])}))
}

func refTranspose(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	perm, err := transposePerm(e.n, len(x.Shape))
	if err != nil {
		return nil, err
	}
	st := stridesOf(x.Shape)
	oshape := make([]int64, len(perm))
	ost := make([]int64, len(perm))
	for i, p := range perm {
		oshape[i] = x.Shape[p]
		ost[i] = st[p]
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	return one(copyStrided(x, oshape, ost, 0))
}

func transposePerm(n *graph.Node, r int) ([]int64, error) {
	perm := n.AttrInts("perm", nil)
	if perm == nil {
		perm = make([]int64, r)
		for i := range perm {
			perm[i] = int64(r - 1 - i)
		}
	}
	if len(perm) != r {
		return nil, fmt.Errorf("perm %v for rank %d", perm, r)
	}
	seen := make([]bool, r)
	for _, p := range perm {
		if p < 0 || p >= int64(r) || seen[p] {
			return nil, fmt.Errorf("bad perm %v", perm)
		}
		seen[p] = true
	}
	return perm, nil
}

func refShape(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	start, end := e.n.AttrInt("start", 0), e.n.AttrInt("end", r)
	if start < 0 {
		start += r
	}
	if end < 0 {
		end += r
	}
	start = max(0, min(start, r))
	end = max(start, min(end, r))
	return one(NewInt([]int64{end - start}, append([]int64{}, x.Shape[start:end]...)))
}

func refSize(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	return one(NewInt([]int64{}, []int64{x.Len()}))
}

func refGather(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	ix, err := e.constIn(1, "indices")
	if err != nil {
		return nil, err
	}
	if ix == nil {
		return nil, fmt.Errorf("indices missing")
	}
	r := int64(len(x.Shape))
	axis, err := normAxis(e.n.AttrInt("axis", 0), r)
	if err != nil {
		return nil, err
	}
	oshape := append(append(append([]int64{}, x.Shape[:axis]...), ix.Shape...), x.Shape[axis+1:]...)
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	outer, inner, al := numel(x.Shape[:axis]), numel(x.Shape[axis+1:]), x.Shape[axis]
	idx := ix.ints()
	y := &Tensor{DType: x.DType, Shape: oshape}
	for o := int64(0); o < outer; o++ {
		for _, v := range idx {
			if v < 0 {
				v += al
			}
			if v < 0 || v >= al {
				return nil, fmt.Errorf("index %d out of range %d", v, al)
			}
			base := (o*al + v) * inner
			if x.IsFloat() {
				y.F = append(y.F, x.F[base:base+inner]...)
			} else {
				y.I = append(y.I, x.I[base:base+inner]...)
			}
		}
	}
	if x.IsFloat() && y.F == nil {
		y.F = []float32{}
	}
	if !x.IsFloat() && y.I == nil {
		y.I = []int64{}
	}
	return one(y)
}

// axesOf reads axes from the attribute (old opsets) or input i.
func (e *ev) axesOf(i int) ([]int64, bool, error) {
	if a := e.n.Attr("axes"); a != nil {
		return a.Ints, true, nil
	}
	t, err := e.constIn(i, "axes")
	if err != nil {
		return nil, false, err
	}
	if t == nil {
		return nil, false, nil
	}
	return t.ints(), true, nil
}

func refUnsqueeze(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	axes, ok, err := e.axesOf(1)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("axes missing")
	}
	r := int64(len(x.Shape) + len(axes))
	mark := make([]bool, r)
	for _, a := range axes {
		a, err := normAxis(a, r)
		if err != nil {
			return nil, err
		}
		mark[a] = true
	}
	shape := make([]int64, 0, r)
	j := 0
	for i := int64(0); i < r; i++ {
		if mark[i] {
			shape = append(shape, 1)
		} else {
			if j >= len(x.Shape) {
				return nil, fmt.Errorf("bad axes %v", axes)
			}
			shape = append(shape, x.Shape[j])
			j++
		}
	}
	return one(alias(x, shape))
}

func refSqueeze(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	axes, ok, err := e.axesOf(1)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	drop := make([]bool, r)
	if !ok {
		for i, d := range x.Shape {
			drop[i] = d == 1
		}
	}
	for _, a := range axes {
		a, err := normAxis(a, r)
		if err != nil {
			return nil, err
		}
		if x.Shape[a] != 1 {
			return nil, fmt.Errorf("axis %d has size %d", a, x.Shape[a])
		}
		drop[a] = true
	}
	var shape []int64
	for i, d := range x.Shape {
		if !drop[i] {
			shape = append(shape, d)
		}
	}
	if shape == nil {
		shape = []int64{}
	}
	return one(alias(x, shape))
}

func refConstant(e *ev) ([]*Tensor, error) {
	n := e.n
	for _, a := range n.Attrs {
		switch a.Name {
		case "value":
			if a.T == nil {
				return nil, fmt.Errorf("value without a tensor")
			}
			return oneErr(FromGraph(a.T))
		case "value_float":
			return one(NewFloat([]int64{}, []float32{a.F}))
		case "value_floats":
			return one(NewFloat([]int64{int64(len(a.Floats))}, append([]float32{}, a.Floats...)))
		case "value_int":
			return one(NewInt([]int64{}, []int64{a.I}))
		case "value_ints":
			return one(NewInt([]int64{int64(len(a.Ints))}, append([]int64{}, a.Ints...)))
		}
	}
	return nil, fmt.Errorf("no supported value attribute (sparse and string constants are not supported)")
}

func oneErr(t *Tensor, err error) ([]*Tensor, error) {
	if err != nil {
		return nil, err
	}
	return one(t)
}

func refConstantOfShape(e *ev) ([]*Tensor, error) {
	s, err := e.constIn(0, "shape")
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("shape missing")
	}
	shape := append([]int64{}, s.ints()...)
	if err := checkValueShaped(shape, true); err != nil {
		return nil, err
	}
	y := NewFloat(shape, nil)
	if a := e.n.Attr("value"); a != nil && a.T != nil {
		v, err := FromGraph(a.T)
		if err != nil {
			return nil, err
		}
		if v.Len() != 1 {
			return nil, fmt.Errorf("value must hold one element")
		}
		if !v.IsFloat() {
			y = NewInt(shape, nil)
			y.DType = v.DType
			for i := range y.I {
				y.I[i] = v.I[0]
			}
			return one(y)
		}
		for i := range y.F {
			y.F[i] = v.F[0]
		}
	}
	return one(y)
}

func refRange(e *ev) ([]*Tensor, error) {
	var v [3]*Tensor
	for i := range v {
		t, err := e.constIn(i, "range bound")
		if err != nil {
			return nil, err
		}
		if t == nil || t.Len() != 1 {
			return nil, fmt.Errorf("input %d must be a scalar", i)
		}
		v[i] = t
	}
	start, limit, delta := v[0].at(0), v[1].at(0), v[2].at(0)
	if delta == 0 {
		return nil, fmt.Errorf("delta is 0")
	}
	nf := math.Max(math.Ceil((limit-start)/delta), 0)
	if !(nf <= maxFoldedElems) {
		return nil, fmt.Errorf("a range of %g values: more than %d", nf, maxFoldedElems)
	}
	n := int64(nf)
	if v[0].IsFloat() {
		y := NewFloat([]int64{n}, nil)
		for i := range y.F {
			y.F[i] = float32(start + float64(i)*delta)
		}
		return one(y)
	}
	y := NewInt([]int64{n}, nil)
	y.DType = v[0].DType
	for i := range y.I {
		y.I[i] = int64(start) + int64(i)*int64(delta)
	}
	return one(y)
}

// sliceView computes a Slice's output shape and the strides / offset of the
// view into x.
func sliceView(xs []int64, starts, ends, axes, steps []int64) ([]int64, []int64, int64, error) {
	r := int64(len(xs))
	shape := append([]int64{}, xs...)
	st := stridesOf(xs)
	strides := append([]int64{}, st...)
	var off int64
	if axes == nil {
		axes = make([]int64, len(starts))
		for i := range axes {
			axes[i] = int64(i)
		}
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || (steps != nil && len(steps) != len(starts)) {
		return nil, nil, 0, fmt.Errorf("starts %v ends %v axes %v steps %v differ in length", starts, ends, axes, steps)
	}
	for i, a := range axes {
		a, err := normAxis(a, r)
		if err != nil {
			return nil, nil, 0, err
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return nil, nil, 0, fmt.Errorf("step 0")
		}
		d := xs[a]
		s, en := starts[i], ends[i]
		if s < 0 {
			s += d
		}
		if en < 0 {
			en += d
		}
		if step > 0 {
			s = max(0, min(s, d))
			en = max(0, min(en, d))
		} else {
			s = max(-1, min(s, d-1))
			en = max(-1, min(en, d-1))
		}
		var n int64
		if step > 0 && en > s {
			n = (en - s + step - 1) / step
		} else if step < 0 && en < s {
			n = (s - en + (-step) - 1) / (-step)
		}
		shape[a] = n
		strides[a] = st[a] * step
		if n > 0 {
			off += s * st[a]
		}
	}
	return shape, strides, off, nil
}

func (e *ev) sliceArgs() (starts, ends, axes, steps []int64, err error) {
	if e.opset < 10 {
		return e.n.AttrInts("starts", nil), e.n.AttrInts("ends", nil), e.n.AttrInts("axes", nil), nil, nil
	}
	var t [4]*Tensor
	for i := range t {
		t[i], err = e.constIn(i+1, "slice parameter")
		if err != nil {
			return
		}
	}
	if t[0] == nil || t[1] == nil {
		return nil, nil, nil, nil, fmt.Errorf("starts / ends missing")
	}
	starts, ends = t[0].ints(), t[1].ints()
	if t[2] != nil {
		axes = t[2].ints()
	}
	if t[3] != nil {
		steps = t[3].ints()
	}
	return
}

func refSlice(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	starts, ends, axes, steps, err := e.sliceArgs()
	if err != nil {
		return nil, err
	}
	shape, strides, off, err := sliceView(x.Shape, starts, ends, axes, steps)
	if err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, shape))
	}
	return one(copyStrided(x, shape, strides, off))
}

// splitSizes returns the sizes of Split's outputs along axis.
func (e *ev) splitSizes(dim int64) ([]int64, error) {
	n := int64(len(e.n.Outputs))
	var split []int64
	if a := e.n.Attr("split"); a != nil {
		split = a.Ints
	} else if t, err := e.constIn(1, "split"); err != nil {
		return nil, err
	} else if t != nil {
		split = t.ints()
	}
	if split == nil {
		if k := e.n.AttrInt("num_outputs", 0); k > 0 {
			n = k
		}
		per := (dim + n - 1) / n
		for i := int64(0); i < n; i++ {
			split = append(split, max(0, min(per, dim-i*per)))
		}
	}
	var s int64
	for _, v := range split {
		s += v
	}
	if s != dim || int64(len(split)) != int64(len(e.n.Outputs)) {
		return nil, fmt.Errorf("split %v does not cover %d in %d outputs", split, dim, len(e.n.Outputs))
	}
	return split, nil
}

func refSplit(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	axis, err := normAxis(e.n.AttrInt("axis", 0), int64(len(x.Shape)))
	if err != nil {
		return nil, err
	}
	sizes, err := e.splitSizes(x.Shape[axis])
	if err != nil {
		return nil, err
	}
	var outs []*Tensor
	var start int64
	for _, sz := range sizes {
		shape, strides, off, err := sliceView(x.Shape, []int64{start}, []int64{start + sz}, []int64{axis}, nil)
		if err != nil {
			return nil, err
		}
		if x.known() {
			outs = append(outs, copyStrided(x, shape, strides, off))
		} else {
			outs = append(outs, shapeOnly(x.DType, shape))
		}
		start += sz
	}
	return outs, nil
}

func refExpand(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	s, err := e.constIn(1, "shape")
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, fmt.Errorf("shape missing")
	}
	oshape, err := broadcastShape(x.Shape, s.ints())
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped(oshape, x.known()); err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	return one(copyStrided(x, oshape, bstrides(x.Shape, oshape), 0))
}

// reduceAxes returns the sorted, normalized axes of a reduction (nil: all).
func (e *ev) reduceAxes(r int64) ([]int64, error) {
	axes, ok, err := e.axesOf(1)
	if err != nil {
		return nil, err
	}
	if !ok || len(axes) == 0 {
		if e.n.AttrInt("noop_with_empty_axes", 0) != 0 {
			return []int64{}, nil
		}
		axes = make([]int64, r)
		for i := range axes {
			axes[i] = int64(i)
		}
		return axes, nil
	}
	out := make([]int64, 0, len(axes))
	seen := map[int64]bool{}
	for _, a := range axes {
		a, err := normAxis(a, r)
		if err != nil {
			return nil, err
		}
		if !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j] < out[j-1]; j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out, nil
}

func refReduce(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	r := int64(len(x.Shape))
	axes, err := e.reduceAxes(r)
	if err != nil {
		return nil, err
	}
	keep := e.n.AttrInt("keepdims", 1) != 0
	red := make([]bool, r)
	for _, a := range axes {
		red[a] = true
	}
	var oshape, full []int64
	for i, d := range x.Shape {
		if red[i] {
			full = append(full, 1)
			if keep {
				oshape = append(oshape, 1)
			}
		} else {
			full = append(full, d)
			oshape = append(oshape, d)
		}
	}
	if oshape == nil {
		oshape = []int64{}
	}
	if !x.known() {
		return one(shapeOnly(x.DType, oshape))
	}
	mode := reduceOps[e.n.Op]
	n := numel(full)
	acc := make([]float64, n)
	cnt := make([]int64, n)
	for i := range acc {
		switch mode {
		case RedMax:
			acc[i] = math.Inf(-1)
		case RedMin:
			acc[i] = math.Inf(1)
		case RedProd:
			acc[i] = 1
		}
	}
	ost := bstrides(full, x.Shape)
	idx := make([]int64, r)
	for i := int64(0); i < x.Len(); i++ {
		unravel(i, x.Shape, idx)
		j := dot(idx, ost)
		v := x.at(i)
		switch mode {
		case RedMax:
			acc[j] = math.Max(acc[j], v)
		case RedMin:
			acc[j] = math.Min(acc[j], v)
		case RedProd:
			acc[j] *= v
		case RedSumSq, RedL2:
			acc[j] += v * v
		default:
			acc[j] += v
		}
		cnt[j]++
	}
	var y *Tensor
	if x.IsFloat() {
		y = NewFloat(oshape, nil)
	} else {
		y = NewInt(oshape, nil)
		y.DType = x.DType
	}
	for j := range acc {
		v := acc[j]
		switch mode {
		case RedMean:
			v /= float64(cnt[j])
		case RedL2:
			v = math.Sqrt(v)
		}
		if y.F != nil {
			y.F[j] = float32(v)
		} else {
			y.I[j] = int64(v)
		}
	}
	return one(y)
}

// ---- resize ---------------------------------------------------------------------

// resizeSpec is a parsed Resize / Upsample: output shape, per-axis scales
// used by the coordinate transform, and the kernel's mode codes.
// maxRoi bounds tf_crop_and_resize's roi values (fractions of the input).
const maxRoi = 1e6

type resizeSpec struct {
	out            []int64
	scaleH, scaleW float32
	mode, coord    int64
	nearest        int64
	cubicA         float32
	exclude        int64
	// tf_crop_and_resize (coord 5): the crop's start and end along H and
	// W (fractions of the input), and the value of an output whose
	// source lies outside the input
	roi    [4]float32 // h start, h end, w start, w end
	extrap float32
	// depth (rank 5): the third-last dimension is resized too, as a
	// second pass over (D, OH*OW) with scale 1 along the second axis (the
	// modes are separable); its scale and crop
	depth  bool
	scaleD float32
	roiD   [2]float32
}

func (e *ev) resizeSpec(x *Tensor) (resizeSpec, error) {
	var rs resizeSpec
	r := len(x.Shape)
	if r < 3 {
		return rs, fmt.Errorf("X %v: rank < 3", x.Shape)
	}
	var scales []float32
	var sizes []int64
	switch {
	case e.n.Op == "Upsample" && e.n.Attr("scales") != nil:
		scales = attrFloats(e.n, "scales")
	case e.n.Op == "Upsample" || (e.n.Op == "Resize" && e.opset < 11):
		t, err := e.constIn(1, "scales")
		if err != nil {
			return rs, err
		}
		if t != nil {
			scales = t.floats()
		}
	default:
		t, err := e.constIn(2, "scales")
		if err != nil {
			return rs, err
		}
		if t != nil && t.Len() > 0 {
			scales = t.floats()
		}
		s, err := e.constIn(3, "sizes")
		if err != nil {
			return rs, err
		}
		if s != nil && s.Len() > 0 {
			sizes = s.ints()
		}
	}
	if e.n.AttrInt("antialias", 0) != 0 {
		return rs, fmt.Errorf("antialias is not supported")
	}
	// opset 18: scales, sizes and roi name only the axes listed
	if axes := e.n.AttrInts("axes", nil); axes != nil {
		var err error
		if scales, sizes, err = resizeOnAxes(x.Shape, axes, scales, sizes); err != nil {
			return rs, err
		}
	}
	switch p := e.n.AttrString("keep_aspect_ratio_policy", "stretch"); p {
	case "stretch":
	case "not_larger", "not_smaller":
		if sizes == nil {
			break // only sizes are adjusted
		}
		// one scale for every resized axis: the smallest (the output fits
		// in sizes) or the largest (it covers them); the others keep theirs
		axes := e.n.AttrInts("axes", nil)
		if axes == nil {
			for i := range x.Shape {
				axes = append(axes, int64(i))
			}
		}
		sc := 0.0
		for j, a := range axes {
			a = (a + int64(r)) % int64(r)
			if sizes[a] < 1 || x.Shape[a] < 1 {
				return rs, fmt.Errorf("keep_aspect_ratio_policy %q with sizes %v of input %v", p, sizes, x.Shape)
			}
			v := float64(sizes[a]) / float64(x.Shape[a])
			if j == 0 || (p == "not_larger" && v < sc) || (p == "not_smaller" && v > sc) {
				sc = v
			}
		}
		scales = make([]float32, r)
		for i := range scales {
			scales[i] = 1
		}
		for _, a := range axes {
			a = (a + int64(r)) % int64(r)
			scales[a] = float32(sc)
			sizes[a] = int64(math.Round(sc * float64(x.Shape[a])))
		}
	default:
		return rs, fmt.Errorf("keep_aspect_ratio_policy %q is not supported", p)
	}
	crop := e.n.Op == "Resize" && e.opset >= 11 &&
		e.n.AttrString("coordinate_transformation_mode", "half_pixel") == "tf_crop_and_resize"
	roi := make([]float32, 2*r)
	for i := r; i < 2*r; i++ {
		roi[i] = 1
	}
	if crop {
		t, err := e.constIn(1, "roi")
		if err != nil {
			return rs, err
		}
		axes := e.n.AttrInts("axes", nil)
		if axes == nil {
			for i := range r {
				axes = append(axes, int64(i))
			}
		}
		if t == nil || t.Len() != int64(2*len(axes)) {
			return rs, fmt.Errorf("tf_crop_and_resize needs a roi of %d values", 2*len(axes))
		}
		for j, a := range axes {
			a = (a + int64(r)) % int64(r)
			roi[a], roi[int64(r)+a] = t.floats()[j], t.floats()[len(axes)+j]
		}
		for _, v := range roi {
			// finite and moderate: every source coordinate is a number
			// (the kernels compare it with the input's extent)
			if !(math.Abs(float64(v)) <= maxRoi) {
				return rs, fmt.Errorf("roi %v: values must be finite, at most %g in magnitude", roi, float64(maxRoi))
			}
		}
		for i := 0; i < r-2; i++ {
			if (roi[i] != 0 || roi[r+i] != 1) && !(r == 5 && i == 2) {
				return rs, fmt.Errorf("roi %v crops dimension %d: only the last three dimensions of a 5-D input, the last two otherwise", roi, i)
			}
		}
		rs.extrap = e.n.AttrFloat("extrapolation_value", 0)
	}
	rs.roi = [4]float32{0, 1, roi[r-1], roi[2*r-1]}
	if r >= 4 {
		rs.roi[0], rs.roi[1] = roi[r-2], roi[2*r-2]
	}
	rs.out = append([]int64{}, x.Shape...)
	sc := make([]float32, r)
	switch {
	case sizes != nil:
		if len(sizes) != r {
			return rs, fmt.Errorf("sizes %v for rank %d", sizes, r)
		}
		copy(rs.out, sizes)
		for i := range sc {
			sc[i] = float32(sizes[i]) / float32(x.Shape[i])
			if scales != nil {
				sc[i] = scales[i] // keep_aspect_ratio_policy's one scale
			}
		}
	case scales != nil:
		if len(scales) != r {
			return rs, fmt.Errorf("scales %v for rank %d", scales, r)
		}
		copy(sc, scales)
		for i := range rs.out {
			// with a crop too: ONNX Runtime and ONNX's reference
			// implementation size the output from the input alone
			// (the operator's text multiplies by the crop's share)
			rs.out[i] = int64(math.Floor(float64(x.Shape[i]) * float64(scales[i])))
		}
	default:
		return rs, fmt.Errorf("neither scales nor sizes given")
	}
	for i := 0; i < r-2; i++ {
		if rs.out[i] != x.Shape[i] && !(r == 5 && i == 2) {
			return rs, fmt.Errorf("resizing dimension %d (%d -> %d): only the last three dimensions of a 5-D input, the last two otherwise",
				i, x.Shape[i], rs.out[i])
		}
	}
	if r == 5 && (rs.out[2] != x.Shape[2] || sc[2] != 1 || roi[2] != 0 || roi[r+2] != 1) {
		rs.depth, rs.scaleD, rs.roiD = true, sc[2], [2]float32{roi[2], roi[r+2]}
	}
	rs.scaleW = sc[r-1]
	rs.scaleH = 1
	if r >= 4 {
		rs.scaleH = sc[r-2]
	} else if x.Shape[r-2] != rs.out[r-2] {
		return rs, fmt.Errorf("rank-3 resize changes dimension 1")
	}
	mode := e.n.AttrString("mode", "nearest")
	switch strings.ToLower(mode) {
	case "nearest":
		rs.mode = 0
	case "linear", "bilinear":
		rs.mode = 1
	case "cubic", "bicubic":
		if rs.depth {
			return rs, fmt.Errorf("cubic resize of three dimensions is not supported")
		}
		rs.mode = 2
		rs.cubicA = e.n.AttrFloat("cubic_coeff_a", -0.75)
		rs.exclude = e.n.AttrInt("exclude_outside", 0)
	default:
		return rs, fmt.Errorf("mode %q is not supported (nearest, linear, cubic)", mode)
	}
	coord := e.n.AttrString("coordinate_transformation_mode", "half_pixel")
	if e.n.Op == "Upsample" || e.opset < 11 {
		coord = "asymmetric"
	}
	switch coord {
	case "half_pixel":
		rs.coord = 0
	case "asymmetric":
		rs.coord = 1
	case "align_corners":
		rs.coord = 2
	case "pytorch_half_pixel":
		rs.coord = 3
	case "tf_half_pixel_for_nn":
		rs.coord = 4
	case "tf_crop_and_resize":
		rs.coord = 5
	case "half_pixel_symmetric":
		rs.coord = 6
	default:
		return rs, fmt.Errorf("coordinate_transformation_mode %q is not supported", coord)
	}
	nm := e.n.AttrString("nearest_mode", "round_prefer_floor")
	if e.n.Op == "Upsample" || e.opset < 11 {
		nm = "floor"
	}
	switch nm {
	case "round_prefer_floor":
		rs.nearest = 0
	case "round_prefer_ceil":
		rs.nearest = 1
	case "floor":
		rs.nearest = 2
	case "ceil":
		rs.nearest = 3
	default:
		return rs, fmt.Errorf("nearest_mode %q is not supported", nm)
	}
	return rs, nil
}

// srcCoord maps an output coordinate to the input, in float32 like ONNX
// Runtime (the rounding of nearest modes depends on it).
func srcCoord(o int64, scale float64, in, out int64, coord int64, start, end float32) float64 {
	s := float32(scale)
	x := float32(o)
	switch coord {
	case 5:
		if out > 1 {
			return float64(start*float32(in-1) + x*(end-start)*float32(in-1)/float32(out-1))
		}
		return float64(0.5 * (start + end) * float32(in-1))
	case 1:
		return float64(x / s)
	case 2:
		if out == 1 {
			return 0
		}
		return float64(x * float32(in-1) / float32(out-1))
	case 3:
		if out > 1 {
			return float64((x+0.5)/s - 0.5)
		}
		return 0
	case 4:
		return float64((x + 0.5) / s)
	case 6:
		adj := float32(out) / (s * float32(in))
		off := float32(in) / 2 * (1 - adj)
		return float64(off + (x+0.5)/s - 0.5)
	}
	return float64((x+0.5)/s - 0.5)
}

func nearestIdx(x float64, mode int64, n int64) int64 {
	var i int64
	switch mode {
	case 1:
		i = int64(math.Floor(x + 0.5))
	case 2:
		i = int64(math.Floor(x))
	case 3:
		i = int64(math.Ceil(x))
	default:
		if x-math.Floor(x) == 0.5 {
			i = int64(math.Floor(x))
		} else {
			i = int64(math.Floor(x + 0.5))
		}
	}
	return max(0, min(i, n-1))
}

// cubicTaps is Keys' cubic convolution for coordinate x over [0, n):
// four source indices (edge replicated) and weights, out-of-range taps
// dropped and the rest renormalized when exclude is set.
func cubicTaps(x float64, n int64, a float64, exclude bool, idx []int64, w []float64) {
	fx := math.Floor(x)
	t := x - fx
	x0 := int64(fx)
	var sum float64
	for i, z := range [4]float64{t + 1, t, 1 - t, 2 - t} {
		var v float64
		if z <= 1 {
			v = ((a+2)*z-(a+3))*z*z + 1
		} else {
			v = ((a*z-5*a)*z+8*a)*z - 4*a
		}
		j := x0 - 1 + int64(i)
		if exclude && (j < 0 || j >= n) {
			v = 0
		}
		w[i] = v
		sum += v
		idx[i] = max(0, min(j, n-1))
	}
	if exclude && sum != 0 {
		for i := range w {
			w[i] /= sum
		}
	}
}

// resizeOnAxes widens Resize's scales or sizes given for axes only (opset
// 18) to every dimension: the others keep scale 1 and their size.
func resizeOnAxes(shape, axes []int64, scales []float32, sizes []int64) ([]float32, []int64, error) {
	r := int64(len(shape))
	n := len(scales)
	if sizes != nil {
		n = len(sizes)
	}
	if n != len(axes) {
		return nil, nil, fmt.Errorf("%d scales or sizes for axes %v", n, axes)
	}
	seen := make([]bool, r)
	var fs []float32
	var is []int64
	if scales != nil {
		fs = make([]float32, r)
		for i := range fs {
			fs[i] = 1
		}
	}
	if sizes != nil {
		is = append([]int64{}, shape...)
	}
	for j, a := range axes {
		if a < -r || a >= r {
			return nil, nil, fmt.Errorf("axis %d of rank %d", a, r)
		}
		a = (a + r) % r
		if seen[a] {
			return nil, nil, fmt.Errorf("axes %v repeat %d", axes, a)
		}
		seen[a] = true
		if fs != nil {
			fs[a] = scales[j]
		}
		if is != nil {
			is[a] = sizes[j]
		}
	}
	return fs, is, nil
}

func refResize(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	rs, err := e.resizeSpec(x)
	if err != nil {
		return nil, err
	}
	if err := checkValueShaped(rs.out, x.known()); err != nil {
		return nil, err
	}
	if !x.known() {
		return one(shapeOnly(x.DType, rs.out))
	}
	r := len(x.Shape)
	H, W := int64(1), x.Shape[r-1]
	OH, OW := int64(1), rs.out[r-1]
	if r >= 4 {
		H, OH = x.Shape[r-2], rs.out[r-2]
	}
	planes := x.Len() / (H * W)
	yf := resize2D(x.F, planes, H, W, OH, OW, rs, rs.scaleH, rs.scaleW, rs.roi)
	if rs.depth {
		// the depth: planes of (D, OH*OW), scale 1 along the second axis
		D, OD := x.Shape[2], rs.out[2]
		yf = resize2D(yf, planes/D, D, OH*OW, OD, OH*OW, rs, rs.scaleD, 1, [4]float32{rs.roiD[0], rs.roiD[1], 0, 1})
	}
	return one(NewFloat(rs.out, yf))
}

// resize2D resizes planes of H x W values of x to OH x OW with rs's mode,
// coordinates and extrapolation, at the scales and crop given.
func resize2D(x []float32, planes, H, W, OH, OW int64, rs resizeSpec, scaleH, scaleW float32, roi [4]float32) []float32 {
	y := make([]float32, planes*OH*OW)
	for p := int64(0); p < planes; p++ {
		for oh := int64(0); oh < OH; oh++ {
			fy := srcCoord(oh, float64(scaleH), H, OH, rs.coord, roi[0], roi[1])
			for ow := int64(0); ow < OW; ow++ {
				fx := srcCoord(ow, float64(scaleW), W, OW, rs.coord, roi[2], roi[3])
				var v float64
				if rs.coord == 5 && (fy < 0 || fy > float64(H-1) || fx < 0 || fx > float64(W-1)) {
					v = float64(rs.extrap)
				} else if rs.mode == 2 {
					var yi, xi [4]int64
					var wy, wx [4]float64
					cubicTaps(fy, H, float64(rs.cubicA), rs.exclude != 0, yi[:], wy[:])
					cubicTaps(fx, W, float64(rs.cubicA), rs.exclude != 0, xi[:], wx[:])
					for i := 0; i < 4; i++ {
						for j := 0; j < 4; j++ {
							v += wy[i] * wx[j] * float64(x[(p*H+yi[i])*W+xi[j]])
						}
					}
				} else if rs.mode == 0 {
					v = float64(x[(p*H+nearestIdx(fy, rs.nearest, H))*W+nearestIdx(fx, rs.nearest, W)])
				} else {
					cy := math.Max(0, math.Min(fy, float64(H-1)))
					cx := math.Max(0, math.Min(fx, float64(W-1)))
					y0, x0 := int64(math.Floor(cy)), int64(math.Floor(cx))
					y1, x1 := min(y0+1, H-1), min(x0+1, W-1)
					wy, wx := cy-float64(y0), cx-float64(x0)
					at := func(yy, xx int64) float64 { return float64(x[(p*H+yy)*W+xx]) }
					a := at(y0, x0) + (at(y0, x1)-at(y0, x0))*wx
					b := at(y1, x0) + (at(y1, x1)-at(y1, x0))*wx
					v = a + (b-a)*wy
				}
				y[(p*OH+oh)*OW+ow] = float32(v)
			}
		}
	}
	return y
}

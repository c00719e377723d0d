// Package quantize turns a float32 ONNX graph into a statically quantised
// one in ONNX's operator form (QLinearConv, QLinearMatMul, QuantizeLinear,
// DequantizeLinear): 8-bit weights and activations with int32 sums, which
// sluice's cpu engine and ONNX Runtime both run natively.
//
// The recipe is the usual one for static post-training quantisation:
//
//   - BatchNormalization after a convolution is folded into its weights;
//   - Calibrate runs the float graph on sample inputs and records the range
//     of every activation a quantised operator reads or writes;
//   - Static replaces each convolution, and each MatMul by a constant
//     matrix, with its QLinear form: weights int8, symmetric, one scale per
//     output channel (convolutions) or per column (MatMul); activations
//     uint8, asymmetric, one scale per tensor from its calibrated range;
//     bias int32. A Relu or Clip(0, ...) that follows is absorbed into the
//     output's range. MaxPool runs on the uint8 tensor. Every other operator
//     stays float, with DequantizeLinear / QuantizeLinear where the two
//     forms meet.
//
// The quantised graph has the float graph's inputs and outputs. Static
// scales make every request's result independent of the others in its
// batch (dynamic quantisation would not: see libml/engine).
package quantize

import (
	"context"
	"fmt"
	"math"
	"slices"

	"sluice/libml/graph"
)

// Range is the span of values a tensor took in calibration.
type Range struct{ Min, Max float32 }

// RunFunc runs graph g on inputs and returns its outputs by name (a
// backend's RunGraph).
type RunFunc func(ctx context.Context, g *graph.Graph, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error)

// Stats counts what Static did.
type Stats struct {
	Convs, MatMuls, FusedActs, QPools, Adds, Quantize, Dequantize int
}

// FoldBatchNorm returns a copy of g in which every BatchNormalization that
// is the only reader of a convolution's output is folded into that
// convolution's weights and bias.
func FoldBatchNorm(g *graph.Graph) (*graph.Graph, error) {
	out := *g
	out.Initializers = slices.Clone(g.Initializers)
	readers := readerCount(g)
	producer := map[string]int{}
	for i, n := range g.Nodes {
		for _, o := range n.Outputs {
			producer[o] = i
		}
	}
	drop := map[int]bool{}
	nodes := slices.Clone(g.Nodes)
	for i, bn := range g.Nodes {
		if bn.Op != "BatchNormalization" || len(bn.Inputs) < 5 || len(bn.Outputs) != 1 {
			continue
		}
		ci, ok := producer[bn.Inputs[0]]
		if !ok || g.Nodes[ci].Op != "Conv" || readers[bn.Inputs[0]] != 1 {
			continue
		}
		cv := nodes[ci]
		w := floatInit(&out, cv.Inputs[1])
		var p [4][]float32
		okAll := w != nil
		for j := range p {
			t := floatInit(&out, bn.Inputs[1+j])
			if t == nil {
				okAll = false
				break
			}
			p[j] = t.F32
		}
		if !okAll {
			continue
		}
		M := w.Dims[0]
		if int64(len(p[0])) != M {
			return nil, fmt.Errorf("quantize: BatchNormalization %q: %d channels, convolution %q has %d", bn.Name, len(p[0]), cv.Name, M)
		}
		eps := bn.AttrFloat("epsilon", 1e-5)
		per := int64(len(w.F32)) / M
		nw := make([]float32, len(w.F32))
		nb := make([]float32, M)
		var bias []float32
		if len(cv.Inputs) > 2 && cv.Inputs[2] != "" {
			if b := floatInit(&out, cv.Inputs[2]); b != nil {
				bias = b.F32
			}
		}
		for c := int64(0); c < M; c++ {
			k := float64(p[0][c]) / math.Sqrt(float64(p[3][c])+float64(eps))
			for j := c * per; j < (c+1)*per; j++ {
				nw[j] = float32(float64(w.F32[j]) * k)
			}
			b0 := 0.0
			if bias != nil {
				b0 = float64(bias[c])
			}
			nb[c] = float32((b0-float64(p[2][c]))*k + float64(p[1][c]))
		}
		wn, bnName := cv.Name+"_wfold", cv.Name+"_bfold"
		out.Initializers = append(out.Initializers,
			&graph.Tensor{Name: wn, DType: graph.Float32, Dims: w.Dims, F32: nw},
			&graph.Tensor{Name: bnName, DType: graph.Float32, Dims: []int64{M}, F32: nb})
		cv.Inputs = []string{cv.Inputs[0], wn, bnName}
		cv.Outputs = []string{bn.Outputs[0]}
		nodes[ci] = cv
		drop[i] = true
	}
	out.Nodes = nil
	for i, n := range nodes {
		if !drop[i] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return &out, nil
}

// floatInit returns initializer name when it is float32 data.
func floatInit(g *graph.Graph, name string) *graph.Tensor {
	t := g.Initializer(name)
	if t == nil || t.DType != graph.Float32 || t.F32 == nil {
		return nil
	}
	return t
}

func readerCount(g *graph.Graph) map[string]int {
	r := map[string]int{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			r[in]++
		}
	}
	for _, o := range g.Outputs {
		r[o.Name]++
	}
	return r
}

// plan is what Static will do with one node.
type plan struct {
	kind    string // "conv", "matmul", "add" or "" (stays float)
	act     int    // index of an absorbed Relu / Clip node, or -1
	out     string // the tensor the quantised node produces
	weights *graph.Tensor
}

// plans decides which nodes of g get quantised.
func plans(g *graph.Graph) []plan {
	readers := readerCount(g)
	ps := make([]plan, len(g.Nodes))
	byInput := map[string][]int{}
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			byInput[in] = append(byInput[in], i)
		}
	}
	for i, n := range g.Nodes {
		ps[i] = plan{act: -1}
		switch n.Op {
		case "Conv":
			w := floatInit(g, n.Inputs[1])
			if w == nil || len(w.Dims) < 3 || len(n.Outputs) != 1 {
				continue
			}
			ps[i] = plan{kind: "conv", act: -1, out: n.Outputs[0], weights: w}
		case "MatMul":
			w := floatInit(g, n.Inputs[1])
			if w == nil || len(w.Dims) != 2 {
				continue
			}
			ps[i] = plan{kind: "matmul", act: -1, out: n.Outputs[0], weights: w}
		case "Add":
			if len(n.Inputs) != 2 || len(n.Outputs) != 1 || g.Initializer(n.Inputs[0]) != nil || g.Initializer(n.Inputs[1]) != nil {
				continue
			}
			ps[i] = plan{kind: "add", act: -1, out: n.Outputs[0]}
		default:
			continue
		}
		// absorb a following Relu / Clip(0, hi) that is the only reader
		o := n.Outputs[0]
		if rs := byInput[o]; len(rs) == 1 && readers[o] == 1 {
			a := g.Nodes[rs[0]]
			if a.Op == "Relu" || (a.Op == "Clip" && clipFromZero(g, &a)) {
				ps[i].act = rs[0]
				ps[i].out = a.Outputs[0]
			}
		}
	}
	return ps
}

// clipFromZero reports whether Clip node n's lower bound is 0 (attribute
// or constant input).
func clipFromZero(g *graph.Graph, n *graph.Node) bool {
	if len(n.Inputs) > 1 && n.Inputs[1] != "" {
		t := floatInit(g, n.Inputs[1])
		return t != nil && len(t.F32) == 1 && t.F32[0] == 0
	}
	if a := n.Attr("min"); a != nil {
		return a.F == 0
	}
	return false
}

// Needs returns the tensors whose ranges Static needs, in graph order.
func Needs(g *graph.Graph) []string {
	ps := plans(g)
	seen := map[string]bool{}
	var out []string
	add := func(s string) {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	for i, p := range ps {
		switch p.kind {
		case "conv", "matmul":
			add(g.Nodes[i].Inputs[0])
			add(p.out)
		case "add":
			add(g.Nodes[i].Inputs[0])
			add(g.Nodes[i].Inputs[1])
			add(p.out)
		}
	}
	return out
}

// Calibrate runs g on every input set through run, with each tensor
// Needs names as an extra output, and returns their ranges.
func Calibrate(ctx context.Context, g *graph.Graph, run RunFunc, inputs []map[string]*graph.Tensor) (map[string]Range, error) {
	names := Needs(g)
	cg := *g
	cg.Outputs = slices.Clone(g.Outputs)
	have := map[string]bool{}
	for _, o := range g.Outputs {
		have[o.Name] = true
	}
	for _, n := range names {
		if !have[n] {
			cg.Outputs = append(cg.Outputs, graph.ValueInfo{Name: n, DType: graph.Float32})
		}
	}
	ranges := map[string]Range{}
	for i, in := range inputs {
		outs, err := run(ctx, &cg, in)
		if err != nil {
			return nil, fmt.Errorf("quantize: calibration input %d: %w", i, err)
		}
		for _, n := range names {
			t := outs[n]
			if t == nil {
				return nil, fmt.Errorf("quantize: calibration input %d: no value for %q", i, n)
			}
			r, ok := ranges[n]
			if !ok {
				r = Range{Min: float32(math.Inf(1)), Max: float32(math.Inf(-1))}
			}
			for _, v := range t.F32 {
				r.Min, r.Max = min(r.Min, v), max(r.Max, v)
			}
			ranges[n] = r
		}
	}
	return ranges, nil
}

// actParams are uint8 scale and zero point covering r (and 0).
func actParams(r Range) (scale float32, zp int64) {
	lo, hi := min(r.Min, 0), max(r.Max, 0)
	scale = (hi - lo) / 255
	if !(scale > 0) {
		return 1, 0
	}
	zp = int64(math.RoundToEven(float64(-lo / scale)))
	return scale, min(max(zp, 0), 255)
}

// quantizer builds the quantised graph.
type quantizer struct {
	src    *graph.Graph
	g      *graph.Graph
	ranges map[string]Range
	qname  map[string]string // float tensor -> its uint8 form
	qscale map[string]string // uint8 tensor -> its scale initializer
	qzero  map[string]string // uint8 tensor -> its zero point initializer
	float  map[string]bool   // float tensors available
	stats  Stats
}

// Static returns a quantised copy of g (BatchNormalization folded first)
// using the calibrated ranges.
func Static(g *graph.Graph, ranges map[string]Range) (*graph.Graph, Stats, error) {
	if g.Opset < 10 {
		return nil, Stats{}, fmt.Errorf("quantize: opset %d: QLinearConv needs opset 10 or later", g.Opset)
	}
	q := &quantizer{src: g, ranges: ranges, qname: map[string]string{}, qscale: map[string]string{},
		qzero: map[string]string{}, float: map[string]bool{}}
	out := *g
	out.Nodes = nil
	out.Initializers = slices.Clone(g.Initializers)
	q.g = &out
	for _, in := range g.Inputs {
		q.float[in.Name] = true
	}
	for _, t := range g.Initializers {
		q.float[t.Name] = true
	}
	ps := plans(g)
	skip := map[int]bool{}
	for _, p := range ps {
		if p.act >= 0 {
			skip[p.act] = true
		}
	}
	for i, n := range g.Nodes {
		if skip[i] {
			continue
		}
		var err error
		switch p := ps[i]; {
		case p.kind == "conv" || p.kind == "matmul":
			err = q.qlinear(n, p)
		case p.kind == "add" && (q.qname[n.Inputs[0]] != "" || q.qname[n.Inputs[1]] != ""):
			err = q.qadd(n, p, g.Nodes)
		case p.kind == "add" && p.act >= 0:
			// stays float: the activation absorbed into the plan runs too
			if err = q.floatNode(n); err == nil {
				err = q.floatNode(g.Nodes[p.act])
			}
		case n.Op == "MaxPool" && len(n.Outputs) == 1 && q.qname[n.Inputs[0]] != "" && !q.float[n.Inputs[0]]:
			q.pool(n)
		default:
			err = q.floatNode(n)
		}
		if err != nil {
			return nil, q.stats, err
		}
	}
	for _, o := range g.Outputs {
		if err := q.needFloat(o.Name); err != nil {
			return nil, q.stats, err
		}
	}
	return q.g, q.stats, nil
}

func (q *quantizer) addInit(t *graph.Tensor) string {
	q.g.Initializers = append(q.g.Initializers, t)
	return t.Name
}

func scalarF(name string, v float32) *graph.Tensor {
	return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
}

func scalarT(name string, dt graph.DType, v int64) *graph.Tensor {
	return &graph.Tensor{Name: name, DType: dt, Dims: []int64{}, I64: []int64{v}}
}

// needQuant makes sure float tensor name has a uint8 form, quantising it
// with its calibrated range when it has none, and returns it.
func (q *quantizer) needQuant(name string) (string, error) {
	if qn := q.qname[name]; qn != "" {
		return qn, nil
	}
	r, ok := q.ranges[name]
	if !ok {
		return "", fmt.Errorf("quantize: no calibrated range for %q", name)
	}
	s, z := actParams(r)
	qn := name + "_quant"
	q.setQuant(name, qn, s, z)
	q.g.Nodes = append(q.g.Nodes, graph.Node{Name: qn, Op: "QuantizeLinear",
		Inputs: []string{name, q.qscale[qn], q.qzero[qn]}, Outputs: []string{qn}})
	q.stats.Quantize++
	return qn, nil
}

// setQuant records qn as float tensor name's uint8 form with scale s and
// zero point z.
func (q *quantizer) setQuant(name, qn string, s float32, z int64) {
	q.qname[name] = qn
	q.qscale[qn] = q.addInit(scalarF(qn+"_scale", s))
	q.qzero[qn] = q.addInit(scalarT(qn+"_zero", graph.Uint8, z))
}

// needFloat makes sure tensor name exists as float, dequantising its
// uint8 form when that is all there is.
func (q *quantizer) needFloat(name string) error {
	if q.float[name] || name == "" {
		return nil
	}
	qn := q.qname[name]
	if qn == "" {
		return fmt.Errorf("quantize: tensor %q is not produced", name)
	}
	q.g.Nodes = append(q.g.Nodes, graph.Node{Name: name + "_dequant", Op: "DequantizeLinear",
		Inputs: []string{qn, q.qscale[qn], q.qzero[qn]}, Outputs: []string{name}})
	q.float[name] = true
	q.stats.Dequantize++
	return nil
}

func (q *quantizer) floatNode(n graph.Node) error {
	for _, in := range n.Inputs {
		if err := q.needFloat(in); err != nil {
			return err
		}
	}
	q.g.Nodes = append(q.g.Nodes, n)
	for _, o := range n.Outputs {
		q.float[o] = true
	}
	return nil
}

// qadd emits Add node n (and the activation p absorbed) on uint8 inputs
// and output, in the QDQ form: each input dequantised by a
// DequantizeLinear of its own, the float Add (and activation) on those,
// and a QuantizeLinear of the result with its calibrated range.
func (q *quantizer) qadd(n graph.Node, p plan, nodes []graph.Node) error {
	r, ok := q.ranges[p.out]
	if !ok {
		return fmt.Errorf("quantize: no calibrated range for %q", p.out)
	}
	base := n.Name
	if base == "" {
		base = p.out
	}
	add := n
	add.Inputs = make([]string, 2)
	for i, in := range n.Inputs {
		qn, err := q.needQuant(in)
		if err != nil {
			return err
		}
		add.Inputs[i] = fmt.Sprintf("%s_in%d_dequant", base, i)
		q.g.Nodes = append(q.g.Nodes, graph.Node{Name: add.Inputs[i], Op: "DequantizeLinear",
			Inputs: []string{qn, q.qscale[qn], q.qzero[qn]}, Outputs: []string{add.Inputs[i]}})
		q.stats.Dequantize++
	}
	sum := base + "_qsum"
	add.Outputs = []string{sum}
	q.g.Nodes = append(q.g.Nodes, add)
	if p.act >= 0 {
		a := nodes[p.act]
		a.Inputs = slices.Clone(a.Inputs)
		a.Inputs[0] = sum
		sum = base + "_qsum_act"
		a.Outputs = []string{sum}
		q.g.Nodes = append(q.g.Nodes, a)
		q.stats.FusedActs++
	}
	s, z := actParams(r)
	yq := p.out + "_quant"
	q.setQuant(p.out, yq, s, z)
	q.g.Nodes = append(q.g.Nodes, graph.Node{Name: yq, Op: "QuantizeLinear",
		Inputs: []string{sum, q.qscale[yq], q.qzero[yq]}, Outputs: []string{yq}})
	q.stats.Quantize++
	q.stats.Adds++
	return nil
}

func (q *quantizer) pool(n graph.Node) {
	in := q.qname[n.Inputs[0]]
	qn := n.Outputs[0] + "_quant"
	p := n
	p.Inputs = []string{in}
	p.Outputs = []string{qn}
	q.g.Nodes = append(q.g.Nodes, p)
	q.qname[n.Outputs[0]] = qn
	q.qscale[qn], q.qzero[qn] = q.qscale[in], q.qzero[in]
	q.stats.QPools++
}

// weightScales quantises w symmetrically to int8 with one scale per group
// of per consecutive values (one group: per tensor).
func weightScales(w []float32, groups int64, perGroup func(i int64) int64) ([]int64, []float32) {
	scales := make([]float32, groups)
	for i, v := range w {
		g := perGroup(int64(i))
		scales[g] = max(scales[g], float32(math.Abs(float64(v))))
	}
	for g := range scales {
		scales[g] /= 127
		if !(scales[g] > 0) {
			scales[g] = 1
		}
	}
	qw := make([]int64, len(w))
	for i, v := range w {
		qv := math.RoundToEven(float64(v / scales[perGroup(int64(i))]))
		qw[i] = int64(min(max(qv, -127), 127))
	}
	return qw, scales
}

func (q *quantizer) qlinear(n graph.Node, p plan) error {
	xq, err := q.needQuant(n.Inputs[0])
	if err != nil {
		return err
	}
	r, ok := q.ranges[p.out]
	if !ok {
		return fmt.Errorf("quantize: no calibrated range for %q", p.out)
	}
	ys, yz := actParams(r)
	w := p.weights
	var groups int64
	var perGroup func(int64) int64
	if p.kind == "conv" {
		groups = w.Dims[0]
		per := int64(len(w.F32)) / groups
		perGroup = func(i int64) int64 { return i / per }
	} else {
		groups = w.Dims[1]
		cols := groups
		perGroup = func(i int64) int64 { return i % cols }
	}
	qw, wsc := weightScales(w.F32, groups, perGroup)
	base := n.Name
	if base == "" {
		base = p.out
	}
	wn := q.addInit(&graph.Tensor{Name: base + "_wq", DType: graph.Int8, Dims: w.Dims, I64: qw})
	wsn := q.addInit(&graph.Tensor{Name: base + "_wscale", DType: graph.Float32, Dims: []int64{groups}, F32: wsc})
	wzn := q.addInit(&graph.Tensor{Name: base + "_wzero", DType: graph.Int8, Dims: []int64{groups}, I64: make([]int64, groups)})
	yq := p.out + "_quant"
	q.setQuant(p.out, yq, ys, yz)
	xs := q.g.Initializer(q.qscale[xq]).F32[0]
	inputs := []string{xq, q.qscale[xq], q.qzero[xq], wn, wsn, wzn, q.qscale[yq], q.qzero[yq]}
	node := graph.Node{Name: base + "_quant", Inputs: inputs, Outputs: []string{yq}}
	if p.kind == "conv" {
		node.Op = "QLinearConv"
		node.Attrs = n.Attrs
		if len(n.Inputs) > 2 && n.Inputs[2] != "" {
			b := floatInit(q.src, n.Inputs[2])
			if b == nil {
				return fmt.Errorf("quantize: convolution %q: bias is not a float32 constant", n.Name)
			}
			qb := make([]int64, len(b.F32))
			for c, v := range b.F32 {
				qb[c] = int64(math.RoundToEven(float64(v) / (float64(xs) * float64(wsc[c]))))
			}
			node.Inputs = append(node.Inputs, q.addInit(&graph.Tensor{Name: base + "_bq", DType: graph.Int32, Dims: []int64{int64(len(qb))}, I64: qb}))
		}
		q.stats.Convs++
	} else {
		node.Op = "QLinearMatMul"
		q.stats.MatMuls++
	}
	if p.act >= 0 {
		q.stats.FusedActs++
	}
	q.g.Nodes = append(q.g.Nodes, node)
	return nil
}

// Samples makes n calibration inputs for g's one input, at batch 1 (a
// dynamic leading dimension becomes 1; any other dynamic dimension is an
// error), input i filled by fill(first+i, its element count).
func Samples(g *graph.Graph, n int, first uint64, fill func(seed uint64, size int) []float32) ([]map[string]*graph.Tensor, error) {
	if len(g.Inputs) != 1 {
		return nil, fmt.Errorf("quantize: the model has %d inputs, want 1", len(g.Inputs))
	}
	vi := g.Inputs[0]
	dims := append([]int64{}, vi.Dims...)
	size := 1
	for i, d := range dims {
		if d < 1 {
			if i != 0 {
				return nil, fmt.Errorf("quantize: input %q has a dynamic dimension %d", vi.Name, i)
			}
			dims[0] = 1
		}
		size *= int(dims[i])
	}
	sets := make([]map[string]*graph.Tensor, n)
	for i := range sets {
		sets[i] = map[string]*graph.Tensor{vi.Name: {Name: vi.Name, DType: graph.Float32, Dims: dims,
			F32: fill(first+uint64(i), size)}}
	}
	return sets, nil
}

// Model quantises float graph g statically: FoldBatchNorm, Calibrate on
// inputs through run, then Static.
func Model(ctx context.Context, g *graph.Graph, run RunFunc, inputs []map[string]*graph.Tensor) (*graph.Graph, Stats, error) {
	g, err := FoldBatchNorm(g)
	if err != nil {
		return nil, Stats{}, err
	}
	ranges, err := Calibrate(ctx, g, run, inputs)
	if err != nil {
		return nil, Stats{}, err
	}
	return Static(g, ranges)
}

package engine

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"
	"testing"

	"sluice/libml/graph"
	"sluice/libml/zoo"
)

func ia(name string, v ...int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v}
}

func ramp(n int, scale float32) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = float32((i*7)%13-6) * scale
	}
	return out
}

// convBlock is x -> Conv -> BN -> Relu -> Conv -> BN -> Add(x) -> Relu.
func convBlock() *graph.Graph {
	g := &graph.Graph{Name: "block", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4, 8, 8}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}}}
	add := func(name string, dims []int64, data []float32) {
		g.Initializers = append(g.Initializers, &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: data})
	}
	for _, p := range []string{"1", "2"} {
		add("w"+p, []int64{4, 4, 3, 3}, ramp(144, 0.05))
		add("g"+p, []int64{4}, []float32{1, 0.5, 2, 1})
		add("b"+p, []int64{4}, []float32{0.1, 0, -0.1, 0.2})
		add("m"+p, []int64{4}, []float32{0, 0.1, 0.2, 0})
		add("v"+p, []int64{4}, []float32{1, 2, 0.5, 1})
	}
	pads := ia("pads", 1, 1, 1, 1)
	g.Nodes = []graph.Node{
		{Name: "c1", Op: "Conv", Inputs: []string{"x", "w1"}, Outputs: []string{"t1"}, Attrs: []graph.Attr{pads}},
		{Name: "bn1", Op: "BatchNormalization", Inputs: []string{"t1", "g1", "b1", "m1", "v1"}, Outputs: []string{"t2"}},
		{Name: "r1", Op: "Relu", Inputs: []string{"t2"}, Outputs: []string{"t3"}},
		{Name: "c2", Op: "Conv", Inputs: []string{"t3", "w2"}, Outputs: []string{"t4"}, Attrs: []graph.Attr{pads}},
		{Name: "bn2", Op: "BatchNormalization", Inputs: []string{"t4", "g2", "b2", "m2", "v2"}, Outputs: []string{"t5"}},
		{Name: "a", Op: "Add", Inputs: []string{"t5", "x"}, Outputs: []string{"t6"}},
		{Name: "r2", Op: "Relu", Inputs: []string{"t6"}, Outputs: []string{"y"}},
	}
	return g
}

func TestSupportedOpsSorted(t *testing.T) {
	ops := SupportedOps()
	if !sort.StringsAreSorted(ops) {
		t.Fatal("not sorted")
	}
	for _, want := range []string{"Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization", "MaxPool",
		"AveragePool", "GlobalAveragePool", "Relu", "Clip", "Sigmoid", "HardSigmoid", "HardSwish", "Gelu", "Erf",
		"Add", "Mul", "Sub", "Div", "Concat", "Reshape", "Flatten", "Transpose", "Resize", "Softmax",
		"LayerNormalization", "Shape", "Gather", "Unsqueeze", "Squeeze", "Constant", "Slice", "Pow", "Sqrt",
		"ReduceMean", "Identity", "Dropout"} {
		if !Supported(want) {
			t.Errorf("%s not supported", want)
		}
	}
}

func TestLoadFoldsBatchNormAndFuses(t *testing.T) {
	g := convBlock()
	before := len(g.Nodes)
	m, err := Load(g, Options{Units: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(g.Nodes) != before || g.Nodes[0].Inputs[1] != "w1" {
		t.Fatal("Load modified the graph")
	}
	if m.FoldedBN != 2 {
		t.Fatalf("folded %d BatchNormalization nodes, want 2", m.FoldedBN)
	}
	p, err := m.CompileBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, k := range p.Kernels {
		if k.Op != OpIm2col {
			ops = append(ops, k.Ops)
		}
	}
	if want := []string{"Conv+Relu", "Conv+Add+Relu"}; !reflect.DeepEqual(ops, want) {
		t.Fatalf("kernels %v, want %v\n%s", ops, want, p)
	}
	if p.Fused != 3 {
		t.Fatalf("fused %d, want 3", p.Fused)
	}
	// the folded weights hold W*gamma/sqrt(var+eps)
	w := m.consts["c2#W_bn"]
	if w == nil {
		t.Fatal("no folded weight")
	}
	if got, want := w.F[36], float32(ramp(144, 0.05)[36]*0.5/float32(1.4142101)); abs32(got-want) > 1e-5 {
		t.Fatalf("folded weight %v, want %v", got, want)
	}
}

func abs32(x float32) float32 {
	if x < 0 {
		return -x
	}
	return x
}

// TestPlanKeepsLiveData checks the arena plan on a branchy graph: no kernel
// writes over data another kernel still has to read.
func TestPlanKeepsLiveData(t *testing.T) {
	for _, g := range []*graph.Graph{convBlock(), branchy()} {
		m, err := Load(g, Options{Units: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, batch := range []int{1, 3} {
			p, err := m.CompileBatch(batch)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkPlan(p); err != nil {
				t.Fatalf("%s batch %d: %v\n%s", g.Name, batch, err, p)
			}
		}
	}
}

// checkPlan verifies that between the write of a buffer and each read of
// it, no other buffer overlapping it was written.
func checkPlan(p *Program) error {
	type w struct {
		r Range
		k int
	}
	var writes []w
	for _, b := range p.Inputs {
		writes = append(writes, w{Range{b.Off, (b.Size() + 15) &^ 15}, -1})
	}
	for i, k := range p.Kernels {
		for _, r := range k.Reads {
			// the newest write overlapping r must be r itself
			for j := len(writes) - 1; j >= 0; j-- {
				x := writes[j].r
				if x.Off < r.Off+r.Len && r.Off < x.Off+x.Len {
					if x != r {
						return errorf("kernel %d (%s) reads %v, last overwritten by kernel %d writing %v", i, k.Ops, r, writes[j].k, x)
					}
					break
				}
			}
		}
		for _, r := range k.Writes {
			writes = append(writes, w{r, i})
		}
	}
	return nil
}

type planErr string

func (e planErr) Error() string { return string(e) }

func errorf(f string, a ...any) error { return planErr(strings.TrimSpace(sprintf(f, a...))) }

// branchy has parallel branches, a concat, a split and an in-place chain.
func branchy() *graph.Graph {
	g := &graph.Graph{Name: "branchy", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 8, 6, 6}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}, {Name: "z", DType: graph.Float32}}}
	g.Initializers = []*graph.Tensor{
		{Name: "w", DType: graph.Float32, Dims: []int64{8, 8, 1, 1}, F32: ramp(64, 0.1)},
		{Name: "w3", DType: graph.Float32, Dims: []int64{8, 8, 3, 3}, F32: ramp(576, 0.02)},
		{Name: "sp", DType: graph.Int64, Dims: []int64{2}, I64: []int64{4, 12}},
	}
	g.Nodes = []graph.Node{
		{Name: "a", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"a"}},
		{Name: "b", Op: "Conv", Inputs: []string{"x", "w3"}, Outputs: []string{"b"}, Attrs: []graph.Attr{ia("pads", 1, 1, 1, 1)}},
		{Name: "e", Op: "Exp", Inputs: []string{"a"}, Outputs: []string{"e"}},
		{Name: "s", Op: "Sigmoid", Inputs: []string{"e"}, Outputs: []string{"s"}},
		{Name: "c", Op: "Concat", Inputs: []string{"s", "b"}, Outputs: []string{"c"}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}},
		{Name: "p", Op: "Split", Inputs: []string{"c", "sp"}, Outputs: []string{"p1", "p2"}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}},
		{Name: "t", Op: "Tanh", Inputs: []string{"p1"}, Outputs: []string{"y"}},
		{Name: "m", Op: "Mul", Inputs: []string{"p2", "p2"}, Outputs: []string{"z"}},
	}
	return g
}

// TestIdempotentGroups checks that in-place kernels restart from the kernel
// that produced the data they overwrite.
func TestIdempotentGroups(t *testing.T) {
	m, err := Load(branchy(), Options{Units: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.CompileBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	if p.InPlace == 0 {
		t.Fatalf("no in-place kernel\n%s", p)
	}
	for i, k := range p.Kernels {
		e := p.IdemEntry[i]
		if k.Idempotent() && e != i {
			t.Fatalf("idempotent kernel %d restarts at %d", i, e)
		}
		if !k.Idempotent() {
			if e >= i {
				t.Fatalf("in-place kernel %d (%s) restarts at %d\n%s", i, k.Ops, e, p)
			}
			if !groupIdempotent(p.Kernels[e : i+1]) {
				t.Fatalf("group %d..%d not idempotent", e, i)
			}
			if e+1 <= i && groupIdempotent(p.Kernels[e+1:i+1]) {
				t.Fatalf("group %d..%d is not minimal", e, i)
			}
		}
	}
	// with in-place off, every kernel is its own group
	m2, _ := Load(branchy(), Options{Units: 2, NoInPlace: true})
	p2, err := m2.CompileBatch(2)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range p2.IdemEntry {
		if e != i || !p2.Kernels[i].Idempotent() {
			t.Fatalf("NoInPlace: kernel %d restarts at %d", i, e)
		}
	}
	if p2.ArenaFloats < p.ArenaFloats {
		t.Fatalf("in-place arena %d larger than without %d", p.ArenaFloats, p2.ArenaFloats)
	}
}

func TestIdempotentEntriesSynthetic(t *testing.T) {
	A, B, C := Range{0, 16}, Range{16, 16}, Range{32, 16}
	ks := []Kernel{
		{Reads: []Range{A}, Writes: []Range{B}},                     // 0: B = f(A)
		{Reads: []Range{B}, Writes: []Range{B}, Flags: FlagInPlace}, // 1: B = g(B)
		{Reads: []Range{B}, Writes: []Range{A}},                     // 2: A = h(B) (A reused)
		{Reads: []Range{A}, Writes: []Range{A}, Flags: FlagInPlace}, // 3: A = k(A)
		{Reads: []Range{A, C}, Writes: []Range{B}},                  // 4
	}
	got := IdempotentEntries(ks)
	want := []int{0, 0, 2, 2, 4}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
}

// TestShapeSubgraphFolds checks Shape -> Gather -> Unsqueeze -> Concat ->
// Reshape folds away per batch size.
func TestShapeSubgraphFolds(t *testing.T) {
	g := &graph.Graph{Name: "shape", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Initializers: []*graph.Tensor{{Name: "i0", DType: graph.Int64, I64: []int64{0}},
			{Name: "ax", DType: graph.Int64, Dims: []int64{1}, I64: []int64{0}},
			{Name: "m1", DType: graph.Int64, Dims: []int64{1}, I64: []int64{-1}}},
		Nodes: []graph.Node{
			{Name: "sh", Op: "Shape", Inputs: []string{"x"}, Outputs: []string{"s"}},
			{Name: "ga", Op: "Gather", Inputs: []string{"s", "i0"}, Outputs: []string{"n"}},
			{Name: "un", Op: "Unsqueeze", Inputs: []string{"n", "ax"}, Outputs: []string{"n1"}},
			{Name: "cc", Op: "Concat", Inputs: []string{"n1", "m1"}, Outputs: []string{"shape"}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt}}},
			{Name: "rs", Op: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"t"}},
			{Name: "r", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"y"}},
		}}
	m, err := Load(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, batch := range []int{1, 5} {
		p, err := m.CompileBatch(batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Kernels) != 1 || p.Kernels[0].Op != OpUnary {
			t.Fatalf("batch %d: %s", batch, p)
		}
		if want := []int64{int64(batch), 12}; !reflect.DeepEqual(p.Outputs[0].Shape, want) {
			t.Fatalf("output shape %v, want %v", p.Outputs[0].Shape, want)
		}
	}
}

// A runtime int64 tensor (a Cast of the input) is refused: the engine
// computes float32, and stores uint8, int8, int32 and bool values in it,
// nothing wider. (A runtime comparison's bool result is computed:
// TestRuntimeCompare.)
func TestRuntimeIntegerTensorRejected(t *testing.T) {
	g := &graph.Graph{Name: "cast", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes: []graph.Node{{Name: "c", Op: "Cast", Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Int64)}},
			Inputs: []string{"x"}, Outputs: []string{"y"}}}}
	m, err := Load(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = m.CompileBatch(1)
	var ue *UnsupportedError
	if err == nil || !strings.Contains(err.Error(), "runtime cast") || !errors.As(err, &ue) {
		t.Fatalf("err = %v, want an UnsupportedError (ONNX Runtime serves such models)", err)
	}
}

// An operator the engine evaluates at load only (IsInf: a bool result it
// has no kernel for; NonZero, Unique: shapes that depend on values) on a
// run-time value is an UnsupportedError, so the
// appliance hands the model to ONNX Runtime; ArgMax runs (its int64
// indices as float32 values), and on a constant it folds.
func TestFoldOnlyOpOnRuntimeValue(t *testing.T) {
	g := &graph.Graph{Name: "isinf", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y"}}}
	// IsInf: a bool result; NonZero and Unique: shapes that depend on the
	// values
	for _, op := range []string{"IsInf", "NonZero", "Unique"} {
		g.Nodes = []graph.Node{{Name: "n", Op: op, Inputs: []string{"x"}, Outputs: []string{"y"}}}
		m, err := Load(g, Options{})
		if err == nil {
			_, err = m.CompileBatch(1)
		}
		var ue *UnsupportedError
		if !errors.As(err, &ue) || ue.Op != op || !strings.Contains(err.Error(), "at load only") {
			t.Fatalf("err = %v, want an UnsupportedError naming %s", err, op)
		}
	}
	// NonMaxSuppression on run-time boxes and scores
	nms := &graph.Graph{Name: "nms", Opset: 11,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 6, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "s", DType: graph.Float32, Dims: []int64{1, 1, 6}, F32: []float32{1, 2, 3, 4, 5, 6}},
			{Name: "k", DType: graph.Int64, Dims: []int64{1}, I64: []int64{3}}},
		Nodes: []graph.Node{{Name: "n", Op: "NonMaxSuppression", Inputs: []string{"x", "s", "k"}, Outputs: []string{"y"}}}}
	if m, err := Load(nms, Options{}); err != nil {
		t.Fatal(err)
	} else if _, err = m.CompileBatch(1); err == nil || !strings.Contains(err.Error(), "at load only") {
		t.Fatalf("NonMaxSuppression of run-time boxes: err = %v, want an UnsupportedError", err)
	}
	g.Nodes = []graph.Node{{Name: "am", Op: "ArgMax", Inputs: []string{"x"}, Outputs: []string{"y"}}}
	m, err := Load(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.CompileBatch(1)
	if err != nil {
		t.Fatalf("a run-time ArgMax: %v", err)
	}
	if len(p.Outputs) != 1 || !eqShape(p.Outputs[0].Shape, []int64{1, 4}) {
		t.Errorf("ArgMax over axis 0 of [1 4] (keepdims): outputs %+v", p.Outputs)
	}
	outs, err := Eval(&g.Nodes[0], 13, []*Tensor{NewFloat([]int64{2, 3}, []float32{1, 7, 7, 9, 2, 9})})
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[0].I; len(got) != 3 || got[0] != 1 || got[1] != 0 || got[2] != 1 {
		t.Errorf("ArgMax over axis 0 = %v, want [1 0 1]", got)
	}
}

// A comparison of runtime values is a BINARY kernel whose bool result is
// stored as 1 and 0.
func TestRuntimeCompare(t *testing.T) {
	g := &graph.Graph{Name: "eq", Opset: 13,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "k", DType: graph.Float32, Dims: []int64{}, F32: []float32{1}}},
		Nodes:        []graph.Node{{Name: "ge", Op: "GreaterOrEqual", Inputs: []string{"x", "k"}, Outputs: []string{"y"}}}}
	m, err := Load(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.CompileBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Kernels) != 1 || p.Kernels[0].Op != OpBinary || p.Kernels[0].P[0] != BinGreaterEq {
		t.Fatalf("%s", p)
	}
}

// TestReferenceKnownValues pins the reference evaluator to hand-computed
// results (ONNX's documented examples).
func TestReferenceKnownValues(t *testing.T) {
	// ONNX test_basic_conv_with_padding
	x := make([]float32, 25)
	for i := range x {
		x[i] = float32(i)
	}
	w := []float32{1, 1, 1, 1, 1, 1, 1, 1, 1}
	n := graph.Node{Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"}, Attrs: []graph.Attr{ia("kernel_shape", 3, 3), ia("pads", 1, 1, 1, 1)}}
	out, err := Eval(&n, 11, []*Tensor{NewFloat([]int64{1, 1, 5, 5}, x), NewFloat([]int64{1, 1, 3, 3}, w)})
	if err != nil {
		t.Fatal(err)
	}
	want := []float32{12, 21, 27, 33, 24, 33, 54, 63, 72, 51, 63, 99, 108, 117, 81, 93, 144, 153, 162, 111, 72, 111, 117, 123, 84}
	if !reflect.DeepEqual(out[0].F, want) {
		t.Fatalf("conv %v", out[0].F)
	}
	// ONNX Resize example: linear, half_pixel, 2x2 -> 4x4 row 0
	n = graph.Node{Op: "Resize", Inputs: []string{"x", "", "s"}, Outputs: []string{"y"}, Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "linear"}}}
	out, err = Eval(&n, 13, []*Tensor{NewFloat([]int64{1, 1, 2, 2}, []float32{1, 2, 3, 4}), nil, NewFloat([]int64{4}, []float32{1, 1, 2, 2})})
	if err != nil {
		t.Fatal(err)
	}
	if got := out[0].F[:4]; !reflect.DeepEqual(got, []float32{1, 1.25, 1.75, 2}) {
		t.Fatalf("resize row 0 %v", got)
	}
	// Resize cubic: ONNX test_resize_upsample_scales_cubic, first row
	xs16 := make([]float32, 16)
	for i := range xs16 {
		xs16[i] = float32(i + 1)
	}
	n = graph.Node{Op: "Resize", Inputs: []string{"x", "", "s"}, Outputs: []string{"y"}, Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "cubic"}}}
	out, err = Eval(&n, 13, []*Tensor{NewFloat([]int64{1, 1, 4, 4}, xs16), nil, NewFloat([]int64{4}, []float32{1, 1, 2, 2})})
	if err != nil {
		t.Fatal(err)
	}
	cubicRow := []float32{0.47265625, 0.76953125, 1.24609375, 1.875, 2.28125, 2.91015625, 3.38671875, 3.68359375}
	for i, v := range cubicRow {
		if d := out[0].F[i] - v; d > 1e-5 || d < -1e-5 {
			t.Fatalf("resize cubic row 0: %v, want %v", out[0].F[:8], cubicRow)
		}
	}
	// ConvTranspose: ONNX test_convtranspose_1d
	n = graph.Node{Op: "ConvTranspose", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}
	out, err = Eval(&n, 11, []*Tensor{NewFloat([]int64{1, 1, 3}, []float32{0, 1, 2}), NewFloat([]int64{1, 2, 3}, []float32{1, 1, 1, 1, 1, 1})})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out[0].F, []float32{0, 1, 3, 3, 2, 0, 1, 3, 3, 2}) {
		t.Fatalf("convtranspose %v", out[0].F)
	}
	// MaxPool with ceil_mode: ONNX test_maxpool_2d_ceil
	xs := make([]float32, 16)
	for i := range xs {
		xs[i] = float32(i + 1)
	}
	n = graph.Node{Op: "MaxPool", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: []graph.Attr{ia("kernel_shape", 3, 3), ia("strides", 2, 2), {Name: "ceil_mode", Kind: graph.AttrInt, I: 1}}}
	out, err = Eval(&n, 11, []*Tensor{NewFloat([]int64{1, 1, 4, 4}, xs)})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(out[0].F, []float32{11, 12, 15, 16}) {
		t.Fatalf("maxpool ceil %v", out[0].F)
	}
}

func TestUnsupportedError(t *testing.T) {
	g := &graph.Graph{Name: "u", Inputs: []graph.ValueInfo{{Name: "x", Dims: []int64{1}}},
		Nodes: []graph.Node{{Name: "n1", Op: "StringNormalizer", Inputs: []string{"x"}, Outputs: []string{"y"}}}}
	_, err := Load(g, Options{})
	if err == nil || !strings.Contains(err.Error(), `unsupported operator StringNormalizer (node "n1"); supported: Abs, Acos, Acosh, Add`) {
		t.Fatalf("err = %v", err)
	}
}

func sprintf(f string, a ...any) string { return fmt.Sprintf(f, a...) }

// TestGeluRewrite checks the Erf spelling of GELU becomes one Gelu fused
// into the preceding MatMul's epilogue.
func TestGeluRewrite(t *testing.T) {
	g := zoo.BERT(zoo.Options{Layers: 1, SeqLen: 8, Hidden: 16, Heads: 2, FF: 32})
	m, err := Load(g, Options{Units: 2})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.CompileBatch(1)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range p.Kernels {
		if strings.Contains(k.Ops, "Erf") || strings.Contains(k.Ops, "Div") {
			t.Fatalf("kernel %s left unfused\n%s", k.Ops, p)
		}
		found = found || k.Ops == "MatMul+Add+Gelu"
	}
	if !found {
		t.Fatalf("no MatMul+Add+Gelu kernel\n%s", p)
	}
}

// Operators the loader rewrites leave no node of their own, two unnamed
// ones get bodies of their own, and a node without its input is an
// error naming it.
func TestDecomposedOps(t *testing.T) {
	g := &graph.Graph{Name: "d", Inputs: []graph.ValueInfo{{Name: "x", Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "z"}},
		Nodes: []graph.Node{
			{Op: "Softsign", Inputs: []string{"x"}, Outputs: []string{"y"}},
			{Op: "Softsign", Inputs: []string{"y"}, Outputs: []string{"s"}},
			{Op: "ReduceL1", Inputs: []string{"s"}, Outputs: []string{"z"}, Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}}},
		}}
	m, err := Load(g, Options{})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, n := range m.nodes {
		if _, ok := decomposedOps[n.Op]; ok {
			t.Errorf("node %q is still %s", n.Name, n.Op)
		}
		if names[n.Name] {
			t.Errorf("two nodes named %q", n.Name)
		}
		names[n.Name] = true
	}
	x := NewFloat([]int64{1, 4}, []float32{-3, -1, 0, 2})
	outs, err := Eval(&g.Nodes[0], 17, []*Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range []float32{-0.75, -0.5, 0, 2.0 / 3} {
		if d := outs[0].F[i] - v; d > 1e-6 || d < -1e-6 {
			t.Errorf("Softsign(%v) = %v, want %v", x.F[i], outs[0].F[i], v)
		}
	}
	// log-sum-exp of large values: no overflow
	lse := graph.Node{Op: "ReduceLogSumExp", Inputs: []string{"x"}, Outputs: []string{"y"},
		Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}}}
	outs, err = Eval(&lse, 13, []*Tensor{NewFloat([]int64{2}, []float32{1000, 1000})})
	if err != nil {
		t.Fatal(err)
	}
	if want := float32(1000 + math.Ln2); len(outs[0].F) != 1 || outs[0].F[0] != want {
		t.Errorf("ReduceLogSumExp([1000 1000]) = %v, want %v", outs[0].F, want)
	}
	bad := &graph.Graph{Name: "b", Inputs: []graph.ValueInfo{{Name: "x", Dims: []int64{1}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes:   []graph.Node{{Name: "s", Op: "Selu", Outputs: []string{"y"}}}}
	if _, err := Load(bad, Options{}); err == nil || !strings.Contains(err.Error(), `Selu "s": want one input and one output`) {
		t.Errorf("Selu without input: %v", err)
	}
	bad.Nodes = []graph.Node{{Name: "in", Op: "InstanceNormalization", Inputs: []string{"x", "sc"}, Outputs: []string{"y"}}}
	if _, err := Load(bad, Options{}); err == nil || !strings.Contains(err.Error(), `InstanceNormalization "in": want the input, scale and B`) {
		t.Errorf("InstanceNormalization without B: %v", err)
	}
}

// A transform longer than the engine builds a matrix for (DFT's
// dft_length, STFT's frame_length, or a long signal axis) is refused with
// an UnsupportedError at compile time, not a huge allocation.
func TestDFTTooLongRefused(t *testing.T) {
	for _, c := range []struct {
		name  string
		node  graph.Node
		dims  []int64
		inits []*graph.Tensor
	}{
		{"dft-length", graph.Node{Op: "DFT", Inputs: []string{"x", "L"}}, []int64{1, 16, 1},
			[]*graph.Tensor{{Name: "L", DType: graph.Int64, Dims: []int64{}, I64: []int64{1 << 60}}}},
		{"dft-axis", graph.Node{Op: "DFT", Inputs: []string{"x"}}, []int64{1, 1 << 24, 1}, nil},
		{"stft-frame", graph.Node{Op: "STFT", Inputs: []string{"x", "s", "", "l"}}, []int64{1, 1 << 24, 1},
			[]*graph.Tensor{{Name: "s", DType: graph.Int64, Dims: []int64{}, I64: []int64{1}},
				{Name: "l", DType: graph.Int64, Dims: []int64{}, I64: []int64{1 << 23}}}},
	} {
		n := c.node
		n.Name, n.Outputs = c.name, []string{"y"}
		g := &graph.Graph{Name: c.name, Opset: 17, Nodes: []graph.Node{n}, Initializers: c.inits,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: c.dims}},
			Outputs: []graph.ValueInfo{{Name: "y"}}}
		m, err := Load(g, Options{})
		if err == nil {
			_, err = m.CompileBatch(1)
		}
		var ue *UnsupportedError
		if !errors.As(err, &ue) {
			t.Errorf("%s: err = %v, want an UnsupportedError", c.name, err)
		}
	}
}

// Resize's tf_crop_and_resize refuses a roi that is not finite or is
// huge (its coordinates would not be numbers: -1e38 to 1e38 makes
// 0 * inf), and keep_aspect_ratio_policy refuses sizes of 0.
func TestResizeBadRoiRefused(t *testing.T) {
	nan, inf := float32(math.NaN()), float32(math.Inf(1))
	str := func(name, v string) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrString, S: v} }
	for _, c := range []struct {
		name  string
		attrs []graph.Attr
		roi   []float32
		sizes []int64
	}{
		{"nan", []graph.Attr{str("coordinate_transformation_mode", "tf_crop_and_resize")}, []float32{0, 0, nan, 0, 1, 1, 1, 1}, []int64{1, 1, 4, 4}},
		{"inf", []graph.Attr{str("coordinate_transformation_mode", "tf_crop_and_resize")}, []float32{0, 0, 0, -inf, 1, 1, 1, 1}, []int64{1, 1, 4, 4}},
		{"huge", []graph.Attr{str("coordinate_transformation_mode", "tf_crop_and_resize")}, []float32{0, 0, -1e38, 0, 1, 1, 1e38, 1}, []int64{1, 1, 4, 4}},
		{"zero-size", []graph.Attr{str("keep_aspect_ratio_policy", "not_larger")}, nil, []int64{1, 1, 0, 4}},
	} {
		inits := []*graph.Tensor{{Name: "sizes", DType: graph.Int64, Dims: []int64{4}, I64: c.sizes}}
		in := []string{"x", "", "", "sizes"}
		if c.roi != nil {
			inits = append(inits, &graph.Tensor{Name: "roi", DType: graph.Float32, Dims: []int64{8}, F32: c.roi})
			in[1] = "roi"
		}
		g := &graph.Graph{Name: c.name, Opset: 18, Initializers: inits,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 1, 5, 6}}},
			Outputs: []graph.ValueInfo{{Name: "y"}},
			Nodes:   []graph.Node{{Name: c.name, Op: "Resize", Inputs: in, Outputs: []string{"y"}, Attrs: c.attrs}}}
		m, err := Load(g, Options{})
		if err == nil {
			_, err = m.CompileBatch(1)
		}
		if err == nil {
			t.Errorf("%s: no error", c.name)
		}
	}
}

// Malformed windows, mel matrices, Unique and Scan nodes, and operators
// whose output shape comes from values asking for absurd sizes, are
// errors, not panics or huge allocations.
func TestValueOpsMalformed(t *testing.T) {
	i64 := func(v int64) *Tensor { return &Tensor{DType: graph.Int64, Shape: []int64{}, I: []int64{v}} }
	f32 := func(v float32) *Tensor { return &Tensor{DType: graph.Float32, Shape: []int64{}, F: []float32{v}} }
	ints := func(v ...int64) *Tensor { return &Tensor{DType: graph.Int64, Shape: []int64{int64(len(v))}, I: v} }
	f22 := &Tensor{DType: graph.Float32, Shape: []int64{2, 2}, F: []float32{1, 2, 3, 4}}
	for _, c := range []struct {
		name string
		n    graph.Node
		ins  []*Tensor
		want string
	}{
		{"window-negative", graph.Node{Op: "HannWindow"}, []*Tensor{i64(-3)}, "size -3"},
		{"window-huge", graph.Node{Op: "BlackmanWindow"}, []*Tensor{i64(1 << 40)}, "size"},
		{"window-int-output", graph.Node{Op: "HammingWindow", Attrs: []graph.Attr{{Name: "output_datatype", Kind: graph.AttrInt, I: int64(graph.Int32)}}},
			[]*Tensor{i64(8)}, "output_datatype"},
		{"window-float-size", graph.Node{Op: "HannWindow"}, []*Tensor{f32(8)}, "one integer"},
		{"mel-no-bins", graph.Node{Op: "MelWeightMatrix"}, []*Tensor{i64(0), i64(16), i64(8000), f32(0), f32(4000)}, "positive"},
		{"mel-huge", graph.Node{Op: "MelWeightMatrix"}, []*Tensor{i64(1 << 20), i64(1 << 30), i64(8000), f32(0), f32(4000)}, "values"},
		{"mel-edges-reversed", graph.Node{Op: "MelWeightMatrix"}, []*Tensor{i64(8), i64(16), i64(8000), f32(3000), f32(100)}, "edges"},
		{"mel-over-nyquist", graph.Node{Op: "MelWeightMatrix"}, []*Tensor{i64(8), i64(16), i64(8000), f32(0), f32(20000)}, "outside"},
		{"unique-bad-axis", graph.Node{Op: "Unique", Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 3}}},
			[]*Tensor{{DType: graph.Float32, Shape: []int64{2, 2}, F: []float32{1, 2, 3, 4}}}, "axis"},
		// shapes taken from values: refused before anything is allocated
		{"range-huge", graph.Node{Op: "Range"}, []*Tensor{i64(0), i64(1 << 40), i64(1)}, "more than"},
		{"constantofshape-huge", graph.Node{Op: "ConstantOfShape"}, []*Tensor{ints(1<<20, 1<<20)}, "more than"},
		{"expand-huge", graph.Node{Op: "Expand"}, []*Tensor{f22, ints(1<<20, 1<<20, 2, 2)}, "more than"},
		{"tile-overflow", graph.Node{Op: "Tile"}, []*Tensor{f22, ints(1<<62, 1<<62)}, "more than"},
		{"pad-huge", graph.Node{Op: "Pad"}, []*Tensor{f22, ints(0, 0, 1<<30, 1<<30)}, "more than"},
		{"onehot-huge", graph.Node{Op: "OneHot"}, []*Tensor{ints(1, 2), i64(1 << 40), {DType: graph.Float32, Shape: []int64{2}, F: []float32{0, 1}}}, "more than"},
		{"resize-huge", graph.Node{Op: "Resize"}, []*Tensor{{DType: graph.Float32, Shape: []int64{1, 1, 2, 2}, F: []float32{1, 2, 3, 4}}, nil, nil, ints(1, 1, 1<<20, 1<<20)}, "more than"},
	} {
		n := c.n
		n.Name, n.Outputs = c.name, []string{"y", "i", "v", "n"}
		_, err := Eval(&n, 17, c.ins)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want one naming %q", c.name, err, c.want)
		}
	}
	body := &graph.Graph{Name: "b", Inputs: []graph.ValueInfo{{Name: "s"}, {Name: "e"}}, Outputs: []graph.ValueInfo{{Name: "s2"}, {Name: "o"}},
		Nodes: []graph.Node{{Name: "a", Op: "Add", Inputs: []string{"s", "e"}, Outputs: []string{"s2"}},
			{Name: "c", Op: "Identity", Inputs: []string{"s2"}, Outputs: []string{"o"}}}}
	scan := func(attrs ...graph.Attr) *graph.Graph {
		return &graph.Graph{Name: "scan", Opset: 13,
			Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
			Outputs:      []graph.ValueInfo{{Name: "y"}},
			Initializers: []*graph.Tensor{{Name: "seq", DType: graph.Float32, Dims: []int64{3, 4}, F32: make([]float32, 12)}},
			Nodes: []graph.Node{{Name: "scan", Op: "Scan", Inputs: []string{"x", "seq"}, Outputs: []string{"fin", "y"},
				Attrs: append([]graph.Attr{{Name: "body", Kind: graph.AttrGraph, G: body}}, attrs...)}}}
	}
	n1 := graph.Attr{Name: "num_scan_inputs", Kind: graph.AttrInt, I: 1}
	for _, c := range []struct {
		name string
		g    *graph.Graph
		want string
	}{
		{"no-scan-inputs", scan(), "scanned"},
		{"axes-count", scan(n1, graph.Attr{Name: "scan_input_axes", Kind: graph.AttrInts, Ints: []int64{0, 1}}), "scan_input_axes"},
		{"axis-out-of-range", scan(n1, graph.Attr{Name: "scan_input_axes", Kind: graph.AttrInts, Ints: []int64{5}}), "axis"},
		{"direction-2", scan(n1, graph.Attr{Name: "scan_output_directions", Kind: graph.AttrInts, Ints: []int64{2}}), "direction"},
		{"no-body", func() *graph.Graph { g := scan(n1); g.Nodes[0].Attrs = g.Nodes[0].Attrs[1:]; return g }(), "no body"},
	} {
		_, err := Load(c.g, Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Scan %s: err = %v, want one naming %q", c.name, err, c.want)
		}
	}
	// the well-formed one loads and runs: fin = x + sum of seq's rows (0)
	m, err := Load(scan(n1), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CompileBatch(2); err != nil {
		t.Fatal(err)
	}
}

// Options.MemoryLimit: weights above it refuse the model at load; a
// batch size whose activations take it above refuses that batch size
// only; the error says what the model needs.
func TestMemoryLimit(t *testing.T) {
	w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{256, 256}, F32: make([]float32, 256*256)}
	g := &graph.Graph{Name: "mm", Opset: 13,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 1024, 256}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{w},
		Nodes: []graph.Node{{Name: "mm", Op: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"y"}},
			{Name: "r", Op: "Relu", Inputs: []string{"y"}, Outputs: []string{"z"}}}}
	g.Outputs[0].Name = "z"
	// weights: 256 KiB
	_, err := Load(g, Options{MemoryLimit: 200 << 10})
	var me *MemoryLimitError
	if !errors.As(err, &me) || me.Need < 256<<10 || me.Limit != 200<<10 || !strings.Contains(err.Error(), "above its memory limit of 0.2 MiB") {
		t.Fatalf("weights above the limit: err = %v, want a MemoryLimitError", err)
	}
	// batch 1: 256 KiB of weights and 1 MiB a tensor of activations;
	// batch 16: 16 MiB a tensor
	m, err := Load(g, Options{MemoryLimit: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.CompileBatch(1); err != nil {
		t.Fatalf("batch 1 within the limit: %v", err)
	}
	_, err = m.CompileBatch(16)
	if !errors.As(err, &me) || me.Need <= 8<<20 || !strings.Contains(err.Error(), "activations") {
		t.Fatalf("batch 16 above the limit: err = %v, want a MemoryLimitError", err)
	}
	if _, err := Load(g, Options{}); err != nil {
		t.Fatalf("no limit: %v", err)
	}
}

// Folding operators whose work outgrows their output stay bounded: a
// TfIdfVectorizer's skips beyond its row count nothing (and cost no
// loop), and a Gemm or a NonMaxSuppression whose work would stall the
// load is an error.
func TestFoldWorkBounded(t *testing.T) {
	attrs := func(skip int64) []graph.Attr {
		return []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "TF"},
			{Name: "min_gram_length", Kind: graph.AttrInt, I: 1}, {Name: "max_gram_length", Kind: graph.AttrInt, I: 1 << 40},
			{Name: "max_skip_count", Kind: graph.AttrInt, I: skip},
			{Name: "pool_int64s", Kind: graph.AttrInts, Ints: []int64{1, 2, 1, 2, 2, 1}},
			{Name: "ngram_counts", Kind: graph.AttrInts, Ints: []int64{0, 2}},
			{Name: "ngram_indexes", Kind: graph.AttrInts, Ints: []int64{0, 1, 2, 3}}}
	}
	tokens := NewInt([]int64{6}, []int64{1, 2, 1, 1, 2, 2})
	var outs [2][]float32
	for i, skip := range []int64{6, 1 << 60} {
		n := graph.Node{Name: "tfidf", Op: "TfIdfVectorizer", Inputs: []string{"x"}, Outputs: []string{"y"}, Attrs: attrs(skip)}
		o, err := Eval(&n, 9, []*Tensor{tokens})
		if err != nil {
			t.Fatalf("skip %d: %v", skip, err)
		}
		outs[i] = o[0].F
	}
	if fmt.Sprint(outs[0]) != fmt.Sprint(outs[1]) || outs[0][2] == 0 {
		t.Errorf("TfIdf with skips past the row: %v, want %v (bigrams counted)", outs[1], outs[0])
	}
	// a Gemm of constants: 2^13 x 2^8 times 2^8 x 2^14, 2^35 multiply-adds
	gm := graph.Node{Name: "gemm", Op: "Gemm", Inputs: []string{"a", "b"}, Outputs: []string{"y"}}
	_, err := Eval(&gm, 13, []*Tensor{NewFloat([]int64{1 << 13, 1 << 8}, nil), NewFloat([]int64{1 << 8, 1 << 14}, nil)})
	if err == nil || !strings.Contains(err.Error(), "steps to evaluate at load") {
		t.Errorf("Gemm of 2^35 steps: err = %v, want the work bound", err)
	}
	nb := int64(1 << 17)
	n := graph.Node{Name: "nms", Op: "NonMaxSuppression", Inputs: []string{"b", "s", "k"}, Outputs: []string{"y"}}
	_, err = Eval(&n, 11, []*Tensor{NewFloat([]int64{1, nb, 4}, nil), NewFloat([]int64{1, 1, nb}, nil), NewInt([]int64{1}, []int64{nb})})
	if err == nil || !strings.Contains(err.Error(), "steps to evaluate at load") {
		t.Errorf("NonMaxSuppression of %d boxes: err = %v, want the work bound", nb, err)
	}
}

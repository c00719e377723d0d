package conformance

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
	ncpu "sluice/native/cpu"
)

// quantNodeTests are ONNX's node tests of the quantisation operators. The
// folder runs them in TestNodeTestsCPU (their inputs are integers); here
// they run through the QUANT and QGEMM kernels as well.
var quantNodeTests = []string{
	"test_quantizelinear", "test_quantizelinear_axis",
	"test_dequantizelinear", "test_dequantizelinear_axis",
	"test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
	"test_dynamicquantizelinear_min_adjusted",
	"test_matmulinteger", "test_basic_convinteger", "test_convinteger_with_padding",
	"test_convinteger_without_padding", "test_qlinearmatmul_2D", "test_qlinearmatmul_3D",
	"test_qlinearconv",
}

// TestQuantNodeTestsKernels feeds each quantisation node test's first
// input at run time (uint8 and int8 inputs as their values in float32, as
// the engine stores them), bakes the others in as initializers, and checks
// every output, integer outputs included, through the cpu backend's
// production path (LoadModel, ConfigureBatch, InferBatch).
func TestQuantNodeTestsKernels(t *testing.T) {
	if len(NodeTestNames()) == 0 {
		RequireDeps(t, "libonnx-testdata", os.ErrNotExist)
	}
	be := cpuBackend(t)
	ctx := context.Background()
	for _, name := range quantNodeTests {
		t.Run(strings.TrimPrefix(name, "test_"), func(t *testing.T) {
			nt, err := LoadNodeTest(name)
			if err != nil {
				t.Fatal(err)
			}
			for s, ds := range nt.Sets {
				in := runtimeFeed(ds.Inputs[0])
				for o, want := range ds.Outputs {
					g := singleIO(nt, ds, 0, o)
					if err := runAndCompare(ctx, be, name, g, in, want); err != nil {
						t.Errorf("data set %d, output %q: %v", s, want.Name, err)
					}
				}
			}
		})
	}
}

// runtimeFeed is t as the float32 request data an instance is fed.
func runtimeFeed(t *graph.Tensor) *graph.Tensor {
	if t.F32 != nil {
		return t
	}
	f := &graph.Tensor{Name: t.Name, DType: graph.Float32, Dims: t.Dims, F32: make([]float32, len(t.I64))}
	for i, v := range t.I64 {
		f.F32[i] = float32(v)
	}
	return f
}

// TestQuantRuntimeIntegerRefused: a float operator fed a runtime integer
// tensor is refused with a clear error (ONNX's Add on uint8 wraps; the
// engine's float values would not).
func TestQuantRuntimeIntegerRefused(t *testing.T) {
	be := cpuBackend(t)
	g := &graph.Graph{
		Opset:   17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Uint8, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Uint8, Dims: []int64{1, 4}}},
		Nodes:   []graph.Node{{Name: "add", Op: "Add", Inputs: []string{"x", "x"}, Outputs: []string{"y"}}},
	}
	_, err := be.LoadModel(context.Background(), "u8add", g)
	if err == nil || !strings.Contains(err.Error(), "runtime uint8 tensor") {
		t.Fatalf("Add on a runtime uint8 input: err = %v, want a refusal naming the runtime uint8 tensor", err)
	}
}

// qgemmCase is one integer product for TestQGemmKernelsAgree: x (float,
// fed at run time) is quantised to uint8 or int8 and multiplied with a
// constant integer matrix w, as A (M x K) or as B (K x N).
type qgemmCase struct {
	name    string
	M, K, N int64
	xSigned bool // x quantised to int8 (else uint8)
	wSigned bool // w int8 (else uint8)
	xAsB    bool // x is B (K x N), w is A (M x K)
	perCol  bool // w's zero point per column (w as B) or per row (w as A)
	qlinear bool // QLinearMatMul (requantised) instead of MatMulInteger
}

// pattern is a fixed pseudo-random integer sequence (an LCG): test data
// that is the same in every run.
func pattern(n int64, seed uint32, lo, hi int64) []int64 {
	out := make([]int64, n)
	s := seed
	for i := range out {
		s = s*1664525 + 1013904223
		out[i] = lo + int64(s>>8)%(hi-lo+1)
	}
	return out
}

func (c qgemmCase) graph() (*graph.Graph, *graph.Tensor) {
	xr, xc := c.M, c.K
	wr, wc := c.K, c.N
	if c.xAsB {
		xr, xc, wr, wc = c.K, c.N, c.M, c.K
	}
	xi := pattern(xr*xc, uint32(c.M*131+c.N), -300, 300)
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{xr, xc}, F32: make([]float32, len(xi))}
	for i, v := range xi {
		x.F32[i] = float32(v) / 100
	}
	qt, wlo, whi := graph.Uint8, int64(0), int64(255)
	if c.wSigned {
		qt, wlo, whi = graph.Int8, -128, 127
	}
	w := &graph.Tensor{Name: "w", DType: qt, Dims: []int64{wr, wc}, I64: pattern(wr*wc, uint32(c.K), wlo, whi)}
	nz := int64(1)
	if c.perCol {
		nz = c.N
		if c.xAsB {
			nz = c.M
		}
	}
	wz := &graph.Tensor{Name: "wz", DType: qt, Dims: []int64{nz}, I64: pattern(nz, 7, wlo/2, whi/2)}
	xt, xz := graph.Uint8, int64(131)
	if c.xSigned {
		xt, xz = graph.Int8, -3
	}
	f := func(name string, v float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
	}
	g := &graph.Graph{Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{w, wz, f("xs", 0.02),
			{Name: "xz", DType: xt, Dims: []int64{}, I64: []int64{xz}}},
		Nodes: []graph.Node{{Name: "q", Op: "QuantizeLinear", Inputs: []string{"x", "xs", "xz"}, Outputs: []string{"xq"}}},
	}
	if c.qlinear {
		g.Outputs[0].DType = graph.Uint8
	} else {
		g.Outputs[0].DType = graph.Int32
	}
	a, az, b, bz := "xq", "xz", "w", "wz"
	if c.xAsB {
		a, az, b, bz = "w", "wz", "xq", "xz"
	}
	if c.qlinear {
		g.Initializers = append(g.Initializers, f("ws", 0.01), f("ys", 3.5),
			&graph.Tensor{Name: "yz", DType: graph.Uint8, Dims: []int64{}, I64: []int64{100}})
		as, bs := "xs", "ws"
		if c.xAsB {
			as, bs = bs, as
		}
		g.Nodes = append(g.Nodes, graph.Node{Name: "mm", Op: "QLinearMatMul",
			Inputs: []string{a, as, az, b, bs, bz, "ys", "yz"}, Outputs: []string{"y"}})
	} else {
		g.Nodes = append(g.Nodes, graph.Node{Name: "mm", Op: "MatMulInteger",
			Inputs: []string{a, b, az, bz}, Outputs: []string{"y"}})
	}
	return g, x
}

// TestQGemmKernelsAgree runs integer products of awkward shapes (rows,
// columns and reductions that fill no tile, panel or group of 4) through
// each QGEMM micro-kernel this CPU has: every one must give the constant
// folder's exact sums, bit for bit.
func TestQGemmKernelsAgree(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	cases := []qgemmCase{
		{name: "1x1x1", M: 1, K: 1, N: 1},
		{name: "3x5x7-signed", M: 3, K: 5, N: 7, xSigned: true, wSigned: true},
		{name: "17x33x65-percol", M: 17, K: 33, N: 65, perCol: true},
		{name: "64x130x300-uw", M: 64, K: 130, N: 300, wSigned: false, xSigned: true},
		{name: "130x771x40-perrow-xB", M: 130, K: 771, N: 40, xAsB: true, perCol: true, wSigned: true},
		{name: "9x64x33-xB", M: 9, K: 64, N: 33, xAsB: true},
		// K padded to 64: whole AMX tiles where the CPU has them, with
		// row and column tails on the vector unit
		{name: "amx-96x520x77", M: 96, K: 520, N: 77, wSigned: true, perCol: true},
		{name: "amx-70x256x64-xB", M: 70, K: 256, N: 64, xAsB: true, xSigned: true},
		{name: "qlinear-31x47x70", M: 31, K: 47, N: 70, qlinear: true, wSigned: true, perCol: true},
		{name: "qlinear-xB-8x19x23", M: 8, K: 19, N: 23, qlinear: true, xAsB: true},
	}
	kernels := []struct {
		name  string
		which int
	}{{"best", ncpu.QGemmBest}, {"noamx", ncpu.QGemmNoAMX}, {"novnni", ncpu.QGemmNoVNNI}, {"portable", ncpu.QGemmPortable}}
	t.Cleanup(func() { ncpu.SetQGemmKernel(ncpu.QGemmBest) })
	for _, c := range cases {
		g, x := c.graph()
		fold, err := foldGraph(g, []*graph.Tensor{x})
		if err != nil {
			t.Fatalf("%s: fold: %v", c.name, err)
		}
		want := fold["y"]
		for _, k := range kernels {
			ncpu.SetQGemmKernel(k.which)
			if err := runAndCompare(ctx, be, c.name, g, x, want); err != nil {
				t.Errorf("%s, %s micro-kernel: %v", c.name, k.name, err)
			}
		}
	}
}

// TestQuantBatches: a statically quantised model gives every request the
// bits it gets alone, whatever the batch; a dynamically quantised one
// (one scale over the whole batch) is refused at batch sizes above 1,
// with the reason, and runs at batch 1.
func TestQuantBatches(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	static, x := qgemmCase{name: "static", M: 1, K: 40, N: 24, qlinear: true, wSigned: true, perCol: true}.graph()
	static.Inputs[0].Dims = []int64{-1, 40}
	inst, err := be.LoadModel(ctx, "static", static)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	const batch = 3
	in := make([]float32, 0, batch*40)
	for r := 0; r < batch; r++ {
		for i := range x.F32 {
			in = append(in, x.F32[(i+7*r)%len(x.F32)])
		}
	}
	outs := map[int][]float32{}
	for _, b := range []int{1, batch} {
		if err := be.ConfigureBatch(inst, b); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, b*24)
		if b == 1 {
			for r := 0; r < batch; r++ {
				if err := be.InferBatch(ctx, inst, 1, in[r*40:(r+1)*40], out); err != nil {
					t.Fatal(err)
				}
				outs[1] = append(outs[1], out...)
			}
			continue
		}
		if err := be.InferBatch(ctx, inst, b, in, out); err != nil {
			t.Fatal(err)
		}
		outs[b] = out
	}
	for i := range outs[1] {
		if outs[1][i] != outs[batch][i] {
			t.Fatalf("request %d, element %d: %v alone, %v in a batch of %d", i/24, i%24, outs[1][i], outs[batch][i], batch)
		}
	}

	dyn := &graph.Graph{Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes: []graph.Node{
			{Name: "dq", Op: "DynamicQuantizeLinear", Inputs: []string{"x"}, Outputs: []string{"y", "s", "z"}},
		}}
	dinst, err := be.LoadModel(ctx, "dynamic", dyn)
	if err != nil {
		t.Fatal(err)
	}
	defer dinst.Close()
	if err := be.ConfigureBatch(dinst, 1); err != nil {
		t.Fatalf("batch 1: %v", err)
	}
	err = be.ConfigureBatch(dinst, 2)
	if err == nil || !strings.Contains(err.Error(), "one scale over the whole batch") {
		t.Fatalf("batch 2 of a dynamically quantised model: err = %v, want a refusal", err)
	}
}

// qconvGraph is a QLinearConv (or ConvInteger) over a float input x of
// shape [1, C, H, W], quantised at run time: groups, stride, padding and
// dilation (0: none) as given, int8 per-channel weights with non-zero zero
// points, int32 bias.
// With symmetric, the per-channel weight zero points are all 0 (ONNX
// Runtime takes no other for QLinearConv).
func qconvGraph(C, M, G, H, W, K, stride, pad, dil int64, qlinear, symmetric bool) (*graph.Graph, *graph.Tensor) {
	return qconvGraphND(C, M, G, []int64{H, W}, K, stride, pad, dil, qlinear, symmetric)
}

// qconvGraphND is qconvGraph over the spatial dimensions sp (2 or 3 of
// them), the same window, stride, padding and dilation on each.
func qconvGraphND(C, M, G int64, sp []int64, K, stride, pad, dil int64, qlinear, symmetric bool) (*graph.Graph, *graph.Tensor) {
	rep := func(v int64, n int) []int64 { return slices.Repeat([]int64{v}, n) }
	r := len(sp)
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: append([]int64{1, C}, sp...)}
	for _, v := range pattern(numelOf(x.Dims), uint32(C*sp[r-2]+sp[r-1]), -250, 250) {
		x.F32 = append(x.F32, float32(v)/100)
	}
	wd := append([]int64{M, C / G}, rep(K, r)...)
	w := &graph.Tensor{Name: "w", DType: graph.Int8, Dims: wd, I64: pattern(numelOf(wd), 11, -128, 127)}
	f := func(name string, v ...float32) *graph.Tensor {
		d := []int64{}
		if len(v) > 1 {
			d = []int64{int64(len(v))}
		}
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: d, F32: v}
	}
	// per-channel weight zero points for QLinearConv; one for ConvInteger
	// (ONNX Runtime, the oracle, takes no other)
	wz := &graph.Tensor{Name: "wz", DType: graph.Int8, Dims: []int64{M}, I64: pattern(M, 5, -20, 20)}
	if !qlinear {
		wz = &graph.Tensor{Name: "wz", DType: graph.Int8, Dims: []int64{}, I64: []int64{-7}}
	} else if symmetric {
		wz.I64 = make([]int64, M)
	}
	ws := make([]float32, M)
	for i := range ws {
		ws[i] = 0.002 + float32(i%5)*0.0005
	}
	attrs := []graph.Attr{{Name: "group", Kind: graph.AttrInt, I: G},
		{Name: "strides", Kind: graph.AttrInts, Ints: rep(stride, r)},
		{Name: "pads", Kind: graph.AttrInts, Ints: rep(pad, 2*r)}}
	if dil > 1 {
		attrs = append(attrs, graph.Attr{Name: "dilations", Kind: graph.AttrInts, Ints: rep(dil, r)})
	}
	g := &graph.Graph{Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{w, f("xs", 0.02), f("ws", ws...), f("ys", 0.5),
			{Name: "xz", DType: graph.Uint8, Dims: []int64{}, I64: []int64{120}},
			wz,
			{Name: "yz", DType: graph.Uint8, Dims: []int64{}, I64: []int64{128}},
			{Name: "b", DType: graph.Int32, Dims: []int64{M}, I64: pattern(M, 9, -5000, 5000)}},
		Nodes: []graph.Node{{Name: "q", Op: "QuantizeLinear", Inputs: []string{"x", "xs", "xz"}, Outputs: []string{"xq"}}},
	}
	g.Outputs[0].DType = graph.Int32
	if qlinear {
		g.Outputs[0].DType = graph.Uint8
		g.Nodes = append(g.Nodes, graph.Node{Name: "conv", Op: "QLinearConv", Attrs: attrs,
			Inputs: []string{"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, Outputs: []string{"y"}})
	} else {
		g.Nodes = append(g.Nodes, graph.Node{Name: "conv", Op: "ConvInteger", Attrs: attrs,
			Inputs: []string{"xq", "w", "xz", "wz"}, Outputs: []string{"y"}})
	}
	return g, x
}

// TestQConvPaths runs integer convolutions down each of the engine's paths
// (per-block im2col with grouped weights, pointwise, the exact float
// depthwise path, the int32 results of ConvInteger) and checks them
// against the constant folder, bit for bit, with every micro-kernel. The
// im2col's geometries cover its byte image (strides 1 and 2, strips of 16
// positions over one output row or up to 8, dilation) and the float path
// it falls back to (stride 3; an image over its size cap); products of more and fewer than 4
// 16-column strips and row counts that are not a multiple of 4 cover both
// VNNI micro-kernels.
func TestQConvPaths(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	cases := []struct {
		name                               string
		C, M, G, H, W, K, stride, pad, dil int64
		qlinear                            bool
	}{
		{"3x3-pad", 8, 24, 1, 13, 11, 3, 1, 1, 0, true},
		{"3x3-stride2-groups2", 8, 12, 2, 15, 15, 3, 2, 1, 0, true},
		{"pointwise", 40, 70, 1, 9, 9, 1, 1, 0, 0, true},
		{"3x3-amx", 32, 48, 1, 10, 10, 3, 1, 1, 0, true},
		{"depthwise-3x3", 32, 32, 32, 14, 14, 3, 1, 1, 0, true},
		{"depthwise-stride2-mult2", 16, 32, 16, 11, 11, 3, 2, 1, 0, true},
		{"depthwise-convinteger", 8, 8, 8, 7, 7, 5, 1, 2, 0, false},
		{"convinteger-7x7", 3, 16, 1, 20, 20, 7, 2, 3, 0, false},
		{"3x3-wide-rows", 6, 13, 1, 30, 37, 3, 1, 1, 0, true},
		{"3x3-stride2-wide", 5, 10, 1, 60, 71, 3, 2, 1, 0, true},
		{"3x3-dilated", 4, 9, 1, 17, 23, 3, 1, 2, 2, true},
		{"5x5-narrow", 3, 7, 1, 30, 5, 5, 1, 2, 0, true},
		{"3x3-two-columns", 5, 6, 1, 40, 2, 3, 1, 1, 0, true},
		{"3x3-stride3", 4, 11, 1, 22, 40, 3, 3, 1, 0, true},
		{"1x1-stride2", 12, 20, 1, 19, 37, 1, 2, 0, 0, true},
		{"3x3-big-image", 4800, 8, 1, 3, 80, 3, 1, 1, 0, true},
		// few output positions: run transposed, positions as rows
		// (rowsConv; the cases above with at most 256 positions too):
		// channels in groups of 4 strips and a last strip alone, a
		// stride, a dilation (no 8-byte copies), a 7-wide kernel, int32
		// results; and two groups, which stay in the column form
		{"rows-7x7", 64, 80, 1, 7, 7, 3, 1, 1, 0, true},
		{"rows-stride2", 32, 48, 1, 13, 13, 3, 2, 1, 0, true},
		{"rows-dilated", 16, 32, 1, 8, 8, 3, 1, 2, 2, true},
		{"groups2-7x7", 16, 32, 2, 7, 7, 3, 1, 1, 0, true},
		{"rows-7-wide", 3, 32, 1, 16, 16, 7, 2, 3, 0, true},
		{"rows-convinteger", 24, 40, 1, 6, 6, 5, 1, 2, 0, false},
	}
	for _, c := range cases {
		g, x := qconvGraph(c.C, c.M, c.G, c.H, c.W, c.K, c.stride, c.pad, c.dil, c.qlinear, false)
		foldEveryQGemmKernel(t, ctx, be, c.name, g, x)
	}
	// a strided 1x1 padded after the input (ONNX pads [0, 0, 1, 1]): its
	// last output row and column read the padding, so the column form
	// builds its im2col from the byte image, not by gathering input bytes
	for _, sz := range []int64{8, 9} {
		g, x := qconvGraph(12, 20, 1, sz, sz, 1, 2, 0, 0, true, false)
		for i, a := range g.Nodes[1].Attrs {
			if a.Name == "pads" {
				g.Nodes[1].Attrs[i].Ints = []int64{0, 0, 1, 1}
			}
		}
		foldEveryQGemmKernel(t, ctx, be, fmt.Sprintf("1x1-stride2-padded-after-%dx%d", sz, sz), g, x)
	}
	// symmetric weights (zero points 0): the epilogue's per-tensor terms
	for _, sz := range []int64{7, 20} {
		g, x := qconvGraph(48, 64, 1, sz, sz, 3, 1, 1, 0, true, true)
		foldEveryQGemmKernel(t, ctx, be, fmt.Sprintf("symmetric-%dx%d", sz, sz), g, x)
	}
}

// foldEveryQGemmKernel runs g on x through be with each QGEMM
// micro-kernel in turn and checks the output "y" against the constant
// folder's, bit for bit; it leaves the best kernel selected.
func foldEveryQGemmKernel(t *testing.T, ctx context.Context, be libml.Backend, name string, g *graph.Graph, x *graph.Tensor) {
	t.Helper()
	fold, err := foldGraph(g, []*graph.Tensor{x})
	if err != nil {
		t.Fatalf("%s: fold: %v", name, err)
	}
	defer ncpu.SetQGemmKernel(ncpu.QGemmBest)
	for _, k := range []int{ncpu.QGemmBest, ncpu.QGemmNoAMX, ncpu.QGemmNoVNNI, ncpu.QGemmPortable} {
		ncpu.SetQGemmKernel(k)
		if err := runAndCompare(ctx, be, name, g, x, fold["y"]); err != nil {
			t.Errorf("%s (micro-kernel %d): %v", name, k, err)
		}
	}
}

// qconv3DCases are the 3-D integer convolutions TestQConv3D and
// TestQuantORTOracle run.
var qconv3DCases = []struct {
	name                string
	C, M, G             int64
	sp                  []int64
	K, stride, pad, dil int64
	qlinear             bool
}{
	{"3x3x3-pad", 4, 6, 1, []int64{5, 6, 7}, 3, 1, 1, 0, true},
	{"3x3x3-stride2-dilated", 3, 5, 1, []int64{9, 8, 10}, 3, 2, 1, 2, true},
	{"3x3x3-groups2", 4, 6, 2, []int64{4, 5, 6}, 3, 1, 0, 0, true},
	{"3x3x3-depthwise", 4, 4, 4, []int64{4, 6, 6}, 3, 1, 1, 0, true},
	{"1x1x1-pointwise", 8, 5, 1, []int64{3, 4, 5}, 1, 1, 0, 0, true},
	{"convinteger-3x3x3", 3, 4, 1, []int64{5, 5, 5}, 3, 1, 1, 0, false},
}

// TestQConv3D runs 3-D QLinearConv and ConvInteger (the depth windows
// unfolded into the channels of one 2-D integer convolution, the depth
// padding filled with the input's zero point) and checks them against the
// constant folder, bit for bit, with every micro-kernel: depth padding,
// strides with dilation, groups, depthwise, a pointwise 1x1x1 read in
// place, int32 results.
func TestQConv3D(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	for _, c := range qconv3DCases {
		g, x := qconvGraphND(c.C, c.M, c.G, c.sp, c.K, c.stride, c.pad, c.dil, c.qlinear, false)
		foldEveryQGemmKernel(t, ctx, be, c.name, g, x)
	}
}

// TestQuantORTOracle runs the integer products and convolutions of
// TestQGemmKernelsAgree and TestQConvPaths through ONNX Runtime, the
// reference oracle: the engine's folder (which the kernels match bit for
// bit) must give ONNX Runtime's results exactly.
func TestQuantORTOracle(t *testing.T) {
	be := ortBackend(t)
	ctx := context.Background()
	type tc struct {
		name string
		g    *graph.Graph
		x    *graph.Tensor
	}
	var cases []tc
	for _, c := range []qgemmCase{
		{name: "3x5x7-signed", M: 3, K: 5, N: 7, xSigned: true, wSigned: true},
		{name: "17x33x65-percol", M: 17, K: 33, N: 65, perCol: true},
		{name: "qlinear-31x47x70", M: 31, K: 47, N: 70, qlinear: true, wSigned: true, perCol: true},
		{name: "qlinear-xB-8x19x23", M: 8, K: 19, N: 23, qlinear: true, xAsB: true},
	} {
		g, x := c.graph()
		cases = append(cases, tc{c.name, g, x})
	}
	for _, c := range []struct {
		name                          string
		C, M, G, H, W, K, stride, pad int64
		qlinear                       bool
	}{
		{"3x3-pad", 8, 24, 1, 13, 11, 3, 1, 1, true},
		{"3x3-stride2-groups2", 8, 12, 2, 15, 15, 3, 2, 1, true},
		{"depthwise-3x3", 32, 32, 32, 14, 14, 3, 1, 1, true},
		{"convinteger-7x7", 3, 16, 1, 20, 20, 7, 2, 3, false},
	} {
		g, x := qconvGraph(c.C, c.M, c.G, c.H, c.W, c.K, c.stride, c.pad, 0, c.qlinear, true)
		cases = append(cases, tc{c.name, g, x})
	}
	// 3-D (TestQConv3D)
	for _, c := range qconv3DCases {
		g, x := qconvGraphND(c.C, c.M, c.G, c.sp, c.K, c.stride, c.pad, c.dil, c.qlinear, true)
		cases = append(cases, tc{c.name, g, x})
	}
	for _, c := range cases {
		fold, err := foldGraph(c.g, []*graph.Tensor{c.x})
		if err != nil {
			t.Fatalf("%s: fold: %v", c.name, err)
		}
		if err := runAndCompare(ctx, be, c.name, c.g, c.x, fold["y"]); err != nil {
			t.Errorf("%s: ONNX Runtime vs the engine: %v", c.name, err)
		}
	}
}

// Malformed quantised graphs are refused with an error that says what is
// wrong, never a panic: zero points of the wrong type or length, scales
// computed at run time, a bias of the wrong type, int32 where 8 bits are
// needed, per-axis scales that do not fit.
func TestQuantMalformed(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	base := func() *graph.Graph {
		g, _ := qgemmCase{name: "m", M: 4, K: 8, N: 5, qlinear: true, wSigned: true}.graph()
		return g
	}
	init := func(g *graph.Graph, name string) *graph.Tensor {
		for _, t := range g.Initializers {
			if t.Name == name {
				return t
			}
		}
		panic(name)
	}
	cases := []struct {
		name, want string
		edit       func(g *graph.Graph)
	}{
		{"zero point type", "zero point is uint8", func(g *graph.Graph) {
			z := init(g, "wz")
			z.DType = graph.Uint8
		}},
		{"zero point length", "zero point has 3 values", func(g *graph.Graph) {
			z := init(g, "wz")
			z.Dims, z.I64 = []int64{3}, []int64{0, 0, 0}
		}},
		{"output zero point int32", "uint8 and int8 only", func(g *graph.Graph) {
			z := init(g, "yz")
			z.DType = graph.Int32
		}},
		{"run-time scale", "must be a constant", func(g *graph.Graph) {
			g.Nodes = append([]graph.Node{{Name: "abs", Op: "ReduceMax", Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}},
				Inputs: []string{"x"}, Outputs: []string{"xmax"}}}, g.Nodes...)
			for i := range g.Nodes {
				for j, in := range g.Nodes[i].Inputs {
					if in == "ys" {
						g.Nodes[i].Inputs[j] = "xmax"
					}
				}
			}
		}},
		{"per-axis scale", "does not fit axis", func(g *graph.Graph) {
			s := init(g, "xs")
			s.Dims, s.F32 = []int64{3}, []float32{1, 2, 3}
			z := init(g, "xz")
			z.Dims, z.I64 = []int64{3}, []int64{0, 0, 0}
		}},
	}
	for _, c := range cases {
		g := base()
		c.edit(g)
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Errorf("%s: panic: %v", c.name, p)
				}
			}()
			inst, err := be.LoadModel(ctx, c.name, g)
			if err == nil {
				err = be.ConfigureBatch(inst, 1)
				inst.Close()
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: err = %v, want one saying %q", c.name, err, c.want)
			}
		}()
	}
}

// TestQuantizedZooORT: whole quantised models (libml/quantize over the
// zoo's SqueezeNet 1.1, MobileNetV2 at 64x64, ResNet-18 at 32x32, and a
// small BERT-shaped encoder) give ONNX Runtime's outputs: their integer
// layers exactly, the float layers after them (global pooling, the
// classifier, layer norm, softmax) to float precision. Their residual
// additions are quantised (uint8 inputs and sum), and the engine runs
// each as one QLinearAdd kernel.
func TestQuantizedZooORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range []struct {
		name string
		opt  zoo.Options
		adds int // residual additions quantised and fused
	}{
		{"squeezenet11", zoo.Options{Height: 64, Width: 64, Classes: 10, Seed: 3}, 0},
		{"mobilenetv2", zoo.Options{Height: 64, Width: 64, Classes: 10, Seed: 4}, 10},
		{"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 6}, 8},
		{"bert", zoo.Options{Layers: 1, SeqLen: 8, Hidden: 32, Heads: 2, FF: 64, Seed: 5}, 2},
	} {
		g, q, st, sets := quantizedZoo(t, cb, c.name, c.opt, 2)
		if st.Adds != c.adds {
			t.Errorf("%s: %d additions quantised, want %d", c.name, st.Adds, c.adds)
		}
		if fused := qlinearAdds(t, q, sets[0]); fused != c.adds {
			t.Errorf("%s-int8: %d QLinearAdd kernels, want %d", c.name, fused, c.adds)
		}
		in := g.Inputs[0]
		x := sets[2][in.Name]
		want := &graph.Tensor{Name: q.Outputs[0].Name, DType: graph.Float32}
		// the output's shape: one request of the float model
		fo, err := cb.RunGraph(ctx, g, map[string]*graph.Tensor{in.Name: x})
		if err != nil {
			t.Fatal(err)
		}
		want.Dims = fo[g.Outputs[0].Name].Dims
		if _, err := againstORT(ctx, ob, cb, c.name, q, x, want); err != nil {
			t.Errorf("%s-int8: the engine vs ONNX Runtime: %v", c.name, err)
		}
	}
}

// quantizedZoo quantises zoo model name (libml/quantize) on be with calib
// seeded inputs and returns the float graph, the quantised one, what
// quantize did, and calib + 1 inputs: the last one was not calibrated on.
func quantizedZoo(t *testing.T, be *cpu.Backend, name string, opt zoo.Options, calib int) (g, q *graph.Graph, st quantize.Stats, sets []map[string]*graph.Tensor) {
	t.Helper()
	g, err := zoo.Build(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	if sets, err = quantize.Samples(g, calib+1, 1, zoo.Input); err != nil {
		t.Fatal(err)
	}
	if q, st, err = quantize.Model(context.Background(), g, be.RunGraph, sets[:calib]); err != nil {
		t.Fatal(err)
	}
	return g, q, st, sets
}

// qlinearAdds compiles g for the shapes of inputs and counts its fused
// QLinearAdd kernels (QUANT mode 5).
func qlinearAdds(t *testing.T, g *graph.Graph, inputs map[string]*graph.Tensor) int {
	t.Helper()
	m, err := engine.Load(g, engine.Options{Units: 2})
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int64{}
	for name, x := range inputs {
		shapes[name] = x.Dims
	}
	p, err := m.Compile(shapes)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range p.Kernels {
		if k.Op == engine.OpQuant && k.P[3] == 5 {
			n++
		}
	}
	return n
}

// qdqGraph is a model in the QDQ form: x is quantised and dequantised,
// then a Conv (3x3, padding 1) or a MatMul reads it with dequantised int8
// weights (per output channel or per column) and a dequantised int32 bias
// (Conv), a Relu follows, and the result is quantised (uint8, zero point
// 0) and dequantised.
func qdqGraph(conv bool) (*graph.Graph, *graph.Tensor) {
	f := func(name string, dims []int64, v ...float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
	}
	i := func(name string, dt graph.DType, dims []int64, v ...int64) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: dt, Dims: dims, I64: v}
	}
	const C, M, H, K, N = 4, 6, 5, 12, 7
	xd, wd, sw := []int64{1, C, H, H}, []int64{M, C, 3, 3}, make([]float32, M)
	if !conv {
		xd, wd, sw = []int64{3, K}, []int64{K, N}, make([]float32, N)
	}
	n := numelOf(xd)
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: xd, F32: make([]float32, n)}
	for j, v := range pattern(int64(n), 21, -300, 300) {
		x.F32[j] = float32(v) / 100
	}
	for j := range sw {
		sw[j] = 0.004 + float32(j)*0.001
	}
	sx := float32(0.025)
	sb := make([]float32, len(sw))
	for j := range sb {
		sb[j] = sx * sw[j]
	}
	g := &graph.Graph{Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: xd}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Initializers: []*graph.Tensor{f("sx", []int64{}, sx), i("zx", graph.Uint8, []int64{}, 128),
			i("wq", graph.Int8, wd, pattern(numelOf(wd), 4, -127, 127)...), f("sw", []int64{int64(len(sw))}, sw...),
			i("zw", graph.Int8, []int64{int64(len(sw))}, make([]int64, len(sw))...),
			f("sy", []int64{}, 0.05), i("zy", graph.Uint8, []int64{}, 0)},
		Nodes: []graph.Node{
			{Name: "qx", Op: "QuantizeLinear", Inputs: []string{"x", "sx", "zx"}, Outputs: []string{"xq"}},
			{Name: "dqx", Op: "DequantizeLinear", Inputs: []string{"xq", "sx", "zx"}, Outputs: []string{"xd"}},
		},
	}
	waxis := int64(0)
	op := graph.Node{Name: "conv", Op: "Conv", Inputs: []string{"xd", "wd", "bd"}, Outputs: []string{"y0"},
		Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 1, 1, 1}}}}
	if !conv {
		waxis = 1
		op = graph.Node{Name: "mm", Op: "MatMul", Inputs: []string{"xd", "wd"}, Outputs: []string{"y0"}}
	} else {
		g.Initializers = append(g.Initializers, i("bq", graph.Int32, []int64{M}, pattern(M, 8, -2000, 2000)...),
			f("sb", []int64{M}, sb...))
		g.Nodes = append(g.Nodes, graph.Node{Name: "dqb", Op: "DequantizeLinear", Inputs: []string{"bq", "sb"}, Outputs: []string{"bd"},
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 0}}})
	}
	g.Nodes = append(g.Nodes,
		graph.Node{Name: "dqw", Op: "DequantizeLinear", Inputs: []string{"wq", "sw", "zw"}, Outputs: []string{"wd"},
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: waxis}}},
		op,
		graph.Node{Name: "relu", Op: "Relu", Inputs: []string{"y0"}, Outputs: []string{"y1"}},
		graph.Node{Name: "qy", Op: "QuantizeLinear", Inputs: []string{"y1", "sy", "zy"}, Outputs: []string{"yq"}},
		graph.Node{Name: "dqy", Op: "DequantizeLinear", Inputs: []string{"yq", "sy", "zy"}, Outputs: []string{"y"}})
	return g, x
}

func numelOf(d []int64) int64 {
	n := int64(1)
	for _, v := range d {
		n *= v
	}
	return n
}

// TestQDQFused: a model in the QDQ form runs its Conv and MatMul as
// integer kernels (the loader fuses each QuantizeLinear(op(Dequantize...))
// into QLinearConv / QLinearMatMul), and gives ONNX Runtime's outputs,
// which fuses them too. Against the float reading of the same graph (the
// constant folder), no output is more than one quantum (y's scale) off.
func TestQDQFused(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, conv := range []bool{true, false} {
		g, x := qdqGraph(conv)
		p := compileGraph(t, g, engine.Options{Units: 2}, map[string][]int64{"x": x.Dims})
		fusedOp := false
		for _, k := range p.Kernels {
			fusedOp = fusedOp || k.Op == engine.OpQGemm
		}
		if !fusedOp {
			t.Fatalf("conv %v: no integer kernel in\n%s", conv, p)
		}
		fold, err := foldGraph(g, []*graph.Tensor{x})
		if err != nil {
			t.Fatal(err)
		}
		want := fold["y"]
		ours, err := againstORT(ctx, ob, cb, "qdq", g, x, want)
		if ours == nil {
			t.Fatal(err)
		}
		if err != nil {
			t.Errorf("conv %v: the engine vs ONNX Runtime: %v", conv, err)
		}
		off := 0
		for j, v := range ours.F32 {
			d := v - want.F32[j]
			if d > 0.0501 || d < -0.0501 {
				t.Fatalf("conv %v: element %d = %v, the float reading %v: more than one quantum", conv, j, v, want.F32[j])
			}
			if d != 0 {
				off++
			}
		}
		t.Logf("conv %v: %d of %d outputs one quantum off the float reading", conv, off, len(ours.F32))
	}
}

// TestQConvRowsChoice: an integer convolution with a window wider than
// 1x1, one group and at most 256 output positions an image compiles to
// QGEMM's transposed form (P[27] = 2, the weights in panels), at every
// batch size; a 28x28 output, a strided 1x1, a grouped one, or a backend
// that asks for none (engine.Options.NoConvRows) keep the column form
// (P[27] = 1).
func TestQConvRowsChoice(t *testing.T) {
	cases := []struct {
		name                       string
		C, M, G, HW, K, stride, pd int64
		noRows                     bool
		want                       int64
	}{
		{"3x3-7x7", 32, 64, 1, 7, 3, 1, 1, false, 2},
		{"3x3-16x16", 16, 32, 1, 16, 3, 1, 1, false, 2},
		{"3x3-stride2-to-14x14", 16, 32, 1, 28, 3, 2, 1, false, 2},
		{"3x3-28x28", 16, 32, 1, 28, 3, 1, 1, false, 1},
		{"1x1-stride2", 32, 64, 1, 14, 1, 2, 0, false, 1},
		{"3x3-groups2", 32, 64, 2, 7, 3, 1, 1, false, 1},
		{"3x3-7x7-norows", 32, 64, 1, 7, 3, 1, 1, true, 1},
	}
	for _, c := range cases {
		g, x := qconvGraph(c.C, c.M, c.G, c.HW, c.HW, c.K, c.stride, c.pd, 0, true, false)
		g.Inputs[0].Dims = append([]int64{-1}, x.Dims[1:]...) // any batch
		m, err := engine.Load(g, engine.Options{Units: 2, NoConvRows: c.noRows})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for _, batch := range []int64{1, 3} {
			shape := append([]int64{batch}, x.Dims[1:]...)
			p, err := m.Compile(map[string][]int64{"x": shape})
			if err != nil {
				t.Fatalf("%s batch %d: %v", c.name, batch, err)
			}
			got := int64(-1)
			for _, k := range p.Kernels {
				if k.Op == engine.OpQGemm {
					got = k.P[27]
				}
			}
			if got != c.want {
				t.Errorf("%s batch %d: QGEMM P[27] = %d, want %d", c.name, batch, got, c.want)
			}
		}
	}
}

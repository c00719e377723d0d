package cpu

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
	ncpu "sluice/native/cpu"
)

// tin is one input of an op test: a runtime float input, or a constant
// (initializer) when konst is set or ints are given.
type tin struct {
	name  string
	shape []int64
	data  []float32 // nil: random in [lo, hi)
	ints  []int64   // an int64 initializer
	konst bool
	lo    float32
	hi    float32
}

type opCase struct {
	name  string
	opset int64
	nodes []graph.Node
	ins   []tin
	outs  []string
	tol   float64
}

func attrInts(name string, v ...int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v}
}
func attrInt(name string, v int64) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrInt, I: v}
}
func attrF(name string, v float32) graph.Attr {
	return graph.Attr{Name: name, Kind: graph.AttrFloat, F: v}
}
func attrS(name, v string) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrString, S: v} }

// nd builds a one-node case whose output is "y".
func nd(op string, ins []string, attrs ...graph.Attr) []graph.Node {
	return []graph.Node{{Name: op + "_node", Op: op, Inputs: ins, Outputs: []string{"y"}, Attrs: attrs}}
}

type prng struct{ s uint64 }

func (r *prng) f(lo, hi float32) float32 {
	r.s = r.s*6364136223846793005 + 1442695040888963407
	return lo + (hi-lo)*float32(r.s>>40)/float32(1<<24)
}

// refRun evaluates a graph node by node with the reference evaluator.
func refRun(g *graph.Graph, vals map[string]*engine.Tensor) (map[string]*engine.Tensor, error) {
	for _, n := range g.Nodes {
		ins := make([]*engine.Tensor, len(n.Inputs))
		for i, in := range n.Inputs {
			if in != "" {
				ins[i] = vals[in]
			}
		}
		outs, err := engine.Eval(&n, g.Opset, ins)
		if err != nil {
			return nil, err
		}
		for i, o := range n.Outputs {
			if o != "" && i < len(outs) {
				vals[o] = outs[i]
			}
		}
	}
	return vals, nil
}

func newTestBackend(t testing.TB, units int) *Backend {
	t.Helper()
	b := New()
	if err := b.Init(context.Background(), libml.BackendConfig{Units: units}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Error(err)
		}
	})
	return b
}

func (tc *opCase) run(t *testing.T, b *Backend) {
	g, feeds, vals := tc.graph()
	outs := tc.outputs()
	want, err := refRun(g, vals)
	if err != nil {
		t.Fatalf("reference: %v", err)
	}
	got, err := b.RunGraph(context.Background(), g, feeds)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	tol := tc.tol
	if tol == 0 {
		tol = 1e-4
	}
	for _, o := range outs {
		w, gt := want[o], got[o]
		if gt == nil {
			t.Fatalf("output %s missing", o)
		}
		if fmt.Sprint(w.Shape) != fmt.Sprint(gt.Dims) {
			t.Fatalf("output %s: shape %v, want %v", o, gt.Dims, w.Shape)
		}
		if err := closeTo(gt.F32, w.F, tol); err != nil {
			t.Fatalf("output %s: %v", o, err)
		}
	}
}

// outputs names the case's graph outputs.
func (tc *opCase) outputs() []string {
	if tc.outs == nil {
		return []string{"y"}
	}
	return tc.outs
}

// graph builds the case's graph, its feeds, and every input's value for
// the reference evaluator, from the case's fixed seed.
func (tc *opCase) graph() (*graph.Graph, map[string]*graph.Tensor, map[string]*engine.Tensor) {
	r := &prng{s: 12345}
	opset := tc.opset
	if opset == 0 {
		opset = 17
	}
	g := &graph.Graph{Name: tc.name, Opset: opset, Nodes: tc.nodes}
	feeds := map[string]*graph.Tensor{}
	vals := map[string]*engine.Tensor{}
	for _, in := range tc.ins {
		if in.ints != nil {
			g.Initializers = append(g.Initializers, &graph.Tensor{Name: in.name, DType: graph.Int64, Dims: in.shape, I64: in.ints})
			vals[in.name] = engine.NewInt(in.shape, in.ints)
			continue
		}
		data := in.data
		if data == nil {
			lo, hi := in.lo, in.hi
			if lo == 0 && hi == 0 {
				lo, hi = -2, 2
			}
			n := int64(1)
			for _, d := range in.shape {
				n *= d
			}
			data = make([]float32, n)
			for i := range data {
				data[i] = r.f(lo, hi)
			}
		}
		gt := &graph.Tensor{Name: in.name, DType: graph.Float32, Dims: in.shape, F32: data}
		vals[in.name] = engine.NewFloat(in.shape, data)
		if in.konst {
			g.Initializers = append(g.Initializers, gt)
		} else {
			g.Inputs = append(g.Inputs, graph.ValueInfo{Name: in.name, DType: graph.Float32, Dims: in.shape})
			feeds[in.name] = gt
		}
	}
	for _, o := range tc.outputs() {
		g.Outputs = append(g.Outputs, graph.ValueInfo{Name: o, DType: graph.Float32})
	}
	return g, feeds, vals
}

// closeTo compares with |a-b| <= tol*(1+|b|).
func closeTo(got, want []float32, tol float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		a, b := float64(got[i]), float64(want[i])
		if math.IsNaN(a) != math.IsNaN(b) || math.Abs(a-b) > tol*(1+math.Abs(b)) {
			return fmt.Errorf("element %d: got %g, want %g", i, a, b)
		}
	}
	return nil
}

func x4(n, c, h, w int64) []int64 { return []int64{n, c, h, w} }

func opCases() []opCase {
	cs := []opCase{
		// convolutions: every lowering path (in-block im2col, im2col
		// workspace + GEMM, 1x1 GEMM, depthwise) and geometry
		{name: "conv3x3_pad1", nodes: nd("Conv", []string{"x", "w", "b"}, attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 3, 20, 20)}, {name: "w", shape: x4(8, 3, 3, 3), konst: true}, {name: "b", shape: []int64{8}, konst: true}}},
		{name: "conv_small_output", nodes: nd("Conv", []string{"x", "w"}, attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(1, 16, 5, 5)}, {name: "w", shape: x4(32, 16, 3, 3), konst: true}}},
		{name: "conv_stride2_asym", nodes: nd("Conv", []string{"x", "w"}, attrInts("strides", 2, 2), attrInts("pads", 0, 1, 2, 1)),
			ins: []tin{{name: "x", shape: x4(2, 4, 33, 31)}, {name: "w", shape: x4(6, 4, 3, 5), konst: true}}},
		{name: "conv_dilated", nodes: nd("Conv", []string{"x", "w"}, attrInts("dilations", 2, 3), attrInts("pads", 2, 3, 2, 3)),
			ins: []tin{{name: "x", shape: x4(1, 3, 24, 24)}, {name: "w", shape: x4(4, 3, 3, 3), konst: true}}},
		{name: "conv_grouped", nodes: nd("Conv", []string{"x", "w", "b"}, attrInt("group", 2), attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 8, 18, 18)}, {name: "w", shape: x4(6, 4, 3, 3), konst: true}, {name: "b", shape: []int64{6}, konst: true}}},
		{name: "conv_depthwise", nodes: nd("Conv", []string{"x", "w", "b"}, attrInt("group", 8), attrInts("pads", 1, 1, 1, 1), attrInts("strides", 2, 2)),
			ins: []tin{{name: "x", shape: x4(2, 8, 17, 17)}, {name: "w", shape: x4(8, 1, 3, 3), konst: true}, {name: "b", shape: []int64{8}, konst: true}}},
		{name: "conv_depthwise_mult2_dil", nodes: nd("Conv", []string{"x", "w"}, attrInt("group", 4), attrInts("dilations", 2, 2), attrInts("pads", 2, 2, 2, 2)),
			ins: []tin{{name: "x", shape: x4(1, 4, 12, 12)}, {name: "w", shape: x4(8, 1, 3, 3), konst: true}}},
		{name: "conv_depthwise_5x5_s3", nodes: nd("Conv", []string{"x", "w"}, attrInt("group", 3), attrInts("pads", 2, 1, 2, 1), attrInts("strides", 3, 3)),
			ins: []tin{{name: "x", shape: x4(1, 3, 19, 16)}, {name: "w", shape: x4(3, 1, 5, 5), konst: true}}},
		{name: "conv_1x1", nodes: nd("Conv", []string{"x", "w", "b"}),
			ins: []tin{{name: "x", shape: x4(3, 16, 9, 7)}, {name: "w", shape: x4(24, 16, 1, 1), konst: true}, {name: "b", shape: []int64{24}, konst: true}}},
		{name: "conv_1x1_grouped", nodes: nd("Conv", []string{"x", "w"}, attrInt("group", 4)),
			ins: []tin{{name: "x", shape: x4(2, 16, 6, 6)}, {name: "w", shape: x4(8, 4, 1, 1), konst: true}}},
		{name: "conv_1x1_stride2", nodes: nd("Conv", []string{"x", "w"}, attrInts("strides", 2, 2)),
			ins: []tin{{name: "x", shape: x4(2, 16, 10, 10)}, {name: "w", shape: x4(8, 16, 1, 1), konst: true}}},
		{name: "conv_same_upper", nodes: nd("Conv", []string{"x", "w"}, attrS("auto_pad", "SAME_UPPER"), attrInts("strides", 2, 2)),
			ins: []tin{{name: "x", shape: x4(1, 2, 10, 9)}, {name: "w", shape: x4(3, 2, 4, 4), konst: true}}},
		{name: "conv_1d", nodes: nd("Conv", []string{"x", "w", "b"}, attrInts("pads", 1, 2), attrInts("strides", 2)),
			ins: []tin{{name: "x", shape: []int64{2, 3, 30}}, {name: "w", shape: []int64{5, 3, 4}, konst: true}, {name: "b", shape: []int64{5}, konst: true}}},
		{name: "conv_large_output", nodes: nd("Conv", []string{"x", "w"}, attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(1, 8, 48, 48)}, {name: "w", shape: x4(16, 8, 3, 3), konst: true}}},
		// Winograd F(2x2, 3x3): 3x3 stride 1 with >= 16 channels; odd
		// output sizes (partial tiles), asymmetric and no padding
		{name: "conv_winograd", nodes: nd("Conv", []string{"x", "w", "b"}, attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 16, 30, 30)}, {name: "w", shape: x4(24, 16, 3, 3), konst: true}, {name: "b", shape: []int64{24}, konst: true}}},
		{name: "conv_winograd_odd", nodes: nd("Conv", []string{"x", "w"}, attrInts("pads", 0, 1, 2, 0)),
			ins: []tin{{name: "x", shape: x4(1, 17, 21, 19)}, {name: "w", shape: x4(16, 17, 3, 3), konst: true}}},
		{name: "conv_winograd_nopad", nodes: nd("Conv", []string{"x", "w"}),
			ins: []tin{{name: "x", shape: x4(3, 32, 25, 26)}, {name: "w", shape: x4(32, 32, 3, 3), konst: true}}},

		{name: "convtranspose_s2", nodes: nd("ConvTranspose", []string{"x", "w", "b"}, attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1), attrInts("output_padding", 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 4, 7, 6)}, {name: "w", shape: x4(4, 3, 3, 3), konst: true}, {name: "b", shape: []int64{3}, konst: true}}},
		{name: "convtranspose_grouped_dil", nodes: nd("ConvTranspose", []string{"x", "w"}, attrInt("group", 2), attrInts("dilations", 2, 1), attrInts("strides", 1, 2)),
			ins: []tin{{name: "x", shape: x4(1, 4, 5, 5)}, {name: "w", shape: x4(4, 2, 2, 3), konst: true}}},
		{name: "convtranspose_output_shape", nodes: nd("ConvTranspose", []string{"x", "w"}, attrInts("strides", 3, 2), attrInts("output_shape", 10, 8)),
			ins: []tin{{name: "x", shape: x4(1, 1, 3, 3)}, {name: "w", shape: x4(1, 2, 3, 3), konst: true}}},
		{name: "convtranspose_1d", nodes: nd("ConvTranspose", []string{"x", "w"}, attrInts("strides", 2)),
			ins: []tin{{name: "x", shape: []int64{1, 2, 6}}, {name: "w", shape: []int64{2, 3, 3}, konst: true}}},

		// GEMM family
		{name: "gemm_transB_bias", nodes: nd("Gemm", []string{"a", "w", "c"}, attrInt("transB", 1)),
			ins: []tin{{name: "a", shape: []int64{4, 50}}, {name: "w", shape: []int64{30, 50}, konst: true}, {name: "c", shape: []int64{30}, konst: true}}},
		{name: "gemm_transA_alpha_beta_col", nodes: nd("Gemm", []string{"a", "w", "c"}, attrInt("transA", 1), attrF("alpha", 0.5), attrF("beta", 2)),
			ins: []tin{{name: "a", shape: []int64{20, 3}}, {name: "w", shape: []int64{20, 7}, konst: true}, {name: "c", shape: []int64{3, 1}, konst: true}}},
		{name: "gemm_full_c_runtime_b", nodes: nd("Gemm", []string{"a", "w", "c"}),
			ins: []tin{{name: "a", shape: []int64{5, 6}}, {name: "w", shape: []int64{6, 9}}, {name: "c", shape: []int64{5, 9}}}},
		{name: "gemm_scalar_c", nodes: nd("Gemm", []string{"a", "w", "c"}, attrF("beta", 0.25)),
			ins: []tin{{name: "a", shape: []int64{2, 6}}, {name: "w", shape: []int64{6, 3}, konst: true}, {name: "c", shape: []int64{}, konst: true}}},
		{name: "gemm_large", nodes: nd("Gemm", []string{"a", "w"}, attrInt("transB", 1)),
			ins: []tin{{name: "a", shape: []int64{8, 512}}, {name: "w", shape: []int64{1000, 512}, konst: true}}},
		{name: "matmul_2d", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{7, 13}}, {name: "b", shape: []int64{13, 5}, konst: true}}},
		{name: "matmul_3d_2d", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{2, 7, 13}}, {name: "b", shape: []int64{13, 5}, konst: true}}},
		{name: "matmul_batched", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{2, 3, 16, 8}}, {name: "b", shape: []int64{2, 3, 8, 16}}}},
		{name: "matmul_broadcast", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{2, 1, 4, 8}}, {name: "b", shape: []int64{1, 3, 8, 5}}}},
		{name: "matmul_1d", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{8}}, {name: "b", shape: []int64{3, 8, 5}}}},
		{name: "matmul_1d_right", nodes: nd("MatMul", []string{"a", "b"}),
			ins: []tin{{name: "a", shape: []int64{3, 4, 8}}, {name: "b", shape: []int64{8}, konst: true}}},

		// normalization
		{name: "batchnorm", nodes: nd("BatchNormalization", []string{"x", "s", "b", "m", "v"}, attrF("epsilon", 1e-3)),
			ins: []tin{{name: "x", shape: x4(2, 5, 4, 3)}, {name: "s", shape: []int64{5}, konst: true}, {name: "b", shape: []int64{5}, konst: true},
				{name: "m", shape: []int64{5}, konst: true}, {name: "v", shape: []int64{5}, konst: true, lo: 0.5, hi: 2}}},
		{name: "layernorm", nodes: nd("LayerNormalization", []string{"x", "s", "b"}, attrF("epsilon", 1e-5)),
			ins: []tin{{name: "x", shape: []int64{2, 5, 64}}, {name: "s", shape: []int64{64}, konst: true}, {name: "b", shape: []int64{64}, konst: true}}},
		{name: "layernorm_axis_2d", nodes: nd("LayerNormalization", []string{"x", "s"}, attrInt("axis", -2)),
			ins: []tin{{name: "x", shape: []int64{3, 4, 6}}, {name: "s", shape: []int64{6}, konst: true}}},
		{name: "softmax_last", opset: 13, nodes: nd("Softmax", []string{"x"}),
			ins: []tin{{name: "x", shape: []int64{3, 5, 17}, lo: -10, hi: 10}}},
		{name: "softmax_axis1", opset: 13, nodes: nd("Softmax", []string{"x"}, attrInt("axis", 1)),
			ins: []tin{{name: "x", shape: []int64{3, 5, 7}}}},
		{name: "softmax_opset11", opset: 11, nodes: nd("Softmax", []string{"x"}, attrInt("axis", 1)),
			ins: []tin{{name: "x", shape: []int64{3, 5, 7}}}},
		{name: "logsoftmax", opset: 13, nodes: nd("LogSoftmax", []string{"x"}),
			ins: []tin{{name: "x", shape: []int64{4, 9}}}},

		// pooling
		{name: "maxpool_3x3_s2", nodes: nd("MaxPool", []string{"x"}, attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 3, 15, 16)}}},
		{name: "maxpool_ceil_dilated", nodes: nd("MaxPool", []string{"x"}, attrInts("kernel_shape", 2, 2), attrInts("strides", 2, 2), attrInt("ceil_mode", 1), attrInts("dilations", 2, 1)),
			ins: []tin{{name: "x", shape: x4(1, 2, 9, 9)}}},
		{name: "maxpool_1d", nodes: nd("MaxPool", []string{"x"}, attrInts("kernel_shape", 3), attrInts("strides", 2)),
			ins: []tin{{name: "x", shape: []int64{2, 3, 11}}}},
		{name: "avgpool_exclude_pad", nodes: nd("AveragePool", []string{"x"}, attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1)),
			ins: []tin{{name: "x", shape: x4(2, 3, 9, 10)}}},
		{name: "avgpool_include_pad_ceil", nodes: nd("AveragePool", []string{"x"}, attrInts("kernel_shape", 3, 3), attrInts("strides", 2, 2), attrInts("pads", 1, 1, 1, 1), attrInt("count_include_pad", 1), attrInt("ceil_mode", 1)),
			ins: []tin{{name: "x", shape: x4(1, 2, 8, 8)}}},
		{name: "globalavgpool", nodes: nd("GlobalAveragePool", []string{"x"}), ins: []tin{{name: "x", shape: x4(2, 7, 5, 6)}}},
		// planes wider than the kernel's 64 running sums, with a remainder
		{name: "globalavgpool_wide", nodes: nd("GlobalAveragePool", []string{"x"}), ins: []tin{{name: "x", shape: x4(2, 3, 37, 41)}}},
		{name: "globalmaxpool", nodes: nd("GlobalMaxPool", []string{"x"}), ins: []tin{{name: "x", shape: x4(2, 7, 5, 6)}}},

		// data movement
		{name: "concat_axis1", nodes: nd("Concat", []string{"a", "b", "c"}, attrInt("axis", 1)),
			ins: []tin{{name: "a", shape: x4(2, 3, 4, 5)}, {name: "b", shape: x4(2, 1, 4, 5)}, {name: "c", shape: x4(2, 2, 4, 5), konst: true}}},
		{name: "concat_last", nodes: nd("Concat", []string{"a", "b"}, attrInt("axis", -1)),
			ins: []tin{{name: "a", shape: []int64{3, 4}}, {name: "b", shape: []int64{3, 2}}}},
		{name: "transpose_0231", nodes: nd("Transpose", []string{"x"}, attrInts("perm", 0, 2, 3, 1)), ins: []tin{{name: "x", shape: x4(2, 3, 4, 5)}}},
		{name: "transpose_default", nodes: nd("Transpose", []string{"x"}), ins: []tin{{name: "x", shape: []int64{3, 4, 5}}}},
		{name: "reshape", nodes: nd("Reshape", []string{"x", "s"}), ins: []tin{{name: "x", shape: x4(2, 3, 4, 5)}, {name: "s", shape: []int64{3}, ints: []int64{0, -1, 5}}}},
		{name: "flatten", nodes: nd("Flatten", []string{"x"}, attrInt("axis", 2)), ins: []tin{{name: "x", shape: x4(2, 3, 4, 5)}}},
		{name: "squeeze_unsqueeze", opset: 13, nodes: []graph.Node{
			{Name: "sq", Op: "Squeeze", Inputs: []string{"x", "ax"}, Outputs: []string{"t"}},
			{Name: "un", Op: "Unsqueeze", Inputs: []string{"t", "ax2"}, Outputs: []string{"t2"}},
			{Name: "r", Op: "Relu", Inputs: []string{"t2"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(2, 1, 4, 1)}, {name: "ax", shape: []int64{2}, ints: []int64{1, 3}}, {name: "ax2", shape: []int64{1}, ints: []int64{0}}}},
		{name: "identity_dropout", nodes: []graph.Node{
			{Name: "i", Op: "Identity", Inputs: []string{"x"}, Outputs: []string{"t"}},
			{Name: "d", Op: "Dropout", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: []int64{3, 4}}}},
		{name: "slice_steps", opset: 13, nodes: nd("Slice", []string{"x", "st", "en", "ax", "sp"}),
			ins: []tin{{name: "x", shape: x4(2, 6, 7, 8)}, {name: "st", shape: []int64{3}, ints: []int64{1, -1, 0}},
				{name: "en", shape: []int64{3}, ints: []int64{6, -100, 100}}, {name: "ax", shape: []int64{3}, ints: []int64{1, 2, 3}},
				{name: "sp", shape: []int64{3}, ints: []int64{2, -2, 3}}}},
		{name: "split", opset: 13, outs: []string{"y", "z"}, nodes: []graph.Node{{Name: "s", Op: "Split", Inputs: []string{"x", "sp"}, Outputs: []string{"y", "z"}, Attrs: []graph.Attr{attrInt("axis", 1)}}},
			ins: []tin{{name: "x", shape: x4(2, 5, 3, 2)}, {name: "sp", shape: []int64{2}, ints: []int64{2, 3}}}},
		{name: "expand", nodes: nd("Expand", []string{"x", "s"}), ins: []tin{{name: "x", shape: []int64{3, 1}}, {name: "s", shape: []int64{3}, ints: []int64{2, 3, 4}}}},
		{name: "gather_axis1", nodes: nd("Gather", []string{"x", "i"}, attrInt("axis", 1)),
			ins: []tin{{name: "x", shape: []int64{2, 5, 3}}, {name: "i", shape: []int64{2, 2}, ints: []int64{4, 0, -1, 2}}}},
		{name: "gather_scalar", nodes: nd("Gather", []string{"x", "i"}),
			ins: []tin{{name: "x", shape: []int64{4, 6}}, {name: "i", shape: []int64{}, ints: []int64{2}}}},

		// resize
		{name: "resize_nearest_asym", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "nearest"), attrS("coordinate_transformation_mode", "asymmetric"), attrS("nearest_mode", "floor")),
			ins: []tin{{name: "x", shape: x4(1, 2, 5, 4)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 2, 3}, konst: true}}},
		{name: "resize_nearest_halfpixel_down", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "nearest")),
			ins: []tin{{name: "x", shape: x4(1, 2, 9, 8)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 0.5, 0.7}, konst: true}}},
		{name: "resize_linear_halfpixel", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "linear")),
			ins: []tin{{name: "x", shape: x4(2, 2, 4, 5)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 2, 2}, konst: true}}},
		{name: "resize_linear_align_sizes", opset: 13, nodes: nd("Resize", []string{"x", "", "", "sz"}, attrS("mode", "linear"), attrS("coordinate_transformation_mode", "align_corners")),
			ins: []tin{{name: "x", shape: x4(1, 3, 4, 5)}, {name: "sz", shape: []int64{4}, ints: []int64{1, 3, 7, 9}}}},
		{name: "resize_linear_pytorch", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "linear"), attrS("coordinate_transformation_mode", "pytorch_half_pixel")),
			ins: []tin{{name: "x", shape: x4(1, 1, 6, 6)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 0.5, 1.5}, konst: true}}},
		{name: "resize_cubic_halfpixel", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "cubic")),
			ins: []tin{{name: "x", shape: x4(1, 2, 6, 5)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 1.7, 0.6}, konst: true}}},
		{name: "resize_cubic_exclude_align", opset: 13, nodes: nd("Resize", []string{"x", "", "", "sz"}, attrS("mode", "cubic"), attrS("coordinate_transformation_mode", "align_corners"), attrInt("exclude_outside", 1), attrF("cubic_coeff_a", -0.5)),
			ins: []tin{{name: "x", shape: x4(1, 1, 5, 7)}, {name: "sz", shape: []int64{4}, ints: []int64{1, 1, 9, 4}}}},
		{name: "upsample_opset9", opset: 9, nodes: nd("Upsample", []string{"x", "sc"}),
			ins: []tin{{name: "x", shape: x4(1, 2, 3, 3)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 2, 2}, konst: true}}},

		// reductions
		{name: "reducemean_keep", opset: 13, nodes: nd("ReduceMean", []string{"x"}, attrInts("axes", 2, 3)), ins: []tin{{name: "x", shape: x4(2, 3, 4, 5)}}},
		{name: "reducemean_nonadjacent", opset: 13, nodes: nd("ReduceMean", []string{"x"}, attrInts("axes", 0, 2), attrInt("keepdims", 0)), ins: []tin{{name: "x", shape: x4(2, 3, 4, 5)}}},
		{name: "reducesum_input_axes", opset: 13, nodes: nd("ReduceSum", []string{"x", "ax"}), ins: []tin{{name: "x", shape: []int64{3, 4, 5}}, {name: "ax", shape: []int64{1}, ints: []int64{-1}}}},
		{name: "reducemax_all", opset: 13, nodes: nd("ReduceMax", []string{"x"}, attrInt("keepdims", 0)), ins: []tin{{name: "x", shape: []int64{3, 4}}}},
		{name: "reducel2", opset: 13, nodes: nd("ReduceL2", []string{"x"}, attrInts("axes", 1)), ins: []tin{{name: "x", shape: []int64{3, 4, 2}}}},
		{name: "reducesumsquare_nonadj", opset: 13, nodes: nd("ReduceSumSquare", []string{"x"}, attrInts("axes", 0, 2)), ins: []tin{{name: "x", shape: []int64{3, 4, 2}}}},

		// binary with broadcasting, fused activation
		{name: "add_same", nodes: nd("Add", []string{"a", "b"}), ins: []tin{{name: "a", shape: x4(2, 3, 4, 5)}, {name: "b", shape: x4(2, 3, 4, 5)}}},
		{name: "mul_channel", nodes: nd("Mul", []string{"a", "b"}), ins: []tin{{name: "a", shape: x4(2, 3, 4, 5)}, {name: "b", shape: []int64{3, 1, 1}, konst: true}}},
		{name: "sub_row", nodes: nd("Sub", []string{"a", "b"}), ins: []tin{{name: "a", shape: x4(2, 3, 4, 5)}, {name: "b", shape: []int64{5}}}},
		{name: "div_scalar", nodes: nd("Div", []string{"a", "b"}), ins: []tin{{name: "a", shape: []int64{4, 5}}, {name: "b", shape: []int64{}, data: []float32{1.7}, konst: true}}},
		{name: "div_outer", nodes: nd("Div", []string{"a", "b"}), ins: []tin{{name: "a", shape: x4(2, 1, 4, 1)}, {name: "b", shape: x4(1, 3, 1, 5), lo: 0.5, hi: 2}}},
		{name: "pow_tensor", nodes: nd("Pow", []string{"a", "b"}), ins: []tin{{name: "a", shape: []int64{3, 4}, lo: 0.1, hi: 2}, {name: "b", shape: []int64{4}}}},
		{name: "pow_const2", nodes: nd("Pow", []string{"a", "b"}), ins: []tin{{name: "a", shape: []int64{3, 4}}, {name: "b", shape: []int64{}, data: []float32{2}, konst: true}}},
		{name: "max_min", nodes: []graph.Node{{Name: "mx", Op: "Max", Inputs: []string{"a", "b"}, Outputs: []string{"t"}}, {Name: "mn", Op: "Min", Inputs: []string{"t", "c"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "a", shape: []int64{3, 4}}, {name: "b", shape: []int64{1, 4}}, {name: "c", shape: []int64{3, 1}}}},
		{name: "prelu", nodes: nd("PRelu", []string{"a", "s"}), ins: []tin{{name: "a", shape: x4(2, 3, 4, 4)}, {name: "s", shape: []int64{3, 1, 1}, konst: true}}},
		{name: "add_relu_inplace", nodes: []graph.Node{{Name: "e", Op: "Exp", Inputs: []string{"a"}, Outputs: []string{"t"}}, {Name: "ad", Op: "Add", Inputs: []string{"t", "b"}, Outputs: []string{"u"}},
			{Name: "r", Op: "Relu", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "a", shape: []int64{64, 65}}, {name: "b", shape: []int64{65}, lo: -3, hi: 1}}},

		{name: "max_variadic3", nodes: nd("Max", []string{"a", "b", "c"}),
			ins: []tin{{name: "a", shape: []int64{3, 4}}, {name: "b", shape: []int64{4}}, {name: "c", shape: []int64{3, 1}, konst: true}}},
		{name: "min_single", nodes: []graph.Node{{Name: "m", Op: "Min", Inputs: []string{"a"}, Outputs: []string{"t"}}, {Name: "r", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "a", shape: []int64{3, 4}}}},
		{name: "sum_mean", nodes: []graph.Node{{Name: "s", Op: "Sum", Inputs: []string{"a", "b", "c"}, Outputs: []string{"t"}}, {Name: "m", Op: "Mean", Inputs: []string{"t", "a"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "a", shape: []int64{2, 3, 4}}, {name: "b", shape: []int64{2, 3, 4}}, {name: "c", shape: []int64{1, 4}}}},
		{name: "pow_int_exponent", nodes: nd("Pow", []string{"a", "e"}),
			ins: []tin{{name: "a", shape: []int64{3, 4}}, {name: "e", shape: []int64{4}, ints: []int64{0, 1, 2, 3}}}},
		{name: "resize_nearest_tf_half_pixel", opset: 13, nodes: nd("Resize", []string{"x", "", "sc"}, attrS("mode", "nearest"), attrS("coordinate_transformation_mode", "tf_half_pixel_for_nn")),
			ins: []tin{{name: "x", shape: x4(1, 2, 8, 8)}, {name: "sc", shape: []int64{4}, data: []float32{1, 1, 0.6, 0.6}, konst: true}}},

		// fusions
		{name: "conv_bn_relu", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "bn", Op: "BatchNormalization", Inputs: []string{"t", "s", "b", "m", "v"}, Outputs: []string{"u"}},
			{Name: "r", Op: "Relu", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(2, 3, 12, 12)}, {name: "w", shape: x4(8, 3, 3, 3), konst: true},
				{name: "s", shape: []int64{8}, konst: true}, {name: "b", shape: []int64{8}, konst: true},
				{name: "m", shape: []int64{8}, konst: true}, {name: "v", shape: []int64{8}, konst: true, lo: 0.5, hi: 2}}},
		{name: "conv_residual_relu", nodes: []graph.Node{
			{Name: "c1", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "c2", Op: "Conv", Inputs: []string{"x", "w2"}, Outputs: []string{"s"}},
			{Name: "ad", Op: "Add", Inputs: []string{"s", "t"}, Outputs: []string{"u"}},
			{Name: "r", Op: "Relu", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 4, 10, 10)}, {name: "w", shape: x4(6, 4, 3, 3), konst: true}, {name: "w2", shape: x4(6, 4, 1, 1), konst: true}}},
		{name: "dwconv3x3_clip", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInt("group", 6), attrInts("pads", 1, 1, 1, 1)}},
			{Name: "r", Op: "Clip", Inputs: []string{"t", "mn", "mx"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(2, 6, 21, 20)}, {name: "w", shape: x4(6, 1, 3, 3), konst: true}, {name: "b", shape: []int64{6}, konst: true},
				{name: "mn", shape: []int64{}, data: []float32{-0.5}, konst: true}, {name: "mx", shape: []int64{}, data: []float32{1}, konst: true}}},
		{name: "dwconv3x3_s2_relu", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInt("group", 4), attrInts("pads", 1, 0, 1, 1), attrInts("strides", 2, 2)}},
			{Name: "r", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 4, 40, 37)}, {name: "w", shape: x4(4, 1, 3, 3), konst: true}}},
		// Winograd with the vector transforms' edges: tile rows of 35
		// and 17 tiles (two whole vectors and 3 lanes; one and 1),
		// odd output widths, a left padding of 2, each fused epilogue
		// (bias, residual, ReLU, Clip) and one run after the transform
		{name: "conv_winograd_wide_relu", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "r", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 16, 36, 70)}, {name: "w", shape: x4(24, 16, 3, 3), konst: true}, {name: "b", shape: []int64{24}, konst: true}}},
		{name: "conv_winograd_clip", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "r", Op: "Clip", Inputs: []string{"t", "mn", "mx"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(2, 16, 19, 33)}, {name: "w", shape: x4(16, 16, 3, 3), konst: true}, {name: "b", shape: []int64{16}, konst: true},
				{name: "mn", shape: []int64{}, data: []float32{-0.5}, konst: true}, {name: "mx", shape: []int64{}, data: []float32{0.7}, konst: true}}},
		{name: "conv_winograd_sigmoid", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "r", Op: "Sigmoid", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 16, 17, 18)}, {name: "w", shape: x4(16, 16, 3, 3), konst: true}, {name: "b", shape: []int64{16}, konst: true}}},
		{name: "conv_winograd_residual_nobias", nodes: []graph.Node{
			{Name: "c", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 2, 1, 0)}},
			{Name: "ad", Op: "Add", Inputs: []string{"t", "x"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 16, 33, 34)}, {name: "w", shape: x4(16, 16, 3, 3), konst: true}}},
		{name: "conv_winograd_residual_relu", nodes: []graph.Node{
			{Name: "c1", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("pads", 1, 1, 1, 1)}},
			{Name: "ad", Op: "Add", Inputs: []string{"t", "x"}, Outputs: []string{"u"}},
			{Name: "r", Op: "Relu", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(2, 16, 27, 27)}, {name: "w", shape: x4(16, 16, 3, 3), konst: true}, {name: "b", shape: []int64{16}, konst: true}}},
		{name: "convtranspose_bn_sigmoid", nodes: []graph.Node{
			{Name: "c", Op: "ConvTranspose", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInts("strides", 2, 2)}},
			{Name: "bn", Op: "BatchNormalization", Inputs: []string{"t", "s", "b", "m", "v"}, Outputs: []string{"u"}},
			{Name: "r", Op: "Sigmoid", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(1, 4, 5, 5)}, {name: "w", shape: x4(4, 3, 2, 2), konst: true},
				{name: "s", shape: []int64{3}, konst: true}, {name: "b", shape: []int64{3}, konst: true},
				{name: "m", shape: []int64{3}, konst: true}, {name: "v", shape: []int64{3}, konst: true, lo: 0.5, hi: 2}}},
		{name: "matmul_bias_gelu", opset: 20, nodes: []graph.Node{
			{Name: "mm", Op: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"t"}},
			{Name: "ad", Op: "Add", Inputs: []string{"t", "b"}, Outputs: []string{"u"}},
			{Name: "g", Op: "Gelu", Inputs: []string{"u"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: []int64{2, 6, 16}}, {name: "w", shape: []int64{16, 24}, konst: true}, {name: "b", shape: []int64{24}, konst: true}}},
		{name: "gemm_relu", nodes: []graph.Node{
			{Name: "g", Op: "Gemm", Inputs: []string{"x", "w", "b"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInt("transB", 1)}},
			{Name: "r", Op: "Clip", Inputs: []string{"t", "lo", "hi"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: []int64{3, 10}}, {name: "w", shape: []int64{12, 10}, konst: true}, {name: "b", shape: []int64{12}, konst: true},
				{name: "lo", shape: []int64{}, data: []float32{-0.5}, konst: true}, {name: "hi", shape: []int64{}, data: []float32{0.7}, konst: true}}},
		{name: "shape_subgraph_reshape", opset: 13, nodes: []graph.Node{
			{Name: "sh", Op: "Shape", Inputs: []string{"x"}, Outputs: []string{"s"}},
			{Name: "ga", Op: "Gather", Inputs: []string{"s", "i0"}, Outputs: []string{"n"}},
			{Name: "un", Op: "Unsqueeze", Inputs: []string{"n", "ax"}, Outputs: []string{"n1"}},
			{Name: "cc", Op: "Concat", Inputs: []string{"n1", "m1"}, Outputs: []string{"shape"}, Attrs: []graph.Attr{attrInt("axis", 0)}},
			{Name: "rs", Op: "Reshape", Inputs: []string{"x", "shape"}, Outputs: []string{"t"}},
			{Name: "sm", Op: "Softmax", Inputs: []string{"t"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: x4(3, 2, 4, 5)}, {name: "i0", shape: []int64{}, ints: []int64{0}},
				{name: "ax", shape: []int64{1}, ints: []int64{0}}, {name: "m1", shape: []int64{1}, ints: []int64{-1}}}},
		{name: "constant_node", nodes: []graph.Node{
			{Name: "k", Op: "Constant", Outputs: []string{"c"}, Attrs: []graph.Attr{{Name: "value", Kind: graph.AttrTensor, T: &graph.Tensor{DType: graph.Float32, Dims: []int64{2}, F32: []float32{0.5, -1}}}}},
			{Name: "m", Op: "Mul", Inputs: []string{"x", "c"}, Outputs: []string{"y"}}},
			ins: []tin{{name: "x", shape: []int64{3, 2}}}},
	}
	// every unary operator
	for _, u := range []struct {
		op     string
		lo, hi float32
		attrs  []graph.Attr
		opset  int64
	}{
		{"Relu", -2, 2, nil, 0}, {"Sigmoid", -10, 10, nil, 0}, {"HardSigmoid", -5, 5, []graph.Attr{attrF("alpha", 0.3), attrF("beta", 0.4)}, 0},
		{"HardSwish", -5, 5, nil, 0}, {"Tanh", -5, 5, nil, 0}, {"LeakyRelu", -2, 2, []graph.Attr{attrF("alpha", 0.1)}, 0},
		{"Exp", -5, 5, nil, 0}, {"Log", 0.01, 5, nil, 0}, {"Neg", -2, 2, nil, 0}, {"Abs", -2, 2, nil, 0},
		{"Sqrt", 0, 5, nil, 0}, {"Reciprocal", 0.5, 5, nil, 0}, {"Erf", -3, 3, nil, 0}, {"Floor", -3, 3, nil, 0},
		{"Ceil", -3, 3, nil, 0}, {"Softplus", -5, 5, nil, 0}, {"Elu", -3, 3, nil, 0}, {"Round", -3, 3, nil, 0},
		{"Sin", -3, 3, nil, 0}, {"Cos", -3, 3, nil, 0}, {"Gelu", -4, 4, nil, 20},
		{"Gelu", -4, 4, []graph.Attr{attrS("approximate", "tanh")}, 20}, {"Clip", -8, 8, []graph.Attr{attrF("min", -1), attrF("max", 2)}, 6},
	} {
		name := "unary_" + u.op
		if len(u.attrs) > 0 {
			name += "_attrs"
		}
		cs = append(cs, opCase{name: name, opset: u.opset, nodes: nd(u.op, []string{"x"}, u.attrs...),
			ins: []tin{{name: "x", shape: []int64{3, 40000}, lo: u.lo, hi: u.hi}}})
	}
	return cs
}

// TestOps runs every operator (and the fused patterns) on the C kernels and
// compares with the reference evaluator.
func TestOps(t *testing.T) {
	b := newTestBackend(t, 2)
	for _, tc := range opCases() {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
	}
}

// TestOpsOneUnit repeats a few cases on a single unit (different tiling).
func TestOpsOneUnit(t *testing.T) {
	b := newTestBackend(t, 1)
	for _, tc := range opCases() {
		if strings.HasPrefix(tc.name, "conv") || strings.HasPrefix(tc.name, "gemm") || strings.HasPrefix(tc.name, "matmul") {
			t.Run(tc.name, func(t *testing.T) { tc.run(t, b) })
		}
	}
}

// TestWinogradSameBitsOnEveryISA runs the Winograd cases on every
// instruction set of the GEMM core (the AVX-512 transforms, vectors of 16
// tiles with the epilogue fused into the output transform, against the
// portable ones and the epilogue after them): the same bits, on one unit
// and two.
func TestWinogradSameBitsOnEveryISA(t *testing.T) {
	defer ncpu.SetGemmISA("")
	for _, units := range []int{1, 2} {
		b := newTestBackend(t, units)
		for _, tc := range opCases() {
			if !strings.Contains(tc.name, "winograd") {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", tc.name, units), func(t *testing.T) {
				g, feeds, _ := tc.graph()
				var want []float32
				for _, isa := range ncpu.GemmISAs() {
					if err := ncpu.SetGemmISA(isa); err != nil {
						t.Fatal(err)
					}
					got, err := b.RunGraph(context.Background(), g, feeds)
					if err != nil {
						t.Fatal(err)
					}
					y := got["y"].F32
					if want == nil {
						want = y
						continue
					}
					sameBits(t, fmt.Sprintf("y on %s against %s", isa, ncpu.GemmISAs()[0]), y, want)
				}
			})
		}
	}
}

// A Cast to FLOAT16 of a value computed at run time rounds each element
// to the nearest float16 in the kernel, bit for bit as engine.RoundF16
// (ONNX Runtime rounds too; the engine used to pass the float32 through).
func TestCastToFloat16Rounds(t *testing.T) {
	b := New()
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer b.Deinit()
	x := []float32{0.1, -0.1, 1 + 1.0/2048, 65504, 65519, 65520, -70000, 0x1p-25, 0x1.8p-24, 3.14159265, 1e-3, 12345.678}
	g := &graph.Graph{
		Name:    "cast16",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{int64(len(x))}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Nodes: []graph.Node{
			{Name: "h", Op: "Cast", Inputs: []string{"x"}, Outputs: []string{"h"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float16)}}},
			{Name: "y", Op: "Cast", Inputs: []string{"h"}, Outputs: []string{"y"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}},
		},
		Opset: 13,
	}
	got, err := b.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": {Name: "x", DType: graph.Float32, Dims: []int64{int64(len(x))}, F32: x}})
	if err != nil {
		t.Fatal(err)
	}
	y := got["y"].F32
	for i, v := range x {
		if want := engine.RoundF16(v); math.Float32bits(y[i]) != math.Float32bits(want) {
			t.Errorf("Cast(%g) to float16: %g, want %g", v, y[i], want)
		}
	}
	if y[0] == x[0] {
		t.Error("0.1 came through unrounded")
	}
}

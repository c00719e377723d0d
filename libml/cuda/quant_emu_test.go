package cuda

import (
	"context"
	"fmt"
	"math"
	"testing"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/quantize"
	"sluice/libml/zoo"
)

// quantizedZoo is zoo model name quantised statically (libml/quantize),
// calibrated on the cpu backend.
func quantizedZoo(t *testing.T, name string, opt zoo.Options) *graph.Graph {
	t.Helper()
	g, err := zoo.Build(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	sets, err := quantize.Samples(g, 2, 40, zoo.Input)
	if err != nil {
		t.Fatal(err)
	}
	q, st, err := quantize.Model(context.Background(), g, cpuBackend(t).RunGraph, sets)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %+v", name, st)
	return q
}

// Quantised models through the cuda backend on the emulator: the int8
// kernels (sg_quant, sg_qgemm: per-block im2col, packed weights, the
// depthwise float path's QUANT modes, QLinearMatMul) agree with the cpu
// backend. Their integer parts are exact on both; the float layers after
// them (global pooling, the classifier) differ only in summation order.
func TestBackendQuantizedEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	cases := []struct {
		name  string
		opt   zoo.Options
		batch int
	}{
		{"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}, 1},
		{"mobilenetv2", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 3}, 2},
		{"bert", zoo.Options{Layers: 1, SeqLen: 8, Hidden: 32, Heads: 2, FF: 64, Seed: 6}, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := quantizedZoo(t, c.name, c.opt)
			inst := load(t, b, c.name, g, c.batch)
			defer inst.Close()
			rinst := load(t, ref, c.name, g, c.batch)
			defer rinst.Close()
			in := zoo.Input(11, c.batch*inst.InputSize())
			agree(t, fmt.Sprintf("%s-int8 batch %d", c.name, c.batch), infer(t, b, inst, c.batch, in),
				infer(t, ref, rinst, c.batch, in), tol)
		})
	}
}

// A dynamically quantised product (DynamicQuantizeLinear's reductions,
// MatMulInteger on float-stored operands, both operands at run time) on
// the emulator gives the cpu backend's bits.
func TestBackendDynamicQuantEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	const M, K, N = 5, 37, 19
	w := make([]int64, K*N)
	for i := range w {
		w[i] = int64(i*37%255) - 127
	}
	g := &graph.Graph{Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, M, K}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "w", DType: graph.Int8, Dims: []int64{K, N}, I64: w},
			{Name: "ws", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.01}}},
		Nodes: []graph.Node{
			{Name: "dq", Op: "DynamicQuantizeLinear", Inputs: []string{"x"}, Outputs: []string{"xq", "xs", "xz"}},
			{Name: "mm", Op: "MatMulInteger", Inputs: []string{"xq", "w", "xz"}, Outputs: []string{"acc"}},
			{Name: "c", Op: "Cast", Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}},
				Inputs: []string{"acc"}, Outputs: []string{"accf"}},
			{Name: "s", Op: "Mul", Inputs: []string{"xs", "ws"}, Outputs: []string{"sc"}},
			{Name: "y", Op: "Mul", Inputs: []string{"accf", "sc"}, Outputs: []string{"y"}},
		}}
	inst := load(t, b, "dyn", g, 1)
	defer inst.Close()
	rinst := load(t, ref, "dyn", g, 1)
	defer rinst.Close()
	in := zoo.Input(3, M*K)
	got, want := infer(t, b, inst, 1, in), infer(t, ref, rinst, 1, in)
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("element %d: %v on the emulator, %v on the cpu", i, got[i], want[i])
		}
	}
}

// An If on a run-time condition (a comparison kernel, both branches, a
// selecting COPY) on the emulator gives the cpu backend's bits, for each
// branch.
func TestBackendRuntimeIfEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	f := func(name string, v float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
	}
	branch := func(op string, k float32) *graph.Graph {
		return &graph.Graph{Name: op, Initializers: []*graph.Tensor{f("k", k)},
			Nodes:   []graph.Node{{Name: "n", Op: op, Inputs: []string{"x", "k"}, Outputs: []string{"o"}}},
			Outputs: []graph.ValueInfo{{Name: "o", DType: graph.Float32, Dims: []int64{1, 3}}}}
	}
	g := &graph.Graph{Name: "rif", Opset: 13,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3}}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Initializers: []*graph.Tensor{f("lim", 0)},
		Nodes: []graph.Node{
			{Name: "max", Op: "ReduceMax", Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}},
				Inputs: []string{"x"}, Outputs: []string{"m"}},
			{Name: "cmp", Op: "GreaterOrEqual", Inputs: []string{"m", "lim"}, Outputs: []string{"c"}},
			{Name: "if", Op: "If", Inputs: []string{"c"}, Outputs: []string{"y"}, Attrs: []graph.Attr{
				{Name: "then_branch", Kind: graph.AttrGraph, G: branch("Mul", 2)},
				{Name: "else_branch", Kind: graph.AttrGraph, G: branch("Sub", 1)}}},
		}}
	inst := load(t, b, "rif", g, 1)
	defer inst.Close()
	rinst := load(t, ref, "rif", g, 1)
	defer rinst.Close()
	for _, in := range [][]float32{{-1, 0.5, 2}, {-3, -2, -0.5}} {
		want := []float32{in[0] * 2, in[1] * 2, in[2] * 2}
		if in[2] < 0 {
			want = []float32{in[0] - 1, in[1] - 1, in[2] - 1}
		}
		got, cpuGot := infer(t, b, inst, 1, in), infer(t, ref, rinst, 1, in)
		for i := range want {
			if got[i] != want[i] || cpuGot[i] != want[i] {
				t.Fatalf("input %v: emulator %v, cpu %v, want %v", in, got, cpuGot, want)
			}
		}
	}
}

// QLinearAdd (QUANT mode 5) on the emulator: a residual addition in the
// QDQ form, with a Relu or a Clip after the sum, fused into one kernel
// by both backends, gives the cpu backend's bits (every step is one
// rounded float operation on both).
func TestQLinearAddEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	for _, act := range []string{"Relu", "Clip"} {
		t.Run(act, func(t *testing.T) {
			dims := []int64{-1, 8, 6, 6}
			scalar := func(name string, v float32) *graph.Tensor {
				return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
			}
			zp := func(name string, v int64) *graph.Tensor {
				return &graph.Tensor{Name: name, DType: graph.Uint8, Dims: []int64{}, I64: []int64{v}}
			}
			inits := []*graph.Tensor{scalar("sa", 0.031), scalar("sb", 0.047), scalar("sy", 0.05),
				zp("za", 131), zp("zb", 120), zp("zy", 128), scalar("k", -0.7), scalar("lo", -1.5), scalar("hi", 2)}
			nodes := []graph.Node{
				{Name: "xb", Op: "Mul", Inputs: []string{"x", "k"}, Outputs: []string{"xb"}},
				{Name: "qa", Op: "QuantizeLinear", Inputs: []string{"x", "sa", "za"}, Outputs: []string{"qa"}},
				{Name: "qb", Op: "QuantizeLinear", Inputs: []string{"xb", "sb", "zb"}, Outputs: []string{"qb"}},
				{Name: "dqa", Op: "DequantizeLinear", Inputs: []string{"qa", "sa", "za"}, Outputs: []string{"da"}},
				{Name: "dqb", Op: "DequantizeLinear", Inputs: []string{"qb", "sb", "zb"}, Outputs: []string{"db"}},
				{Name: "add", Op: "Add", Inputs: []string{"da", "db"}, Outputs: []string{"t"}},
			}
			if act == "Relu" {
				nodes = append(nodes, graph.Node{Name: "act", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"r"}})
			} else {
				nodes = append(nodes, graph.Node{Name: "act", Op: "Clip", Inputs: []string{"t", "lo", "hi"}, Outputs: []string{"r"}})
			}
			nodes = append(nodes,
				graph.Node{Name: "qy", Op: "QuantizeLinear", Inputs: []string{"r", "sy", "zy"}, Outputs: []string{"qy"}},
				graph.Node{Name: "dqy", Op: "DequantizeLinear", Inputs: []string{"qy", "sy", "zy"}, Outputs: []string{"y"}})
			g := &graph.Graph{Name: "qadd", Opset: 13,
				Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: dims}},
				Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: dims}},
				Initializers: inits, Nodes: nodes}
			inst := load(t, b, "qadd", g, 2)
			defer inst.Close()
			rinst := load(t, ref, "qadd", g, 2)
			defer rinst.Close()
			in := zoo.Input(5, 2*inst.InputSize())
			for i := range in {
				in[i] *= 3
			}
			got, want := infer(t, b, inst, 2, in), infer(t, ref, rinst, 2, in)
			distinct := map[float32]bool{}
			for i := range want {
				if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
					t.Fatalf("y[%d] = %v on the emulator, %v on the cpu", i, got[i], want[i])
				}
				distinct[want[i]] = true
			}
			if len(distinct) < 20 {
				t.Fatalf("only %d distinct outputs", len(distinct))
			}
		})
	}
}

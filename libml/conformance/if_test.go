package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// ifGraph is y = If(cond) over a runtime input x [2, 3]: the then branch
// adds a constant of its own and applies ReLU, with an If of its own
// inside (a constant condition: multiply by 2 or 3); the else branch
// multiplies by a constant of its own and negates. Both read x from the
// enclosing graph. cond is made from constants a > b.
func ifGraph(a, b float32, inner bool) *graph.Graph {
	f := func(name string, dims []int64, v ...float32) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
	}
	vi := func(name string) graph.ValueInfo {
		return graph.ValueInfo{Name: name, DType: graph.Float32, Dims: []int64{2, 3}}
	}
	innerCond := int64(0)
	if inner {
		innerCond = 1
	}
	innerIf := graph.Node{Name: "inner", Op: "If", Inputs: []string{"ic"}, Outputs: []string{"t2"}, Attrs: []graph.Attr{
		{Name: "then_branch", Kind: graph.AttrGraph, G: &graph.Graph{Name: "it",
			Initializers: []*graph.Tensor{f("k", []int64{}, 2)},
			Nodes:        []graph.Node{{Name: "m", Op: "Mul", Inputs: []string{"t1", "k"}, Outputs: []string{"o"}}},
			Outputs:      []graph.ValueInfo{vi("o")}}},
		{Name: "else_branch", Kind: graph.AttrGraph, G: &graph.Graph{Name: "ie",
			Initializers: []*graph.Tensor{f("k", []int64{}, 3)},
			Nodes:        []graph.Node{{Name: "m", Op: "Mul", Inputs: []string{"t1", "k"}, Outputs: []string{"o"}}},
			Outputs:      []graph.ValueInfo{vi("o")}}},
	}}
	then := &graph.Graph{Name: "then",
		Initializers: []*graph.Tensor{f("c", []int64{3}, 0.5, -1, 2), {Name: "ic", DType: graph.Bool, Dims: []int64{}, I64: []int64{innerCond}}},
		Nodes: []graph.Node{
			{Name: "add", Op: "Add", Inputs: []string{"x", "c"}, Outputs: []string{"t0"}},
			{Name: "relu", Op: "Relu", Inputs: []string{"t0"}, Outputs: []string{"t1"}},
			innerIf,
		},
		Outputs: []graph.ValueInfo{vi("t2")}}
	els := &graph.Graph{Name: "else",
		Initializers: []*graph.Tensor{f("c", []int64{3}, 1, 2, 3)},
		Nodes: []graph.Node{
			{Name: "mul", Op: "Mul", Inputs: []string{"x", "c"}, Outputs: []string{"t0"}},
			{Name: "neg", Op: "Neg", Inputs: []string{"t0"}, Outputs: []string{"t1"}},
		},
		Outputs: []graph.ValueInfo{vi("t1")}}
	return &graph.Graph{Name: "if", Opset: 13,
		Inputs:       []graph.ValueInfo{vi("x")},
		Outputs:      []graph.ValueInfo{vi("y")},
		Initializers: []*graph.Tensor{f("a", []int64{}, a), f("b", []int64{}, b)},
		Nodes: []graph.Node{
			{Name: "cmp", Op: "Greater", Inputs: []string{"a", "b"}, Outputs: []string{"cond"}},
			{Name: "if", Op: "If", Inputs: []string{"cond"}, Outputs: []string{"y"}, Attrs: []graph.Attr{
				{Name: "then_branch", Kind: graph.AttrGraph, G: then},
				{Name: "else_branch", Kind: graph.AttrGraph, G: els}}},
		}}
}

// TestIfORT: an If whose condition the engine knows at load (computed
// from constants) runs its branch, with the branch's own constants, the
// values it reads from the enclosing graph and an If nested in it, as
// ONNX Runtime runs the whole If, after the ONNX round trip.
// An If whose condition comes from the input at run time runs both
// branches and keeps the taken one's value, as ONNX Runtime does; one
// whose branches disagree in shape is refused as an unsupported use (so
// that the appliance falls back to ONNX Runtime).
func TestIfORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{2, 3}, F32: []float32{-1, 0.25, 3, -0.5, 2, -4}}
	for _, c := range []struct {
		name  string
		a, b  float32
		inner bool
	}{{"then, inner then", 2, 1, true}, {"then, inner else", 2, 1, false}, {"else", 1, 2, true}} {
		g := ifGraph(c.a, c.b, c.inner)
		// the ONNX round trip keeps the sub-graphs: the engine runs the
		// decoded graph
		data, err := onnx.Encode(g)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = onnx.Decode(data); err != nil {
			t.Fatal(err)
		}
		want := &graph.Tensor{Name: "y", DType: graph.Float32, Dims: []int64{2, 3}, F32: make([]float32, 6)}
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// the condition from the input: x's largest element > b; both
	// branches run, the taken one's value is kept
	for _, c := range []struct {
		name string
		b    float32
	}{{"run-time condition, then", 1}, {"run-time condition, else", 10}} {
		g := runtimeIfGraph(c.b)
		want := &graph.Tensor{Name: "y", DType: graph.Float32, Dims: []int64{2, 3}, F32: make([]float32, 6)}
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
	// branches whose outputs differ in shape cannot both run: refused as
	// an unsupported use (so that the appliance falls back to ONNX
	// Runtime)
	g := runtimeIfGraph(1)
	els := g.Nodes[len(g.Nodes)-1].Attr("else_branch").G
	els.Nodes = append(els.Nodes, graph.Node{Name: "flat", Op: "Flatten", Inputs: []string{"t1"}, Outputs: []string{"t2"},
		Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 0}}})
	els.Outputs[0].Name = "t2"
	_, err := runOnBackend(ctx, cb, "mismatch", g, x, &graph.Tensor{Name: "y", DType: graph.Float32, Dims: []int64{2, 3}})
	var ue *engine.UnsupportedError
	if !errors.As(err, &ue) || ue.Op != "If" || !strings.Contains(err.Error(), "must agree") {
		t.Fatalf("If on a run-time condition, branches of two shapes: %v; want an unsupported use of If", err)
	}
}

// runtimeIfGraph is ifGraph with its condition computed from the input:
// x's largest element > b.
func runtimeIfGraph(b float32) *graph.Graph {
	g := ifGraph(2, b, true)
	g.Nodes[0] = graph.Node{Name: "cmp", Op: "Greater", Inputs: []string{"x0", "b"}, Outputs: []string{"cond"}}
	return prependNodes(g,
		graph.Node{Name: "flat", Op: "Flatten", Inputs: []string{"x"}, Outputs: []string{"xf"}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 0}}},
		graph.Node{Name: "first", Op: "ReduceMax", Inputs: []string{"xf"}, Outputs: []string{"x0"}, Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}}})
}

func prependNodes(g *graph.Graph, nodes ...graph.Node) *graph.Graph {
	g.Nodes = append(nodes, g.Nodes...)
	return g
}

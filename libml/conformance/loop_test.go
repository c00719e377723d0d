package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
)

// loopGraph is a Loop over a runtime input x [1, 4] with a trip count of
// trips: each iteration adds iter_num + 1 to the carried value and emits
// it as a scan output; the body's condition is iter_num + 1 < stop (stop
// = 0: the body passes its condition through). With tripsAtRunTime, the
// trip count is the sum of x's elements (a run-time value).
func loopGraph(trips, stop int64, tripsAtRunTime bool) *graph.Graph {
	i64 := func(name string, v int64) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Int64, Dims: []int64{}, I64: []int64{v}}
	}
	body := &graph.Graph{Name: "body",
		Inputs: []graph.ValueInfo{{Name: "i", DType: graph.Int64}, {Name: "c", DType: graph.Bool},
			{Name: "acc", DType: graph.Float32, Dims: []int64{1, 4}}},
		Initializers: []*graph.Tensor{i64("one", 1), i64("stop", stop)},
		Nodes: []graph.Node{
			{Name: "inc", Op: "Add", Inputs: []string{"i", "one"}, Outputs: []string{"i1"}},
			{Name: "f", Op: "Cast", Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}},
				Inputs: []string{"i1"}, Outputs: []string{"fi"}},
			{Name: "add", Op: "Add", Inputs: []string{"acc", "fi"}, Outputs: []string{"acc1"}},
			{Name: "scan", Op: "Identity", Inputs: []string{"acc1"}, Outputs: []string{"s"}},
		},
		Outputs: []graph.ValueInfo{{Name: "c1", DType: graph.Bool}, {Name: "acc1"}, {Name: "s"}},
	}
	if stop > 0 {
		body.Nodes = append(body.Nodes, graph.Node{Name: "lt", Op: "Less", Inputs: []string{"i1", "stop"}, Outputs: []string{"c1"}})
	} else {
		body.Nodes = append(body.Nodes, graph.Node{Name: "c", Op: "Identity", Inputs: []string{"c"}, Outputs: []string{"c1"}})
	}
	g := &graph.Graph{Name: "loop", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}, {Name: "z", DType: graph.Float32}},
		Initializers: []*graph.Tensor{i64("trips", trips),
			{Name: "cond", DType: graph.Bool, Dims: []int64{}, I64: []int64{1}}},
		Nodes: []graph.Node{{Name: "loop", Op: "Loop", Inputs: []string{"trips", "cond", "x"},
			Outputs: []string{"y", "z"}, Attrs: []graph.Attr{{Name: "body", Kind: graph.AttrGraph, G: body}}}},
	}
	if tripsAtRunTime {
		g.Initializers = g.Initializers[1:]
		g.Nodes = append([]graph.Node{
			{Name: "sum", Op: "ReduceSum", Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}},
				Inputs: []string{"x"}, Outputs: []string{"sf"}},
			{Name: "ti", Op: "Cast", Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Int64)}},
				Inputs: []string{"sf"}, Outputs: []string{"trips"}},
		}, g.Nodes...)
	}
	return g
}

// A Loop whose iterations are known at load is unrolled: its carried
// value and its stacked scan output are the iterations', whether the trip
// count or the body's condition ends it; one whose trip count is computed
// at run time is refused as unsupported (so that the appliance falls back
// to ONNX Runtime), naming why.
func TestLoopUnrolled(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	x := []float32{1, 2, 3, 4}
	for _, c := range []struct {
		name        string
		trips, stop int64
		iters       int
	}{
		{"trip-count", 5, 0, 5},
		{"condition", 10, 3, 3},
	} {
		g := loopGraph(c.trips, c.stop, false)
		g.Outputs = g.Outputs[1:] // z: every iteration's value
		got, err := be.RunGraph(ctx, g, map[string]*graph.Tensor{"x": {Name: "x", DType: graph.Float32, Dims: []int64{1, 4}, F32: x}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		z := got["z"]
		if len(z.Dims) != 3 || z.Dims[0] != int64(c.iters) {
			t.Fatalf("%s: scan output %v, want %d iterations of [1 4]", c.name, z.Dims, c.iters)
		}
		acc := append([]float32(nil), x...)
		for it := 0; it < c.iters; it++ {
			for j := range acc {
				acc[j] += float32(it + 1)
				if z.F32[it*4+j] != acc[j] {
					t.Fatalf("%s: iteration %d element %d = %v, want %v", c.name, it, j, z.F32[it*4+j], acc[j])
				}
			}
		}
	}
	_, err := be.LoadModel(ctx, "rt", loopGraph(0, 0, true))
	var ue *engine.UnsupportedError
	if !errors.As(err, &ue) || ue.Op != "Loop" || !strings.Contains(err.Error(), "trip count is computed from the input at run time") {
		t.Fatalf("a run-time trip count: err = %v, want an UnsupportedError for the Loop", err)
	}
}

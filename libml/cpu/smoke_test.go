package cpu

import (
	"context"
	"math"
	"testing"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
)

func TestSmokeConv(t *testing.T) {
	b := New()
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer b.Deinit()
	x := make([]float32, 1*3*8*8)
	for i := range x {
		x[i] = float32(i%7) - 3
	}
	w := make([]float32, 4*3*3*3)
	for i := range w {
		w[i] = float32(i%5)*0.1 - 0.2
	}
	g := &graph.Graph{Name: "t", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 8, 8}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: []int64{4, 3, 3, 3}, F32: w}},
		Nodes: []graph.Node{{Name: "c", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 1, 1, 1}}}}},
	}
	out, err := b.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": {Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 8, 8}, F32: x}})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := engine.Eval(&g.Nodes[0], 17, []*engine.Tensor{engine.NewFloat([]int64{1, 3, 8, 8}, x), engine.NewFloat([]int64{4, 3, 3, 3}, w)})
	if err != nil {
		t.Fatal(err)
	}
	y := out["y"].F32
	for i := range y {
		if math.Abs(float64(y[i]-ref[0].F[i])) > 1e-4 {
			t.Fatalf("%d: %v vs %v", i, y[i], ref[0].F[i])
		}
	}
}

package conformance

import (
	"context"
	"testing"

	"sluice/libml/graph"
)

// RoiAlign against ONNX Runtime: libonnx-testdata 1.12 gives its
// references rounded to 4 decimals (one of them not the rounding of the
// exact value), so ONNX Runtime is the oracle here, for both node tests'
// graphs (half_pixel and output_half_pixel) and variants of them: max
// mode, adaptive sampling with a spatial scale.
func TestRoiAlignORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	set := func(n *graph.Node, a graph.Attr) {
		for i := range n.Attrs {
			if n.Attrs[i].Name == a.Name {
				n.Attrs[i] = a
				return
			}
		}
		n.Attrs = append(n.Attrs, a)
	}
	for _, name := range []string{"test_roialign_aligned_false", "test_roialign_aligned_true"} {
		nt, err := LoadNodeTest(name)
		if err != nil {
			RequireDeps(t, "libonnx-testdata", err)
		}
		ds := nt.Sets[0]
		for _, v := range []struct {
			what  string
			attrs []graph.Attr
		}{
			{"as is", nil},
			{"max", []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "max"}}},
			{"adaptive sampling, scale 0.5", []graph.Attr{{Name: "sampling_ratio", Kind: graph.AttrInt, I: 0},
				{Name: "spatial_scale", Kind: graph.AttrFloat, F: 0.5}}},
		} {
			g := pruneOutputs(singleIO(nt, ds, 0, 0))
			g.Nodes = append([]graph.Node{}, g.Nodes...)
			n := &g.Nodes[0]
			n.Attrs = append([]graph.Attr{}, n.Attrs...)
			for _, a := range v.attrs {
				set(n, a)
			}
			if _, err := againstORT(ctx, ob, cb, name, g, ds.Inputs[0], ds.Outputs[0]); err != nil {
				t.Errorf("%s, %s: %v", name, v.what, err)
			}
		}
	}
}

// Operators libonnx-testdata 1.12 has no node tests for, run as function
// bodies (LpNormalization, Mish), against ONNX Runtime.
func TestBodiesORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{2, 3, 4}, F32: make([]float32, 24)}
	for i := range x.F32 {
		x.F32[i] = float32((i*7)%11)/3 - 1.7
	}
	attr := func(name string, v int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInt, I: v} }
	for _, c := range []struct {
		name  string
		node  graph.Node
		opset int64
	}{
		{"lpnorm-l2-axis1", graph.Node{Op: "LpNormalization", Attrs: []graph.Attr{attr("axis", 1), attr("p", 2)}}, 13},
		{"lpnorm-l1-last", graph.Node{Op: "LpNormalization", Attrs: []graph.Attr{attr("p", 1)}}, 13},
		{"mish", graph.Node{Op: "Mish"}, 18},
	} {
		n := c.node
		n.Name, n.Inputs, n.Outputs = c.name, []string{"x"}, []string{"y"}
		g := &graph.Graph{Name: c.name, Opset: c.opset, Nodes: []graph.Node{n},
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: x.Dims}}}
		want := &graph.Tensor{Name: "y", DType: graph.Float32, Dims: x.Dims, F32: make([]float32, 24)}
		if _, err := againstORT(ctx, ob, cb, c.name, g, x, want); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
	}
}

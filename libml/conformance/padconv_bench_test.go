package conformance

import (
	"testing"

	"sluice/libml/graph"
)

// padConvGraph is a 3x3 convolution, 64 to 64 channels at 56x56, after a
// 1-pixel Pad of zeros: folded into the Conv's pads, or kept (an Identity
// between them keeps the loader from folding it).
func padConvGraph(fold bool) *graph.Graph {
	C, K := int64(64), int64(64)
	w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{K, C, 3, 3}, F32: make([]float32, K*C*9)}
	for i := range w.F32 {
		w.F32[i] = float32((i*7)%13)/60 - 0.1
	}
	nodes := []graph.Node{{Name: "pad", Op: "Pad", Inputs: []string{"x", "p"}, Outputs: []string{"xp"}}}
	in := "xp"
	if !fold {
		nodes = append(nodes, graph.Node{Name: "id", Op: "Identity", Inputs: []string{"xp"}, Outputs: []string{"xi"}})
		in = "xi"
	}
	nodes = append(nodes, graph.Node{Name: "conv", Op: "Conv", Inputs: []string{in, "w"}, Outputs: []string{"y"}})
	return &graph.Graph{Name: "padconv", Opset: 13,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, C, 56, 56}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{w, {Name: "p", DType: graph.Int64, Dims: []int64{8}, I64: []int64{0, 0, 1, 1, 0, 0, 1, 1}}},
		Nodes:        nodes}
}

// BenchmarkPadConv compares the Pad folded into the Conv with the Pad run
// on its own (a COPY fill and an interior COPY), in one run:
//
//	go test -run '^$' -bench BenchmarkPadConv -benchtime 300x ./libml/conformance
func BenchmarkPadConv(b *testing.B) {
	be := cpuBackend(b)
	for _, fold := range []bool{false, true} {
		name := "unfolded"
		if fold {
			name = "folded"
		}
		b.Run(name, func(b *testing.B) {
			in := make([]float32, 64*56*56)
			for i := range in {
				in[i] = float32(i%17) / 17
			}
			benchInfer(b, be, name, padConvGraph(fold), in)
		})
	}
}

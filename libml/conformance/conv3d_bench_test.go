package conformance

import (
	"context"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/ort"
)

// BenchmarkConv3D times a C3D-style layer (64 -> 128 channels, 3x3x3,
// padded, 8 x 28 x 28) on the engine (lowerConv3D) and on ONNX Runtime,
// both on 2 threads, in the same run:
//
//	go test -run '^$' -bench Conv3D ./libml/conformance/
func BenchmarkConv3D(b *testing.B) {
	in := []int64{1, 64, 8, 28, 28}
	wd := []int64{128, 64, 3, 3, 3}
	w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: wd, F32: Deterministic(int(numelOf(wd)), 5)}
	n := graph.Node{Op: "Conv", Name: "c3d", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
		Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 1, 1, 1, 1, 1}}}}
	g, _ := oneNodeGraph("c3d", 17, n, []*graph.Tensor{w}, in, []int64{1, 128, 8, 28, 28})
	x := Deterministic(int(numelOf(in)), 6)
	ctx := context.Background()
	if _, err := ort.LibraryPath(); err != nil {
		RequireDeps(b, "ONNX Runtime", err)
	}
	for _, c := range []struct {
		name string
		be   libml.Backend
	}{
		{"sluice", cpu.New()},
		{"ort", ort.New(ort.Options{IntraOpThreads: 2, Quiet: true})},
	} {
		b.Run(c.name, func(b *testing.B) {
			if err := c.be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
				b.Fatal(err)
			}
			defer c.be.Deinit()
			benchInfer(b, c.be, "c3d", g, x)
		})
	}
}

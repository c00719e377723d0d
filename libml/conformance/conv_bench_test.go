package conformance

import (
	"context"
	"fmt"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/ort"
)

// BenchmarkConv times ResNet's 3x3 convolutions (stride 1, padded, C to C
// channels at 56x56, 28x28, 14x14 and 7x7; a bias, no activation) at batch
// 1 on the engine and on ONNX Runtime, both on 2 threads, in the same run.
// GFLOP/s counts the direct convolution's multiply-adds, two each,
// whatever algorithm ran:
//
//	go test -run '^$' -bench 'BenchmarkConv$' ./libml/conformance/
func BenchmarkConv(b *testing.B) {
	if _, err := ort.LibraryPath(); err != nil {
		RequireDeps(b, "ONNX Runtime", err)
	}
	ctx := context.Background()
	for _, s := range []struct{ C, HW int64 }{{64, 56}, {128, 28}, {256, 14}, {512, 7}} {
		in := []int64{1, s.C, s.HW, s.HW}
		wd := []int64{s.C, s.C, 3, 3}
		w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: wd, F32: Deterministic(int(numelOf(wd)), 5)}
		bias := &graph.Tensor{Name: "b", DType: graph.Float32, Dims: []int64{s.C}, F32: Deterministic(int(s.C), 7)}
		n := graph.Node{Op: "Conv", Name: "conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 1, 1, 1}}}}
		g, _ := oneNodeGraph("conv", 17, n, []*graph.Tensor{w, bias}, in, in)
		x := Deterministic(int(numelOf(in)), 6)
		flops := 2 * float64(s.C*s.C*9*s.HW*s.HW)
		for _, c := range []struct {
			name string
			be   func() libml.Backend
		}{
			{"sluice", func() libml.Backend { return cpu.New() }},
			{"ort", func() libml.Backend { return ort.New(ort.Options{IntraOpThreads: 2, Quiet: true}) }},
		} {
			b.Run(fmt.Sprintf("3x3-%d-%d/%s", s.C, s.HW, c.name), func(b *testing.B) {
				be := c.be()
				if err := be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
					b.Fatal(err)
				}
				defer be.Deinit()
				benchInfer(b, be, "conv", g, x)
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
			})
		}
	}
}

// benchInfer loads g on be at batch 1 and times InferBatch on x (the
// loading and configuring untimed).
func benchInfer(b *testing.B, be libml.Backend, name string, g *graph.Graph, x []float32) {
	b.Helper()
	ctx := context.Background()
	inst, err := be.LoadModel(ctx, name, g)
	if err != nil {
		b.Fatal(err)
	}
	defer inst.Close()
	if err := be.ConfigureBatch(inst, 1); err != nil {
		b.Fatal(err)
	}
	out := make([]float32, inst.OutputSize())
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := be.InferBatch(ctx, inst, 1, x, out); err != nil {
			b.Fatal(err)
		}
	}
}

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

// BenchmarkConv times ResNet's convolutions at batch 1 on the engine and
// on ONNX Runtime, both on 2 threads, in the same run: its 3x3 layers
// (stride 1, padded, C to C channels at 56x56, 28x28, 14x14 and 7x7), its
// stride-2 3x3 layers (C to 2C channels, the image halved) and its first
// 7x7 stride-2 layer (3 to 64 channels at 224x224), each with a bias and
// no activation.
// GFLOP/s counts the direct convolution's multiply-adds, two each,
// whatever algorithm ran:
//
//	go test -run '^$' -bench 'BenchmarkConv$' ./libml/conformance/
func BenchmarkConv(b *testing.B) {
	if _, err := ort.LibraryPath(); err != nil {
		RequireDeps(b, "ONNX Runtime", err)
	}
	ctx := context.Background()
	// ResNet's 3x3 layers at stride 1, its stride-2 3x3 layers (C in,
	// 2C out, the image halved) and its first 7x7 stride-2 layer
	for _, s := range []struct{ C, Cout, HW, K, S int64 }{
		{64, 64, 56, 3, 1}, {128, 128, 28, 3, 1}, {256, 256, 14, 3, 1}, {512, 512, 7, 3, 1},
		{64, 128, 56, 3, 2}, {128, 256, 28, 3, 2}, {256, 512, 14, 3, 2}, {3, 64, 224, 7, 2},
	} {
		in := []int64{1, s.C, s.HW, s.HW}
		pad := s.K / 2
		oh := (s.HW+2*pad-s.K)/s.S + 1
		wd := []int64{s.Cout, s.C, s.K, s.K}
		w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: wd, F32: Deterministic(int(numelOf(wd)), 5)}
		bias := &graph.Tensor{Name: "b", DType: graph.Float32, Dims: []int64{s.Cout}, F32: Deterministic(int(s.Cout), 7)}
		n := graph.Node{Op: "Conv", Name: "conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{pad, pad, pad, pad}},
				{Name: "strides", Kind: graph.AttrInts, Ints: []int64{s.S, s.S}}}}
		g, _ := oneNodeGraph("conv", 17, n, []*graph.Tensor{w, bias}, in, []int64{1, s.Cout, oh, oh})
		x := Deterministic(int(numelOf(in)), 6)
		flops := 2 * float64(s.Cout*s.C*s.K*s.K*oh*oh)
		name := fmt.Sprintf("%dx%d-%d-%d", s.K, s.K, s.C, s.HW)
		if s.S != 1 {
			name += fmt.Sprintf("-s%d", s.S)
		}
		for _, c := range []struct {
			name string
			be   func() libml.Backend
		}{
			{"sluice", func() libml.Backend { return cpu.New() }},
			{"ort", func() libml.Backend { return ort.New(ort.Options{IntraOpThreads: 2, Quiet: true}) }},
		} {
			b.Run(name+"/"+c.name, func(b *testing.B) {
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

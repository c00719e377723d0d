package conformance

import "testing"

// BenchmarkQConv runs integer convolutions of ResNet-50's shapes (a 3x3
// layer and a 1x1 one of its first stage, 3x3 ones at 28x28, 14x14 and
// 7x7) through the cpu backend at batch 1: QuantizeLinear, QLinearConv,
// DequantizeLinear, the integer tensors between them stored as bytes. The
// quantisation passes and the request's copies count too: they dominate
// the 1x1 case; `perf record` on the 3x3 ones splits the product from its
// im2col.
func BenchmarkQConv(b *testing.B) {
	be := cpuBackend(b)
	for _, c := range []struct {
		name                     string
		C, M, HW, K, pad, stride int64
		G                        int64 // groups (0: 1)
	}{
		{"3x3-64-56", 64, 64, 56, 3, 1, 1, 0},
		{"1x1-64x256-56", 64, 256, 56, 1, 0, 1, 0},
		{"3x3-512-7", 512, 512, 7, 3, 1, 1, 0},
		{"3x3-256-14", 256, 256, 14, 3, 1, 1, 0},
		{"3x3-128-28", 128, 128, 28, 3, 1, 1, 0},
		{"1x1-16x96-112", 16, 96, 112, 1, 0, 1, 0},
		{"1x1-96x24-56", 96, 24, 56, 1, 0, 1, 0},
		{"1x1s2-1024x2048-14", 1024, 2048, 14, 1, 0, 2, 0},
		{"1x1s2-512x1024-28", 512, 1024, 28, 1, 0, 2, 0},
		// MobileNetV2-int8's depthwise layers that take the plane paths
		{"dw-32-112", 32, 32, 112, 3, 1, 1, 32},
		{"dw-96-112-s2", 96, 96, 112, 3, 1, 2, 96},
		{"dw-144-56-s2", 144, 144, 56, 3, 1, 2, 144},
	} {
		g, x := qconvGraph(c.C, c.M, max(c.G, 1), c.HW, c.HW, c.K, c.stride, c.pad, 0, true, true)
		g = byteChain(g, false)
		b.Run(c.name, func(b *testing.B) {
			benchInfer(b, be, c.name, g, x.F32)
			ohw := (c.HW+2*c.pad-c.K)/c.stride + 1
			ops := 2 * float64(c.M*c.C/max(c.G, 1)*c.K*c.K*ohw*ohw)
			b.ReportMetric(ops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GOP/s")
		})
	}
}

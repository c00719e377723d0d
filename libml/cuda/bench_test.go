//go:build linux && cgo

package cuda

import (
	"math/rand/v2"
	"testing"

	"sluice/libml/cuda/cudrv"
)

// GPU benchmarks (SLUICE_GPU=1): kernel time per launch, measured with
// events around b.N launches on one stream.
//
//	SLUICE_GPU=1 ./cuda.test -test.run - -test.bench GPU

func benchKernel(b *testing.B, g *gpuExec, l Launch, params []byte, flops, bytes float64) {
	f := g.ks.Func(l.Kernel)
	per := timeLaunches(b, g, func(s *cudrv.Stream) error { return f.Launch(l.Grid, s, params) })
	b.ReportMetric(per*1e6, "µs/kernel")
	if flops > 0 {
		b.ReportMetric(flops/per/1e9, "GFLOP/s")
	}
	if bytes > 0 {
		b.ReportMetric(bytes/per/1e9, "GB/s")
	}
}

// timeLaunches calls launch once on a new stream of g's device (warm-up:
// JIT, caches), then b.N times between two events, and returns the
// seconds per call by the events.
func timeLaunches(b *testing.B, g *gpuExec, launch func(s *cudrv.Stream) error) float64 {
	s, err := g.dev.NewStream(0)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	e0, _ := g.dev.NewEvent()
	e1, _ := g.dev.NewEvent()
	defer e0.Close()
	defer e1.Close()
	if err := launch(s); err != nil {
		b.Fatal(err)
	}
	if err := s.Sync(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	e0.Record(s)
	for i := 0; i < b.N; i++ {
		if err := launch(s); err != nil {
			b.Fatal(err)
		}
	}
	e1.Record(s)
	if err := e1.Sync(); err != nil {
		b.Fatal(err)
	}
	ms, _ := e1.Since(e0)
	return float64(ms) / 1e3 / float64(b.N)
}

func benchGPU(b *testing.B) *gpuExec {
	if !gpuWanted() {
		b.Skip("GPU benchmark: set SLUICE_GPU=1")
	}
	g, err := openGPU()
	if err != nil {
		b.Fatal(err)
	}
	return g
}

func BenchmarkGPUGemm(b *testing.B) {
	g := benchGPU(b)
	for _, n := range []int{256, 1024, 2048} {
		b.Run(itoa(n), func(b *testing.B) {
			c := gemmCase{M: n, N: n, K: n, bd: [3]int{1, 1, 1}, alpha: 1, noRef: true}
			a, _ := gemmArgs(b, g, c, rand.New(rand.NewPCG(1, 2)))
			l, err := Plan(OpGemm, a)
			if err != nil {
				b.Fatal(err)
			}
			benchKernel(b, g, l, Pack(newState(b, g), 0, a), 2*float64(n)*float64(n)*float64(n), 0)
		})
	}
}

func BenchmarkGPUConv(b *testing.B) {
	g := benchGPU(b)
	// a ResNet-50 3x3 layer at batch 8: 8x256x14x14 -> 256
	cg := convGeom{N: 8, C: 256, H: 14, W: 14, Cout: 256, G: 1, KH: 3, KW: 3, SH: 1, SW: 1, PT: 1, PL: 1, DH: 1, DW: 1}.withOut(1, 1)
	r := rand.New(rand.NewPCG(3, 4))
	var a Args
	a.In[0] = upload(b, g, randVec(r, cg.N*cg.C*cg.H*cg.W, -1, 1))
	a.In[1] = upload(b, g, randVec(r, cg.Cout*cg.C*9, -1, 1))
	a.Out = g.Alloc(b, 4*cg.N*cg.Cout*cg.OH*cg.OW)
	copy(a.P[:], cg.params())
	l, err := Plan(OpConv, &a)
	if err != nil {
		b.Fatal(err)
	}
	flops := 2 * float64(cg.N*cg.Cout*cg.OH*cg.OW) * float64(cg.C*9)
	benchKernel(b, g, l, Pack(newState(b, g), 0, &a), flops, 0)
}

func BenchmarkGPUUnary(b *testing.B) {
	g := benchGPU(b)
	n := 1 << 24
	var a Args
	a.In[0] = g.Alloc(b, 4*n)
	a.Out = g.Alloc(b, 4*n)
	a.P[0], a.P[PAct] = int64(n), actGelu
	l, err := Plan(OpUnary, &a)
	if err != nil {
		b.Fatal(err)
	}
	benchKernel(b, g, l, Pack(newState(b, g), 0, &a), 0, 8*float64(n))
}

// The gather of a batch of 64 requests of 1400-byte fragments from pinned
// host memory.
func BenchmarkGPUBatchGather(b *testing.B) {
	g := benchGPU(b)
	const nfrag, ln = 64 * 108, 1400 // 64 requests of 3x224x224 floats
	host := g.HostAlloc(b, nfrag*ln)
	frags := make([]Frag, nfrag)
	for i := range frags {
		frags[i] = Frag{Src: host.Dev() + uint64(i*ln), Dst: uint64(i * ln), Len: ln}
	}
	desc := g.HostAlloc(b, nfrag*FragSize)
	desc.Set(EncodeFrags(frags))
	a := Args{Out: g.Alloc(b, nfrag*ln), Aux: desc.Dev()}
	l, err := PlanBatchGather(&a, nfrag, 1)
	if err != nil {
		b.Fatal(err)
	}
	benchKernel(b, g, l, Pack(newState(b, g), 0, &a), 0, nfrag*ln)
}

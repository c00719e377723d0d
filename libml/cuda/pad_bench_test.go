//go:build linux && cgo

package cuda

import (
	"math/rand/v2"
	"testing"

	"sluice/libml/cuda/cudrv"
)

// BenchmarkGPUPadOverhead is dynamic kernel padding's cost on the RT
// kernel (REEF §6.5 reports about 1%): an RT kernel run through sg_pad
// with no BE kernel to pad with, against the same kernel launched plainly,
// on one stream, timed with events around b.N launches. Every launch,
// plain or padded, is preceded by the same async copy of a pad control
// block (the padded launch needs its counters zeroed), so both pay it.
// The padded kernel runs with one physical block per RT block ("grid")
// and persistent-style with two blocks per SM ("2/SM"). Two more
// variants split a padded launch's cost: "plain-nocopy" is the kernel as
// an unpadded run launches it (no copy), "padded-full" everything a
// padded launch queues (the control block out, a BE flag cleared,
// sg_pad, the block back). gemm64 is a kernel of a few µs, like most of
// BERT-base's and MobileNetV2's at batch 1.
//
//	SLUICE_GPU=1 ./cuda.test -test.run - -test.bench GPUPadOverhead
func BenchmarkGPUPadOverhead(b *testing.B) {
	g := benchGPU(b)
	type rtCase struct {
		name string
		op   Op
		args func(b *testing.B) *Args
	}
	gemm := func(n int) func(b *testing.B) *Args {
		return func(b *testing.B) *Args {
			a, _ := gemmArgs(b, g, gemmCase{M: n, N: n, K: n, bd: [3]int{1, 1, 1}, alpha: 1, noRef: true}, rand.New(rand.NewPCG(5, 6)))
			return a
		}
	}
	conv := func(b *testing.B) *Args {
		// a ResNet-50 3x3 layer at batch 8: 8x256x14x14 -> 256
		cg := convGeom{N: 8, C: 256, H: 14, W: 14, Cout: 256, G: 1, KH: 3, KW: 3, SH: 1, SW: 1, PT: 1, PL: 1, DH: 1, DW: 1}.withOut(1, 1)
		r := rand.New(rand.NewPCG(7, 8))
		a := &Args{}
		a.In[0] = upload(b, g, randVec(r, cg.N*cg.C*cg.H*cg.W, -1, 1))
		a.In[1] = upload(b, g, randVec(r, cg.Cout*cg.C*9, -1, 1))
		a.Out = g.Alloc(b, 4*cg.N*cg.Cout*cg.OH*cg.OW)
		copy(a.P[:], cg.params())
		return a
	}
	// gemm64: a kernel of a few µs and a few blocks, like most of
	// BERT-base's and MobileNetV2's at batch 1, where a padded launch's
	// copies weigh most
	for _, c := range []rtCase{{"gemm64", OpGemm, gemm(64)}, {"gemm512", OpGemm, gemm(512)}, {"gemm2048", OpGemm, gemm(2048)}, {"conv3x3", OpConv, conv}} {
		a := c.args(b)
		l, err := Plan(c.op, a)
		if err != nil {
			b.Fatal(err)
		}
		st := newState(b, g)
		ctl := PadCtl{RTOp: c.op, RTGrid: uint32(l.Grid), RTSMs: uint32(g.SMs())}
		cb, err := ctl.Encode()
		if err != nil {
			b.Fatal(err)
		}
		host, err := g.dev.HostAlloc(len(cb))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { host.Free() })
		copy(host.Bytes(), cb)
		cp, dummy := g.Alloc(b, len(cb)), g.Alloc(b, len(cb))
		beState := newState(b, g) // a BE stream's state, for the flag clear
		zero, err := g.dev.HostAlloc(8)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { zero.Free() })
		back, err := g.dev.HostAlloc(len(cb))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { back.Free() })
		plainF, padF := g.ks.Func(l.Kernel), g.ks.Func(KernelPad)
		plainP, padP := Pack(st, 0, a), PackPad(st, 1, a, cp)
		for _, v := range []struct {
			name string
			dst  uint64
			run  func(s *cudrv.Stream) error
		}{
			// the kernel as an unpadded run launches it: no copy
			{"plain-nocopy", 0, func(s *cudrv.Stream) error { return plainF.Launch(l.Grid, s, plainP) }},
			{"plain", dummy, func(s *cudrv.Stream) error { return plainF.Launch(l.Grid, s, plainP) }},
			{"padded-grid", cp, func(s *cudrv.Stream) error { return padF.Launch(l.Grid, s, padP) }},
			{"padded-2perSM", cp, func(s *cudrv.Stream) error { return padF.Launch(2*g.SMs(), s, padP) }},
			// everything a padded launch queues (pad_run.go): the control
			// block out, one BE flag cleared, sg_pad, the block back
			{"padded-full", cp, func(s *cudrv.Stream) error {
				if err := s.WriteAsync(beState+StateFlag, zero, 0, 4); err != nil {
					return err
				}
				if err := padF.Launch(2*g.SMs(), s, padP); err != nil {
					return err
				}
				return s.ReadAsync(back, 0, cp, len(cb))
			}},
		} {
			b.Run(c.name+"/"+v.name, func(b *testing.B) {
				per := timeLaunches(b, g, func(s *cudrv.Stream) error {
					if v.dst != 0 {
						if err := s.WriteAsync(v.dst, host, 0, len(cb)); err != nil {
							return err
						}
					}
					return v.run(s)
				})
				b.ReportMetric(per*1e6, "µs/kernel")
				if v.dst == cp {
					// every RT block ran: the padded launch did the work
					g.Read(b, cb, cp)
					if r := ctl.Result(cb); int(r.Done[0]) != l.Grid {
						b.Fatalf("padded launch ran %d of %d RT blocks", r.Done[0], l.Grid)
					}
				}
			})
		}
	}
}

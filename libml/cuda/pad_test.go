//go:build linux && cgo

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"

	"sluice/libml/cuda/internal/emu"
)

// padCase is a padded launch: an RT GEMM and two BE kernels (a unary op
// and a layer norm), with their references.
type padCase struct {
	rt, be0, be1       *Args
	rtL, be0L, be1L    Launch
	rtSt, be0St, be1St uint64
	rtWant, be0W, be1W []float32
	n0, rows1, cols1   int
}

func newPadCase(t *testing.T, ex executor, r *rand.Rand) *padCase {
	p := &padCase{}
	var err error
	c := gemmCase{M: 128, N: 128, K: 64, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2, act: actRelu}
	p.rt, p.rtWant = gemmArgs(t, ex, c, r)
	if p.rtL, err = Plan(OpGemm, p.rt); err != nil {
		t.Fatal(err)
	}
	p.n0 = 40 * ElemsPerBlock
	x := randVec(r, p.n0, -3, 3)
	p.be0 = &Args{In: [MaxIn]uint64{upload(t, ex, x)}, Out: outBuf(t, ex, p.n0)}
	p.be0.P[0], p.be0.P[PAct] = int64(p.n0), actSigmoid
	if p.be0L, err = Plan(OpUnary, p.be0); err != nil {
		t.Fatal(err)
	}
	p.be0W = make([]float32, p.n0)
	for i, v := range x {
		p.be0W[i] = float32(refAct(float64(v), actSigmoid, 0, 0))
	}
	p.rows1, p.cols1 = 10, 300
	y := randVec(r, p.rows1*p.cols1, -2, 2)
	p.be1 = &Args{In: [MaxIn]uint64{upload(t, ex, y)}, Out: outBuf(t, ex, len(y))}
	p.be1.P[0], p.be1.P[1], p.be1.F[0] = int64(p.rows1), int64(p.cols1), 1e-5
	if p.be1L, err = Plan(OpLayerNorm, p.be1); err != nil {
		t.Fatal(err)
	}
	p.be1W = make([]float32, len(y))
	for rr := 0; rr < p.rows1; rr++ {
		row := y[rr*p.cols1 : (rr+1)*p.cols1]
		m, v := 0.0, 0.0
		for _, e := range row {
			m += float64(e)
		}
		m /= float64(p.cols1)
		for _, e := range row {
			v += (float64(e) - m) * (float64(e) - m)
		}
		rs := 1 / math.Sqrt(v/float64(p.cols1)+1e-5)
		for j, e := range row {
			p.be1W[rr*p.cols1+j] = float32((float64(e) - m) * rs)
		}
	}
	p.rtSt, p.be0St, p.be1St = newState(t, ex), newState(t, ex), newState(t, ex)
	return p
}

// run launches the padded kernel: RT blocks on SMs [0, rtSMs), BE 0 and
// BE 1 on halves of the rest; returns the blocks each finished.
func (p *padCase) run(t *testing.T, ex executor, physical int) (rt uint32, be [PadMaxBE]uint32) {
	n := ex.SMs()
	rtSMs := max(1, n/4)
	mid := rtSMs + (n-rtSMs)/2
	ctl := PadCtl{RTOp: OpGemm, RTGrid: uint32(p.rtL.Grid), RTSMs: uint32(rtSMs), BE: []PadKernel{
		{Op: OpUnary, Args: *p.be0, State: p.be0St, Exec: 3, Grid: uint32(p.be0L.Grid), SMLo: uint32(rtSMs), SMHi: uint32(mid)},
		{Op: OpLayerNorm, Args: *p.be1, State: p.be1St, Exec: 4, Grid: uint32(p.be1L.Grid), SMLo: uint32(mid), SMHi: uint32(n)},
	}}
	cb, err := ctl.Encode()
	if err != nil {
		t.Fatal(err)
	}
	cp := ex.Alloc(t, len(cb))
	ex.Write(t, cp, cb)
	if err := ex.Launch(KernelPad, physical, PackPad(p.rtSt, 1, p.rt, cp)); err != nil {
		t.Fatal(err)
	}
	ex.Read(t, cb, cp)
	return PadDone(cb)
}

// check verifies the RT result and the BE blocks that ran, then finishes
// the BE kernels with ordinary launches from where padding left them.
func (p *padCase) check(t *testing.T, ex executor, rt uint32, be [PadMaxBE]uint32) {
	if int(rt) != p.rtL.Grid {
		t.Errorf("RT blocks done %d of %d", rt, p.rtL.Grid)
	}
	closeTo(t, "RT gemm", download(t, ex, p.rt.Out, len(p.rtWant)), p.rtWant, tol)
	got0 := download(t, ex, p.be0.Out, p.n0)
	k := int(be[0]) * ElemsPerBlock
	closeTo(t, "BE unary, padded part", got0[:k], p.be0W[:k], tol)
	if !allSentinel(got0[k:]) {
		t.Errorf("BE unary wrote past its %d finished blocks", be[0])
	}
	got1 := download(t, ex, p.be1.Out, len(p.be1W))
	k = int(be[1]) * p.cols1
	closeTo(t, "BE layernorm, padded part", got1[:k], p.be1W[:k], tol)
	if !allSentinel(got1[k:]) {
		t.Errorf("BE layernorm wrote past its %d finished blocks", be[1])
	}
	for _, f := range []struct {
		a    *Args
		l    Launch
		done uint32
		st   uint64
	}{{p.be0, p.be0L, be[0], p.be0St}, {p.be1, p.be1L, be[1], p.be1St}} {
		rest := *f.a
		rest.T[TBase] = int64(f.done)
		if err := ex.Launch(f.l.Kernel, f.l.Grid-int(f.done), Pack(f.st, 5, &rest)); err != nil {
			t.Fatal(err)
		}
	}
	closeTo(t, "BE unary, finished", download(t, ex, p.be0.Out, p.n0), p.be0W, tol)
	closeTo(t, "BE layernorm, finished", download(t, ex, p.be1.Out, len(p.be1W)), p.be1W, tol)
}

// Dynamic kernel padding (REEF §5): one launch runs the RT kernel whole on
// its SMs and BE blocks on the others while the RT kernel runs; BE
// kernels resume from where padding left them. In the emulator blocks
// run one at a time: in order, the first (RT) block does all RT work and
// no BE block runs; reversed, the first block (on the last SM: BE 1's)
// takes all of BE 1's blocks, then all RT blocks, and BE 0 gets none.
func TestPad(t *testing.T) {
	exs := []executor{&emuExec{}, &emuExec{opt: emu.Options{Reverse: true}}}
	if gpuWanted() {
		g, err := openGPU()
		if err != nil {
			t.Fatal(err)
		}
		exs = append(exs, g)
	}
	for _, ex := range exs {
		t.Run(ex.Name(), func(t *testing.T) {
			r := rand.New(rand.NewPCG(41, 42))
			p := newPadCase(t, ex, r)
			rt, be := p.run(t, ex, 2*ex.SMs())
			t.Logf("RT %d/%d blocks, BE unary %d/%d, BE layernorm %d/%d", rt, p.rtL.Grid,
				be[0], p.be0L.Grid, be[1], p.be1L.Grid)
			if ex.Name() == "emu-reverse" && (be[0] != 0 || int(be[1]) != p.be1L.Grid) {
				t.Errorf("reversed emulation: BE blocks done %v", be[:2])
			}
			if be[1] > 0 && readState(t, ex, p.be1St).Exec != 4 {
				t.Errorf("BE 1 execution index not recorded")
			}
			if readState(t, ex, p.rtSt).Exec != 1 {
				t.Errorf("RT execution index not recorded")
			}
			p.check(t, ex, rt, be)
		})
	}
}

// A preempted BE stream takes no blocks in a padded launch (its SMs'
// blocks help the RT kernel instead); the RT kernel is unaffected. BE 1
// is the kernel that runs in the reversed emulation (see TestPad).
func TestPadPreemptedBE(t *testing.T) {
	ex := &emuExec{opt: emu.Options{Reverse: true}}
	r := rand.New(rand.NewPCG(43, 44))
	p := newPadCase(t, ex, r)
	setFlag(t, ex, p.be1St, 1)
	rt, be := p.run(t, ex, 2*ex.SMs())
	if be[0] != 0 || be[1] != 0 {
		t.Errorf("BE done %v with BE 1 preempted", be[:2])
	}
	if s := readState(t, ex, p.be1St); s.Exec != -1 {
		t.Errorf("preempted BE 1 recorded execution index %d", s.Exec)
	}
	setFlag(t, ex, p.be1St, 0)
	p.check(t, ex, rt, be)
}

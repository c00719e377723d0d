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
// BE 1 on halves of the rest; returns the outcome.
func (p *padCase) run(t *testing.T, ex executor, physical int) PadResult {
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
	return ctl.Result(cb)
}

// check verifies the blocks of each kernel before its resume point (and,
// when no stream was preempted, that no block past it wrote), then
// relaunches every kernel from there with ordinary launches and verifies
// the whole results.
func (p *padCase) check(t *testing.T, ex executor, res PadResult, preempted bool) {
	got := download(t, ex, p.rt.Out, len(p.rtWant))
	if int(res.Resume[0]) == p.rtL.Grid {
		closeTo(t, "RT gemm", got, p.rtWant, tol)
	}
	got0 := download(t, ex, p.be0.Out, p.n0)
	k := int(res.Resume[1]) * ElemsPerBlock
	closeTo(t, "BE unary, padded part", got0[:k], p.be0W[:k], tol)
	if !preempted && !allSentinel(got0[k:]) {
		t.Errorf("BE unary wrote past its %d finished blocks", res.Done[1])
	}
	got1 := download(t, ex, p.be1.Out, len(p.be1W))
	k = int(res.Resume[2]) * p.cols1
	closeTo(t, "BE layernorm, padded part", got1[:k], p.be1W[:k], tol)
	if !preempted && !allSentinel(got1[k:]) {
		t.Errorf("BE layernorm wrote past its %d finished blocks", res.Done[2])
	}
	plain := &emuExec{}
	var rex executor = plain
	if _, ok := ex.(*gpuExec); ok {
		rex = ex
	}
	for i, f := range []struct {
		a  *Args
		l  Launch
		st uint64
	}{{p.rt, p.rtL, p.rtSt}, {p.be0, p.be0L, p.be0St}, {p.be1, p.be1L, p.be1St}} {
		setFlag(t, rex, f.st, 0)
		rest := *f.a
		rest.T[TBase] = int64(res.Resume[i])
		if err := rex.Launch(f.l.Kernel, f.l.Grid-int(res.Resume[i]), Pack(f.st, 5, &rest)); err != nil {
			t.Fatal(err)
		}
	}
	closeTo(t, "RT gemm, finished", download(t, ex, p.rt.Out, len(p.rtWant)), p.rtWant, tol)
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
			res := p.run(t, ex, 2*ex.SMs())
			t.Logf("RT %d/%d blocks, BE unary %d/%d, BE layernorm %d/%d", res.Done[0], p.rtL.Grid,
				res.Done[1], p.be0L.Grid, res.Done[2], p.be1L.Grid)
			if int(res.Done[0]) != p.rtL.Grid || res.Resume != res.Done {
				t.Errorf("RT unfinished or blocks lost without preemption: %+v", res)
			}
			if ex.Name() == "emu-reverse" && (res.Done[1] != 0 || int(res.Done[2]) != p.be1L.Grid) {
				t.Errorf("reversed emulation: BE blocks done %v", res.Done[1:3])
			}
			if res.Done[2] > 0 && readState(t, ex, p.be1St).Exec != 4 {
				t.Errorf("BE 1 execution index not recorded")
			}
			if readState(t, ex, p.rtSt).Exec != 1 {
				t.Errorf("RT execution index not recorded")
			}
			p.check(t, ex, res, false)
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
	res := p.run(t, ex, 2*ex.SMs())
	if res.Done[1] != 0 || res.Done[2] != 0 || int(res.Done[0]) != p.rtL.Grid {
		t.Errorf("done %v with BE 1 preempted", res.Done)
	}
	if s := readState(t, ex, p.be1St); s.Exec != -1 {
		t.Errorf("preempted BE 1 recorded execution index %d", s.Exec)
	}
	p.check(t, ex, res, true)
}

// A BE stream preempted while its blocks run in a padded launch: the
// block cut short is reported lost, and the kernel resumes from it.
func TestPadPreemptedBEMidBlock(t *testing.T) {
	r := rand.New(rand.NewPCG(47, 48))
	ex := &emuExec{opt: emu.Options{Reverse: true}}
	p := newPadCase(t, ex, r)
	// physical block 15 (SM 7: BE 1's) takes layer-norm rows one after
	// another; its 20th barrier falls in the third row's block
	ex.opt = emu.Options{Reverse: true, Preempt: true, PreemptBlock: 15, PreemptAfterSyncs: 20, PreemptAddr: p.be1St}
	res := p.run(t, ex, 2*ex.SMs())
	if res.Resume[2] == 0 || int(res.Resume[2]) >= p.be1L.Grid || res.Resume[2] > res.Done[2] {
		t.Errorf("BE 1 preempted mid-block: %+v", res)
	}
	if int(res.Done[0]) != p.rtL.Grid {
		t.Errorf("RT unfinished: %+v", res)
	}
	t.Logf("BE 1: %d blocks done, resume at %d", res.Done[2], res.Resume[2])
	p.check(t, ex, res, true)
}

// When the RT stream is preempted during a padded launch, no block takes
// more work: the launch ends with the RT kernel unfinished, and the RT
// kernel is restored by running it again (it is idempotent).
func TestPadPreemptedRT(t *testing.T) {
	// physical block 0 (an RT SM) runs RT blocks one after another; the
	// flag is set at its 12th barrier, the last of the first RT block
	// (prologue 1, then per block: claim, load, 4 K slices x 2, done),
	// which is then reported lost, conservatively
	ex := &emuExec{opt: emu.Options{Preempt: true, PreemptBlock: 0, PreemptAfterSyncs: 12}}
	r := rand.New(rand.NewPCG(45, 46))
	p := newPadCase(t, ex, r)
	res := p.run(t, ex, 2*ex.SMs())
	if int(res.Resume[0]) >= p.rtL.Grid || res.Done[1] != 0 || res.Done[2] != 0 {
		t.Errorf("after the RT stream was preempted: %+v", res)
	}
	if s := readState(t, ex, p.rtSt); s.Flag != 1 || s.Exec != 1 {
		t.Errorf("RT state %+v", s)
	}
	t.Logf("RT: %d blocks done, resume at %d", res.Done[0], res.Resume[0])
	p.check(t, ex, res, true)
}

//go:build linux && cgo

package cuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestKernelUnary(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(1, 2))
		const n = 2500 // 3 blocks, the last one partial
		for _, c := range []struct {
			act    int
			a, b   float32
			lo, hi float64
		}{
			{actRelu, 0, 0, -3, 3}, {actClip, -0.5, 0.7, -2, 2}, {actSigmoid, 0, 0, -8, 8},
			{actHardSigmoid, 0.2, 0.5, -5, 5}, {actHardSwish, 0, 0, -5, 5},
			{actTanh, 0, 0, -4, 4}, {actGelu, 0, 0, -4, 4}, {actGeluTanh, 0, 0, -4, 4},
			{actLeakyRelu, 0.1, 0, -3, 3}, {actExp, 0, 0, -10, 10}, {actLog, 0, 0, 0.01, 100},
			{actNeg, 0, 0, -3, 3}, {actAbs, 0, 0, -3, 3}, {actSqrt, 0, 0, 0, 50},
			{actRecip, 0, 0, 0.1, 10}, {actErf, 0, 0, -3, 3}, {actFloor, 0, 0, -9, 9},
			{actCeil, 0, 0, -9, 9}, {actPowC, 1.5, 0, 0.1, 10}, {actPowC, 3, 0, -3, 3},
			{actAffine, 2, -1, -3, 3}, {actSoftplus, 0, 0, -10, 10}, {actElu, 0.7, 0, -4, 4},
			{actIdentity, 0, 0, -3, 3}, {actRound, 0, 0, -9, 9}, {actSin, 0, 0, -20, 20},
			{actCos, 0, 0, -20, 20}, {actNone, 0, 0, -1, 1}, {actF16, 0, 0, -70000, 70000},
			{actSinh, 0, 0, -8, 8}, {actSinh, 0, 0, -0.6, 0.6}, {actAsinh, 0, 0, -1e5, 1e5},
			{actAsinh, 0, 0, -0.2, 0.2}, {actAtanh, 0, 0, -0.999, 0.999}, {actAtanh, 0, 0, -0.2, 0.2},
			{actAsin, 0, 0, -1, 1}, {actAcos, 0, 0, -1, 1}, {actAtan, 0, 0, -50, 50},
			{actAtan, 0, 0, -1, 1}, {actSign, 0, 0, -3, 3}, {actThreshRelu, 0.5, 0, -3, 3},
			{actShrink, 0.5, 0.25, -3, 3},
		} {
			x := randVec(r, n, c.lo, c.hi)
			var a Args
			a.In[0] = upload(t, ex, x)
			a.Out = outBuf(t, ex, n+5)
			a.P[0] = n
			a.P[PAct] = int64(c.act)
			a.F[FActA], a.F[FActB] = c.a, c.b
			runOp(t, ex, OpUnary, &a)
			got := download(t, ex, a.Out, n+5)
			want := make([]float32, n+5)
			for i := range x {
				want[i] = float32(refAct(float64(x[i]), c.act, float64(c.a), float64(c.b)))
			}
			for i := n; i < n+5; i++ {
				want[i] = sentinel // nothing past n is written
			}
			closeTo(t, fmt.Sprintf("act %d", c.act), got, want, tol)
		}
	})
}

func TestKernelBinary(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(3, 4))
		dims := []int{2, 3, 4, 5}
		n := 2 * 3 * 4 * 5
		// A full, B broadcast as [1,3,1,5]
		sa := []int64{60, 20, 5, 1}
		sb := []int64{0, 5, 0, 1}
		for op := 0; op < 8; op++ {
			A := randVec(r, n, 0.5, 3)
			if op == 7 { // PRelu: negative inputs matter
				A = randVec(r, n, -3, 3)
			}
			B := randVec(r, 15, 0.5, 2)
			var a Args
			a.In[0], a.In[1] = upload(t, ex, A), upload(t, ex, B)
			a.Out = outBuf(t, ex, n)
			a.P[0], a.P[1] = int64(op), 4
			for i := 0; i < 4; i++ {
				a.P[2+i], a.P[8+i], a.P[14+i] = int64(dims[i]), sa[i], sb[i]
			}
			a.P[PAct] = actRelu
			runOp(t, ex, OpBinary, &a)
			want := make([]float32, n)
			for i := range want {
				d3, d2, d1 := i%5, (i/5)%4, (i/20)%3
				x, z := float64(A[i]), float64(B[d1*5+d3])
				_ = d2
				var v float64
				switch op {
				case 0:
					v = x + z
				case 1:
					v = x - z
				case 2:
					v = x * z
				case 3:
					v = x / z
				case 4:
					v = math.Pow(x, z)
				case 5:
					v = math.Max(x, z)
				case 6:
					v = math.Min(x, z)
				case 7:
					v = x
					if x < 0 {
						v = x * z
					}
				}
				want[i] = float32(math.Max(v, 0))
			}
			closeTo(t, fmt.Sprintf("binop %d", op), download(t, ex, a.Out, n), want, tol)
		}
		// Mod (C's fmod) is exact on every device: mixed signs, quotients
		// up to 2^200 (x's exponent far above y's), subnormals, a remainder
		// of -0, and NaN for a zero divisor or an infinite dividend
		mx := []float32{5.5, -5.5, 5.5, -5.5, 1e30, -3e-39, 7e-39, 1, -4, 0, 3, float32(math.Inf(1)), 2.5e-45, 1e38}
		my := []float32{2, 2, -2, -2, 3.1e-30, 1e-39, 3e-45, 0.1, 2, 7, 0, 2, 1e-45, 1.7e-38}
		for len(mx) < 300 {
			v, w := randVec(r, 1, -1e6, 1e6)[0], randVec(r, 1, 1e-3, 50)[0]
			mx, my = append(mx, v), append(my, w)
		}
		var am Args
		am.In[0], am.In[1] = upload(t, ex, mx), upload(t, ex, my)
		am.Out = outBuf(t, ex, len(mx))
		am.P[0], am.P[1], am.P[2], am.P[8], am.P[14] = binMod, 1, int64(len(mx)), 1, 1
		runOp(t, ex, OpBinary, &am)
		for i, got := range download(t, ex, am.Out, len(mx)) {
			want := float32(math.Mod(float64(mx[i]), float64(my[i])))
			if math.Float32bits(got) != math.Float32bits(want) && !(math.IsNaN(float64(got)) && math.IsNaN(float64(want))) {
				t.Errorf("fmod(%g, %g) = %g, want %g", mx[i], my[i], got, want)
			}
		}
		// the contiguous fast path, and an in-place Mul (out == A): not
		// idempotent, so not for the executor that runs kernels twice
		if runsPerLaunch(ex) > 1 {
			return
		}
		A, B := randVec(r, 3000, -2, 2), randVec(r, 3000, -2, 2)
		var a Args
		a.In[0], a.In[1] = upload(t, ex, A), upload(t, ex, B)
		a.Out = a.In[0]
		a.P[0], a.P[1], a.P[2], a.P[8], a.P[14] = 2, 1, 3000, 1, 1
		runOp(t, ex, OpBinary, &a)
		if a.T[0] != 1 {
			t.Errorf("contiguous binary not planned as such")
		}
		want := make([]float32, 3000)
		for i := range want {
			want[i] = A[i] * B[i]
		}
		closeTo(t, "in-place mul", download(t, ex, a.Out, 3000), want, tol)
	})
}

func TestKernelChAffine(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(5, 6))
		N, C, inner := 2, 3, 700
		x, s, b := randVec(r, N*C*inner, -2, 2), randVec(r, C, -1, 1), randVec(r, C, -1, 1)
		var a Args
		a.In[0], a.In[1], a.In[2] = upload(t, ex, x), upload(t, ex, s), upload(t, ex, b)
		a.Out = outBuf(t, ex, len(x))
		a.P[0], a.P[1], a.P[2] = int64(N), int64(C), int64(inner)
		a.P[PAct] = actHardSwish
		runOp(t, ex, OpChAffine, &a)
		want := make([]float32, len(x))
		for i := range x {
			c := (i / inner) % C
			want[i] = float32(refAct(float64(x[i])*float64(s[c])+float64(b[c]), actHardSwish, 0, 0))
		}
		closeTo(t, "chaffine", download(t, ex, a.Out, len(x)), want, tol)
	})
}

func gemmArgs(t testing.TB, ex executor, c gemmCase, r *rand.Rand) (*Args, []float32) {
	nb := c.nb()
	A := randVec(r, nb*c.M*c.K, -1, 1)
	nbB := nb
	if c.bShared {
		nbB = 1
	}
	B := randVec(r, nbB*c.K*c.N, -1, 1)
	var bias, res []float32
	a := &Args{}
	a.In[0], a.In[1] = upload(t, ex, A), upload(t, ex, B)
	if c.biasMode != 0 {
		per := c.M
		if c.biasMode == 2 {
			per = c.N
		}
		nbias := nb
		if c.biasBroadcst {
			nbias = 1
		}
		bias = randVec(r, nbias*per, -1, 1)
		a.In[2] = upload(t, ex, bias)
		a.P[23] = int64(c.biasMode)
		if !c.biasBroadcst {
			// bias batch strides follow the batch dims
			a.P[20], a.P[21], a.P[22] = int64(c.bd[1]*c.bd[2]*per), int64(c.bd[2]*per), int64(per)
		}
	}
	if c.res {
		res = randVec(r, nb*c.M*c.N, -1, 1)
		a.In[3] = upload(t, ex, res)
	}
	a.Out = outBuf(t, ex, nb*c.M*c.N)
	a.P[0], a.P[1], a.P[2] = int64(c.M), int64(c.N), int64(c.K)
	if c.ta {
		a.P[3], a.P[5] = 1, int64(c.M)
	} else {
		a.P[5] = int64(c.K)
	}
	if c.tb {
		a.P[4], a.P[6] = 1, int64(c.K)
	} else {
		a.P[6] = int64(c.N)
	}
	a.P[7] = int64(c.N)
	a.P[8], a.P[9], a.P[10] = int64(c.bd[0]), int64(c.bd[1]), int64(c.bd[2])
	mk, kn, mn := int64(c.M*c.K), int64(c.K*c.N), int64(c.M*c.N)
	d1, d2 := int64(c.bd[1]), int64(c.bd[2])
	a.P[11], a.P[12], a.P[13] = d1*d2*mk, d2*mk, mk
	if !c.bShared {
		a.P[14], a.P[15], a.P[16] = d1*d2*kn, d2*kn, kn
	}
	a.P[17], a.P[18], a.P[19] = d1*d2*mn, d2*mn, mn
	a.F[0] = c.alpha
	a.P[PAct] = int64(c.act)
	a.F[FActA], a.F[FActB] = 0, 6
	if c.noRef {
		return a, nil
	}
	return a, refGemm(c, A, B, bias, res)
}

// gemmCases are TestKernelGemm's cases (TestKernelGemmVersions runs
// them too).
var gemmCases = []gemmCase{
	{M: 70, N: 130, K: 50, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2, act: actRelu},
	{M: 33, N: 65, K: 17, ta: true, bd: [3]int{1, 1, 1}, alpha: 0.5, biasMode: 1, res: true},
	{M: 64, N: 64, K: 64, tb: true, bd: [3]int{1, 1, 1}, alpha: 1, act: actClip},
	{M: 5, N: 7, K: 100, ta: true, tb: true, bd: [3]int{1, 1, 1}, alpha: 2, act: actSigmoid},
	{M: 20, N: 30, K: 40, bd: [3]int{2, 1, 3}, alpha: 1, biasMode: 2, res: true, act: actGelu},
	{M: 9, N: 70, K: 33, bd: [3]int{1, 2, 2}, alpha: 1, bShared: true, biasMode: 1, biasBroadcst: true},
	{M: 3, N: 4, K: 0, bd: [3]int{1, 1, 1}, alpha: 1, biasMode: 2},
}

func TestKernelGemm(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(7, 8))
		for i, c := range gemmCases {
			a, want := gemmArgs(t, ex, c, r)
			runOp(t, ex, OpGemm, a)
			closeTo(t, fmt.Sprintf("gemm %d %+v", i, c), download(t, ex, a.Out, len(want)), want, tol)
		}
	})
}

// convCase is a convolution test case: its geometry (the output's size
// follows, with bottom and right padding pb and pr), whether it has a
// bias and a residual, and its activation.
type convCase struct {
	g         convGeom
	pb, pr    int
	bias, res bool
	act       int
}

// convArgs uploads c's random input, weights, bias and residual and
// returns the convolution's arguments (activation bounds -0.5, 0.5), its
// geometry with the output size, the input and the float64 reference.
func convArgs(t testing.TB, ex executor, c convCase, r *rand.Rand) (*Args, convGeom, []float32, []float32) {
	t.Helper()
	g := c.g.withOut(c.pb, c.pr)
	x := randVec(r, g.N*g.C*g.H*g.W, -1, 1)
	w := randVec(r, g.Cout*g.C/g.G*g.KH*g.KW, -1, 1)
	var bias, res []float32
	a := &Args{}
	a.In[0], a.In[1] = upload(t, ex, x), upload(t, ex, w)
	if c.bias {
		bias = randVec(r, g.Cout, -1, 1)
		a.In[2] = upload(t, ex, bias)
	}
	ny := g.N * g.Cout * g.OH * g.OW
	if c.res {
		res = randVec(r, ny, -1, 1)
		a.In[3] = upload(t, ex, res)
	}
	a.Out = outBuf(t, ex, ny)
	copy(a.P[:], g.params())
	a.P[PAct] = int64(c.act)
	a.F[FActA], a.F[FActB] = -0.5, 0.5
	return a, g, x, refConv(g, x, w, bias, res, c.act, -0.5, 0.5)
}

// convCases are TestKernelConv's cases (TestKernelConvVersions runs
// them too).
var convCases = []convCase{
	{convGeom{N: 2, C: 4, H: 9, W: 11, Cout: 6, G: 2, KH: 3, KW: 2, SH: 2, SW: 1, PT: 1, PL: 0, DH: 1, DW: 2}, 1, 1, true, true, actRelu},
	{convGeom{N: 1, C: 3, H: 12, W: 13, Cout: 70, G: 1, KH: 3, KW: 3, SH: 1, SW: 1, PT: 1, PL: 1, DH: 1, DW: 1}, 1, 1, true, false, actHardSwish},
	{convGeom{N: 2, C: 8, H: 5, W: 5, Cout: 8, G: 8, KH: 1, KW: 1, SH: 1, SW: 1, DH: 1, DW: 1}, 0, 0, false, false, actNone},
	{convGeom{N: 1, C: 16, H: 7, W: 6, Cout: 12, G: 1, KH: 5, KW: 5, SH: 3, SW: 2, PT: 2, PL: 2, DH: 1, DW: 1}, 2, 2, true, true, actClip},
}

func TestKernelConv(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(9, 10))
		for i, c := range convCases {
			a, g, x, want := convArgs(t, ex, c, r)
			ny := len(want)
			runOp(t, ex, OpConv, a)
			closeTo(t, fmt.Sprintf("conv %d", i), download(t, ex, a.Out, ny), want, tol)

			// the same convolution as IM2COL (the engine's small-output path)
			var b Args
			b.In[0] = a.In[0]
			kd, ohw := g.C/g.G*g.KH*g.KW, g.OH*g.OW
			b.Out = outBuf(t, ex, g.N*g.G*kd*ohw)
			copy(b.P[:], g.params())
			runOp(t, ex, OpIm2col, &b)
			closeTo(t, fmt.Sprintf("im2col %d", i), download(t, ex, b.Out, g.N*g.G*kd*ohw), refIm2col(g, x), tol)
		}
	})
}

func TestKernelDWConv(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(11, 12))
		for i, g := range []convGeom{
			{N: 2, C: 5, H: 9, W: 8, Cout: 10, G: 5, KH: 3, KW: 3, SH: 2, SW: 2, PT: 1, PL: 1, DH: 1, DW: 1},
			{N: 1, C: 32, H: 20, W: 20, Cout: 32, G: 32, KH: 5, KW: 5, SH: 1, SW: 1, PT: 4, PL: 4, DH: 2, DW: 2},
		} {
			g = g.withOut(g.PT, g.PL)
			x := randVec(r, g.N*g.C*g.H*g.W, -1, 1)
			w := randVec(r, g.Cout*g.KH*g.KW, -1, 1)
			bias := randVec(r, g.Cout, -1, 1)
			ny := g.N * g.Cout * g.OH * g.OW
			res := randVec(r, ny, -1, 1)
			var a Args
			a.In[0], a.In[1], a.In[2], a.In[3] = upload(t, ex, x), upload(t, ex, w), upload(t, ex, bias), upload(t, ex, res)
			a.Out = outBuf(t, ex, ny)
			copy(a.P[:], g.params())
			a.P[PAct] = actRelu
			runOp(t, ex, OpDWConv, &a)
			closeTo(t, fmt.Sprintf("dwconv %d", i), download(t, ex, a.Out, ny), refConv(g, x, w, bias, res, actRelu, 0, 0), tol)
		}
	})
}

func TestKernelCol2im(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(13, 14))
		// ConvTranspose 2x upsampling: input 6x7, kernel 4x4, stride 2, pad 1
		g := convGeom{N: 2, C: 4, H: 6, W: 7, Cout: 6, G: 2, KH: 4, KW: 4, SH: 2, SW: 2, PT: 1, PL: 1, DH: 1, DW: 1}
		g.OH = (g.H-1)*g.SH - 2*g.PT + g.DH*(g.KH-1) + 1
		g.OW = (g.W-1)*g.SW - 2*g.PL + g.DW*(g.KW-1) + 1
		Mg := g.Cout / g.G
		col := randVec(r, g.N*g.G*Mg*g.KH*g.KW*g.H*g.W, -1, 1)
		bias := randVec(r, g.Cout, -1, 1)
		ny := g.N * g.Cout * g.OH * g.OW
		var a Args
		a.In[0], a.In[1] = upload(t, ex, col), upload(t, ex, bias)
		a.Out = outBuf(t, ex, ny)
		copy(a.P[:], g.params())
		a.P[PAct] = actRelu
		runOp(t, ex, OpCol2im, &a)
		closeTo(t, "col2im", download(t, ex, a.Out, ny), refCol2im(g, col, bias, actRelu), tol)
	})
}

func TestKernelPool(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(15, 16))
		planes, H, W := 6, 13, 11
		x := randVec(r, planes*H*W, -2, 2)
		for i, c := range []struct {
			KH, KW, SH, SW, PT, PL, PB, PR, DH, DW, mode, incl int
		}{
			{3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 0, 0},
			{2, 2, 2, 2, 0, 0, 0, 0, 1, 1, 1, 0},
			{3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0},
			{3, 3, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1},
			{3, 2, 1, 2, 2, 0, 2, 1, 2, 1, 0, 0},
		} {
			OH := (H+c.PT+c.PB-c.DH*(c.KH-1)-1)/c.SH + 1
			OW := (W+c.PL+c.PR-c.DW*(c.KW-1)-1)/c.SW + 1
			var a Args
			a.In[0] = upload(t, ex, x)
			a.Out = outBuf(t, ex, planes*OH*OW)
			copy(a.P[:], []int64{int64(planes), int64(H), int64(W), int64(OH), int64(OW), int64(c.KH), int64(c.KW),
				int64(c.SH), int64(c.SW), int64(c.PT), int64(c.PL), int64(c.DH), int64(c.DW), int64(c.mode),
				int64(c.incl), int64(c.PB), int64(c.PR)})
			runOp(t, ex, OpPool, &a)
			want := make([]float32, planes*OH*OW)
			for p := 0; p < planes; p++ {
				for oh := 0; oh < OH; oh++ {
					for ow := 0; ow < OW; ow++ {
						m, s, cnt := math.Inf(-1), 0.0, 0
						for kh := 0; kh < c.KH; kh++ {
							for kw := 0; kw < c.KW; kw++ {
								ih, iw := oh*c.SH-c.PT+kh*c.DH, ow*c.SW-c.PL+kw*c.DW
								if c.incl == 1 && ih < H+c.PB && iw < W+c.PR {
									cnt++ // padded positions count
								}
								if ih < 0 || ih >= H || iw < 0 || iw >= W {
									continue
								}
								v := float64(x[(p*H+ih)*W+iw])
								m, s = math.Max(m, v), s+v
								if c.incl == 0 {
									cnt++
								}
							}
						}
						o := (p*OH+oh)*OW + ow
						if c.mode == 0 {
							want[o] = float32(m)
						} else {
							want[o] = float32(s / float64(cnt))
						}
					}
				}
			}
			closeTo(t, fmt.Sprintf("pool %d", i), download(t, ex, a.Out, len(want)), want, tol)
		}
	})
}

func TestKernelGPool(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(17, 18))
		for _, hw := range []int{49, 3000, 70000} {
			planes := 11
			if hw == 70000 {
				planes = 2 // long planes: the in-loop polls run
			}
			x := randVec(r, planes*hw, -2, 2)
			for mode := 0; mode < 2; mode++ {
				var a Args
				a.In[0] = upload(t, ex, x)
				a.Out = outBuf(t, ex, planes)
				a.P[0], a.P[1], a.P[2] = int64(planes), int64(hw), int64(mode)
				runOp(t, ex, OpGPool, &a)
				want := make([]float32, planes)
				for p := range want {
					m, s := math.Inf(-1), 0.0
					for _, v := range x[p*hw : (p+1)*hw] {
						m, s = math.Max(m, float64(v)), s+float64(v)
					}
					want[p] = float32(m)
					if mode == 1 {
						want[p] = float32(s / float64(hw))
					}
				}
				closeTo(t, fmt.Sprintf("gpool hw %d mode %d", hw, mode), download(t, ex, a.Out, planes), want, tol)
			}
		}
	})
}

func TestKernelSoftmax(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(19, 20))
		for _, c := range []struct{ outer, n, inner, lg int }{
			{3, 1000, 1, 0}, {2, 300, 3, 1}, {2, 10, 40, 0}, {4, 20, 1, 1}, {1, 20000, 1, 0},
		} {
			N := c.outer * c.n * c.inner
			x := randVec(r, N, -5, 5)
			var a Args
			a.In[0] = upload(t, ex, x)
			a.Out = outBuf(t, ex, N)
			a.P[0], a.P[1], a.P[2], a.P[3] = int64(c.outer), int64(c.n), int64(c.inner), int64(c.lg)
			runOp(t, ex, OpSoftmax, &a)
			want := make([]float32, N)
			for o := 0; o < c.outer; o++ {
				for i := 0; i < c.inner; i++ {
					at := func(j int) int { return (o*c.n+j)*c.inner + i }
					m := math.Inf(-1)
					for j := 0; j < c.n; j++ {
						m = math.Max(m, float64(x[at(j)]))
					}
					s := 0.0
					for j := 0; j < c.n; j++ {
						s += math.Exp(float64(x[at(j)]) - m)
					}
					for j := 0; j < c.n; j++ {
						v := float64(x[at(j)]) - m
						if c.lg == 1 {
							want[at(j)] = float32(v - math.Log(s))
						} else {
							want[at(j)] = float32(math.Exp(v) / s)
						}
					}
				}
			}
			closeTo(t, fmt.Sprintf("softmax %+v (T0 %d)", c, a.T[0]), download(t, ex, a.Out, N), want, tol)
		}
	})
}

func TestKernelLayerNorm(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(21, 22))
		for _, c := range []struct {
			rows, cols int
			scale, bia bool
		}{{5, 300, true, true}, {3, 768, true, false}, {2, 40000, false, false}} {
			x := randVec(r, c.rows*c.cols, -3, 3)
			sc, bi := randVec(r, c.cols, 0.5, 1.5), randVec(r, c.cols, -1, 1)
			var a Args
			a.In[0] = upload(t, ex, x)
			if c.scale {
				a.In[1] = upload(t, ex, sc)
			}
			if c.bia {
				a.In[2] = upload(t, ex, bi)
			}
			a.Out = outBuf(t, ex, len(x))
			a.P[0], a.P[1] = int64(c.rows), int64(c.cols)
			a.F[0] = 1e-5
			runOp(t, ex, OpLayerNorm, &a)
			want := make([]float32, len(x))
			for rr := 0; rr < c.rows; rr++ {
				row := x[rr*c.cols : (rr+1)*c.cols]
				mean, vr := 0.0, 0.0
				for _, v := range row {
					mean += float64(v)
				}
				mean /= float64(c.cols)
				for _, v := range row {
					vr += (float64(v) - mean) * (float64(v) - mean)
				}
				rstd := 1 / math.Sqrt(vr/float64(c.cols)+1e-5)
				for j, v := range row {
					z := (float64(v) - mean) * rstd
					if c.scale {
						z *= float64(sc[j])
					}
					if c.bia {
						z += float64(bi[j])
					}
					want[rr*c.cols+j] = float32(z)
				}
			}
			closeTo(t, fmt.Sprintf("layernorm %+v", c), download(t, ex, a.Out, len(x)), want, tol)
		}
	})
}

func TestKernelReduce(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(23, 24))
		for _, c := range []struct{ outer, rr, inner int }{{3, 500, 1}, {2, 30, 40}, {5, 10, 1}} {
			N := c.outer * c.rr * c.inner
			x := randVec(r, N, 0.8, 1.2)
			for mode := 0; mode < 7; mode++ {
				var a Args
				a.In[0] = upload(t, ex, x)
				a.Out = outBuf(t, ex, c.outer*c.inner)
				a.P[0], a.P[1], a.P[2], a.P[3] = int64(c.outer), int64(c.rr), int64(c.inner), int64(mode)
				runOp(t, ex, OpReduce, &a)
				want := make([]float32, c.outer*c.inner)
				for o := 0; o < c.outer; o++ {
					for i := 0; i < c.inner; i++ {
						acc := map[int]float64{2: math.Inf(-1), 3: math.Inf(1), 4: 1}[mode]
						for j := 0; j < c.rr; j++ {
							v := float64(x[(o*c.rr+j)*c.inner+i])
							switch mode {
							case 2:
								acc = math.Max(acc, v)
							case 3:
								acc = math.Min(acc, v)
							case 4:
								acc *= v
							case 5, 6:
								acc += v * v
							default:
								acc += v
							}
						}
						switch mode {
						case 0:
							acc /= float64(c.rr)
						case 6:
							acc = math.Sqrt(acc)
						}
						want[o*c.inner+i] = float32(acc)
					}
				}
				closeTo(t, fmt.Sprintf("reduce %+v mode %d", c, mode), download(t, ex, a.Out, len(want)), want, tol)
			}
		}
	})
}

func TestKernelCopy(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(25, 26))
		// Transpose [2,3,4,5] by perm (0,2,3,1): out dims [2,4,5,3]
		x := randVec(r, 120, -1, 1)
		var a Args
		a.In[0] = upload(t, ex, x)
		a.Out = outBuf(t, ex, 120)
		// iterate over the output's dims; input strides permuted
		copy(a.P[:], []int64{4, 2, 4, 5, 3, 0, 0, 60, 5, 1, 20, 0, 0, 60, 15, 3, 1})
		runOp(t, ex, OpCopy, &a)
		want := make([]float32, 120)
		for n := 0; n < 2; n++ {
			for c := 0; c < 3; c++ {
				for h := 0; h < 4; h++ {
					for w := 0; w < 5; w++ {
						want[((n*4+h)*5+w)*3+c] = x[((n*3+c)*4+h)*5+w]
					}
				}
			}
		}
		closeTo(t, "transpose", download(t, ex, a.Out, 120), want, 0)

		// Concat along axis 1: [2,3] and [2,5] into [2,8], one COPY each
		y := outBuf(t, ex, 16)
		A, B := randVec(r, 6, -1, 1), randVec(r, 10, -1, 1)
		for i, part := range []struct {
			v    []float32
			cols int
			off  int
		}{{A, 3, 0}, {B, 5, 3}} {
			var c Args
			c.In[0] = upload(t, ex, part.v)
			c.Out = y + uint64(4*part.off)
			copy(c.P[:], []int64{2, 2, int64(part.cols), 0, 0, 0, 0, int64(part.cols), 1, 0, 0, 0, 0, 8, 1})
			runOp(t, ex, OpCopy, &c)
			_ = i
		}
		want = []float32{A[0], A[1], A[2], B[0], B[1], B[2], B[3], B[4], A[3], A[4], A[5], B[5], B[6], B[7], B[8], B[9]}
		closeTo(t, "concat", download(t, ex, y, 16), want, 0)
	})
}

func TestKernelGather(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(27, 28))
		outer, axis, inner := 3, 5, 4
		idx := []int64{4, -1, 0, 2}
		x := randVec(r, outer*axis*inner, -1, 1)
		ib := make([]byte, 8*len(idx))
		for i, v := range idx {
			for k := 0; k < 8; k++ {
				ib[8*i+k] = byte(uint64(v) >> (8 * k))
			}
		}
		var a Args
		a.In[0] = upload(t, ex, x)
		a.Aux = ex.Alloc(t, len(ib))
		ex.Write(t, a.Aux, ib)
		n := outer * len(idx) * inner
		a.Out = outBuf(t, ex, n)
		a.P[0], a.P[1], a.P[2], a.P[3] = int64(outer), int64(axis), int64(inner), int64(len(idx))
		runOp(t, ex, OpGather, &a)
		want := make([]float32, n)
		for o := 0; o < outer; o++ {
			for j, v := range idx {
				if v < 0 {
					v += int64(axis)
				}
				copy(want[(o*len(idx)+j)*inner:], x[(o*axis+int(v))*inner:(o*axis+int(v)+1)*inner])
			}
		}
		closeTo(t, "gather", download(t, ex, a.Out, n), want, 0)
	})
}

func TestKernelResize(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(29, 30))
		planes, H, W, OH, OW := 2, 5, 7, 9, 13
		x := randVec(r, planes*H*W, -1, 1)
		sh, sw := float32(OH)/float32(H), float32(OW)/float32(W)
		for mode := 0; mode < 2; mode++ {
			for coord := 0; coord <= 6; coord++ {
				for nm := 0; nm < 4; nm++ {
					if mode == 1 && nm > 0 {
						continue
					}
					var a Args
					a.In[0] = upload(t, ex, x)
					a.Out = outBuf(t, ex, planes*OH*OW)
					copy(a.P[:], []int64{int64(planes), int64(H), int64(W), int64(OH), int64(OW), int64(mode), int64(coord), int64(nm)})
					a.F[0], a.F[1] = sh, sw
					// tf_crop_and_resize: a crop inside H, past W's borders
					a.F[3], a.F[4], a.F[5], a.F[6], a.F[7] = 0.1, 0.9, -0.2, 1.1, -3
					runOp(t, ex, OpResize, &a)
					want := refResize(x, planes, H, W, OH, OW, mode, coord, nm, sh, sw)
					closeTo(t, fmt.Sprintf("resize mode %d coord %d nearest %d", mode, coord, nm),
						download(t, ex, a.Out, len(want)), want, tol)
				}
			}
		}
	})
}

// refResize follows ONNX Resize (2-D, float32 coordinates as the
// operator computes them).
func refResize(x []float32, planes, H, W, OH, OW, mode, coord, nm int, sh, sw float32) []float32 {
	roi := map[int][2]float32{H: {0.1, 0.9}, W: {-0.2, 1.1}} // H != W here
	src := func(o int, scale float32, in, out int) float32 {
		switch coord {
		case 5:
			st, en := roi[in][0], roi[in][1]
			if out > 1 {
				return st*float32(in-1) + float32(o)*(en-st)*float32(in-1)/float32(out-1)
			}
			return 0.5 * (st + en) * float32(in-1)
		case 1:
			return float32(o) / scale
		case 2:
			if out == 1 {
				return 0
			}
			return float32(o) * float32(in-1) / float32(out-1)
		case 3:
			if out > 1 {
				return (float32(o)+0.5)/scale - 0.5
			}
			return 0
		case 4:
			return (float32(o) + 0.5) / scale
		case 6:
			adj := float32(out) / (scale * float32(in))
			return float32(in)/2*(1-adj) + (float32(o)+0.5)/scale - 0.5
		}
		return (float32(o)+0.5)/scale - 0.5
	}
	near := func(v float32, n int) int {
		var i int
		f := float32(math.Floor(float64(v)))
		switch nm {
		case 1:
			i = int(math.Floor(float64(v + 0.5)))
		case 2:
			i = int(f)
		case 3:
			i = int(math.Ceil(float64(v)))
		default:
			if v-f == 0.5 {
				i = int(f)
			} else {
				i = int(math.Floor(float64(v + 0.5)))
			}
		}
		return min(max(i, 0), n-1)
	}
	out := make([]float32, planes*OH*OW)
	for p := 0; p < planes; p++ {
		for oh := 0; oh < OH; oh++ {
			for ow := 0; ow < OW; ow++ {
				fy, fx := src(oh, sh, H, OH), src(ow, sw, W, OW)
				o := (p*OH+oh)*OW + ow
				if coord == 5 && (fy < 0 || fy > float32(H-1) || fx < 0 || fx > float32(W-1)) {
					out[o] = -3
					continue
				}
				if mode == 0 {
					out[o] = x[(p*H+near(fy, H))*W+near(fx, W)]
					continue
				}
				fy = min(max(fy, 0), float32(H-1))
				fx = min(max(fx, 0), float32(W-1))
				y0, x0 := int(fy), int(fx)
				y1, x1 := min(y0+1, H-1), min(x0+1, W-1)
				wy, wx := float64(fy)-float64(y0), float64(fx)-float64(x0)
				at := func(yy, xx int) float64 { return float64(x[(p*H+yy)*W+xx]) }
				u := at(y0, x0)*(1-wx) + at(y0, x1)*wx
				v := at(y1, x0)*(1-wx) + at(y1, x1)*wx
				out[o] = float32(u*(1-wy) + v*wy)
			}
		}
	}
	return out
}

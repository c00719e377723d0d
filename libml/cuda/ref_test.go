//go:build linux && cgo

package cuda

import (
	"math"
	"math/rand/v2"

	"sluice/libml/engine"
)

// Naive float64 references of the operator kernels, written from the
// operators' definitions (ONNX), not from the kernels.

// Activation codes (enum sk_act).
const (
	actNone, actRelu, actClip, actSigmoid, actHardSigmoid, actHardSwish = 0, 1, 2, 3, 4, 5
	actTanh, actGelu, actGeluTanh, actLeakyRelu, actExp, actLog         = 6, 7, 8, 9, 10, 11
	actNeg, actAbs, actSqrt, actRecip, actErf, actFloor, actCeil        = 12, 13, 14, 15, 16, 17, 18
	actPowC, actAffine, actSoftplus, actElu, actIdentity, actRound      = 19, 20, 21, 22, 23, 24
	actSin, actCos                                                      = 25, 26
	actF16                                                              = 27
	actSinh, actAsinh, actAtanh, actAsin, actAcos, actAtan, actSign     = 28, 29, 30, 31, 32, 33, 34
	actThreshRelu, actShrink                                            = 35, 36
)

// binMod is the binary code of C's fmod (enum sk_binop).
const binMod = 13

func refAct(x float64, act int, a, b float64) float64 {
	switch act {
	case actRelu:
		return math.Max(x, 0)
	case actClip:
		return math.Min(math.Max(x, a), b)
	case actSigmoid:
		return 1 / (1 + math.Exp(-x))
	case actHardSigmoid:
		return math.Min(math.Max(a*x+b, 0), 1)
	case actHardSwish:
		return x * math.Min(math.Max(x/6+0.5, 0), 1)
	case actTanh:
		return math.Tanh(x)
	case actGelu:
		return 0.5 * x * (1 + math.Erf(x/math.Sqrt2))
	case actGeluTanh:
		return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
	case actLeakyRelu:
		if x >= 0 {
			return x
		}
		return a * x
	case actExp:
		return math.Exp(x)
	case actLog:
		return math.Log(x)
	case actNeg:
		return -x
	case actAbs:
		return math.Abs(x)
	case actSqrt:
		return math.Sqrt(x)
	case actRecip:
		return 1 / x
	case actErf:
		return math.Erf(x)
	case actFloor:
		return math.Floor(x)
	case actCeil:
		return math.Ceil(x)
	case actPowC:
		return math.Pow(x, a)
	case actAffine:
		return a*x + b
	case actSoftplus:
		return math.Log1p(math.Exp(x))
	case actElu:
		if x >= 0 {
			return x
		}
		return a * (math.Exp(x) - 1)
	case actRound:
		return math.RoundToEven(x)
	case actSin:
		return math.Sin(x)
	case actCos:
		return math.Cos(x)
	case actF16:
		return float64(engine.RoundF16(float32(x)))
	case actSinh:
		return math.Sinh(x)
	case actAsinh:
		return math.Asinh(x)
	case actAtanh:
		return math.Atanh(x)
	case actAsin:
		return math.Asin(x)
	case actAcos:
		return math.Acos(x)
	case actAtan:
		return math.Atan(x)
	case actSign:
		switch {
		case x > 0:
			return 1
		case x < 0:
			return -1
		}
		return x
	case actThreshRelu:
		if x > a {
			return x
		}
		return 0
	case actShrink:
		switch {
		case x < -a:
			return x + b
		case x > a:
			return x - b
		}
		return 0
	}
	return x
}

func randVec(r *rand.Rand, n int, lo, hi float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + (hi-lo)*r.Float64())
	}
	return v
}

// conv geometry (the engine's p[0..15]).
type convGeom struct {
	N, C, H, W, Cout, G, KH, KW, SH, SW, PT, PL, DH, DW, OH, OW int
}

func (g convGeom) params() []int64 {
	return []int64{int64(g.N), int64(g.C), int64(g.H), int64(g.W), int64(g.Cout), int64(g.G),
		int64(g.KH), int64(g.KW), int64(g.SH), int64(g.SW), int64(g.PT), int64(g.PL),
		int64(g.DH), int64(g.DW), int64(g.OH), int64(g.OW)}
}

// withOut sets OH, OW for bottom/right padding pb, pr.
func (g convGeom) withOut(pb, pr int) convGeom {
	g.OH = (g.H+g.PT+pb-g.DH*(g.KH-1)-1)/g.SH + 1
	g.OW = (g.W+g.PL+pr-g.DW*(g.KW-1)-1)/g.SW + 1
	return g
}

// refConv: Y = act(conv(X, W) + bias + res).
func refConv(g convGeom, x, w, bias, res []float32, act int, fa, fb float64) []float32 {
	Cg, Mg := g.C/g.G, g.Cout/g.G
	y := make([]float32, g.N*g.Cout*g.OH*g.OW)
	for n := 0; n < g.N; n++ {
		for oc := 0; oc < g.Cout; oc++ {
			gi := oc / Mg
			for oh := 0; oh < g.OH; oh++ {
				for ow := 0; ow < g.OW; ow++ {
					s := 0.0
					for c := 0; c < Cg; c++ {
						for kh := 0; kh < g.KH; kh++ {
							ih := oh*g.SH - g.PT + kh*g.DH
							if ih < 0 || ih >= g.H {
								continue
							}
							for kw := 0; kw < g.KW; kw++ {
								iw := ow*g.SW - g.PL + kw*g.DW
								if iw < 0 || iw >= g.W {
									continue
								}
								xv := x[((n*g.C+gi*Cg+c)*g.H+ih)*g.W+iw]
								wv := w[((oc*Cg+c)*g.KH+kh)*g.KW+kw]
								s += float64(xv) * float64(wv)
							}
						}
					}
					o := ((n*g.Cout+oc)*g.OH+oh)*g.OW + ow
					if bias != nil {
						s += float64(bias[oc])
					}
					if res != nil {
						s += float64(res[o])
					}
					y[o] = float32(refAct(s, act, fa, fb))
				}
			}
		}
	}
	return y
}

// refIm2col: col[n][g][c*KH*KW + kh*KW + kw][oh*OW + ow].
func refIm2col(g convGeom, x []float32) []float32 {
	Cg := g.C / g.G
	kd, ohw := Cg*g.KH*g.KW, g.OH*g.OW
	col := make([]float32, g.N*g.G*kd*ohw)
	for n := 0; n < g.N; n++ {
		for gi := 0; gi < g.G; gi++ {
			for c := 0; c < Cg; c++ {
				for kh := 0; kh < g.KH; kh++ {
					for kw := 0; kw < g.KW; kw++ {
						k := (c*g.KH+kh)*g.KW + kw
						for oh := 0; oh < g.OH; oh++ {
							for ow := 0; ow < g.OW; ow++ {
								ih, iw := oh*g.SH-g.PT+kh*g.DH, ow*g.SW-g.PL+kw*g.DW
								v := float32(0)
								if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
									v = x[((n*g.C+gi*Cg+c)*g.H+ih)*g.W+iw]
								}
								col[((n*g.G+gi)*kd+k)*ohw+oh*g.OW+ow] = v
							}
						}
					}
				}
			}
		}
	}
	return col
}

// refCol2im is the scatter form of ConvTranspose's col2im: every column
// entry (n, g, c, kh, kw, ih, iw) adds into output pixel
// (ih*SH - PT + kh*DH, iw*SW - PL + kw*DW). Here H, W are the input
// (col) spatial sizes and OH, OW the output's.
func refCol2im(g convGeom, col, bias []float32, act int) []float32 {
	Mg, hw := g.Cout/g.G, g.H*g.W
	y := make([]float64, g.N*g.Cout*g.OH*g.OW)
	for n := 0; n < g.N; n++ {
		for gi := 0; gi < g.G; gi++ {
			for c := 0; c < Mg; c++ {
				oc := gi*Mg + c
				for kh := 0; kh < g.KH; kh++ {
					for kw := 0; kw < g.KW; kw++ {
						for ih := 0; ih < g.H; ih++ {
							for iw := 0; iw < g.W; iw++ {
								oh, ow := ih*g.SH-g.PT+kh*g.DH, iw*g.SW-g.PL+kw*g.DW
								if oh < 0 || oh >= g.OH || ow < 0 || ow >= g.OW {
									continue
								}
								v := col[(((n*g.G+gi)*Mg+c)*g.KH*g.KW+kh*g.KW+kw)*hw+ih*g.W+iw]
								y[((n*g.Cout+oc)*g.OH+oh)*g.OW+ow] += float64(v)
							}
						}
					}
				}
			}
		}
	}
	out := make([]float32, len(y))
	for i, v := range y {
		if bias != nil {
			v += float64(bias[(i/(g.OH*g.OW))%g.Cout])
		}
		out[i] = float32(refAct(v, act, 0, 0))
	}
	return out
}

// gemmCase is a batched GEMM: batch dims bd, op(A) M x K, op(B) K x N.
type gemmCase struct {
	M, N, K      int
	ta, tb       bool
	bd           [3]int
	alpha        float32
	biasMode     int // 0 none, 1 per row, 2 per column
	res          bool
	act          int
	bShared      bool // B has batch stride 0 (shared weights)
	biasBroadcst bool // bias batch strides 0
	noRef        bool // gemmArgs skips the CPU reference (benchmarks: 2048³ takes seconds)
}

func (c gemmCase) nb() int { return c.bd[0] * c.bd[1] * c.bd[2] }

// refGemm computes every batch entry; A and B are packed per batch entry
// (B once when shared), C/res are [nb][M][N].
func refGemm(c gemmCase, A, B, bias, res []float32) []float32 {
	out := make([]float32, c.nb()*c.M*c.N)
	for b := 0; b < c.nb(); b++ {
		a := A[b*c.M*c.K:]
		bb := B
		if !c.bShared {
			bb = B[b*c.K*c.N:]
		}
		for m := 0; m < c.M; m++ {
			for n := 0; n < c.N; n++ {
				s := 0.0
				for k := 0; k < c.K; k++ {
					av := a[m*c.K+k]
					if c.ta {
						av = a[k*c.M+m]
					}
					bv := bb[k*c.N+n]
					if c.tb {
						bv = bb[n*c.K+k]
					}
					s += float64(av) * float64(bv)
				}
				s *= float64(c.alpha)
				boff := 0
				if !c.biasBroadcst {
					if c.biasMode == 1 {
						boff = b * c.M
					} else {
						boff = b * c.N
					}
				}
				switch c.biasMode {
				case 1:
					s += float64(bias[boff+m])
				case 2:
					s += float64(bias[boff+n])
				}
				o := (b*c.M+m)*c.N + n
				if c.res {
					s += float64(res[o])
				}
				out[o] = float32(refAct(s, c.act, 0, 6))
			}
		}
	}
	return out
}

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// randInts is n random integers in [lo, hi] stored as float32 values, as
// the engine stores integer tensors.
func randInts(r *rand.Rand, n, lo, hi int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(lo + r.IntN(hi-lo+1))
	}
	return v
}

// int32Floats stores int32 values as float32 bits (QGEMM's bias).
func int32Floats(v []int32) []float32 {
	f := make([]float32, len(v))
	for i, x := range v {
		f[i] = math.Float32frombits(uint32(x))
	}
	return f
}

// QGEMM on every executor against an exact integer reference: a plain
// product of float-stored operands with a zero point per row of A, one
// for B, a bias per row and the requantising epilogue; and a grouped,
// strided, dilated, padded convolution whose B is built from the input
// (the im2col mode), with one zero point for the input (the implicit-GEMM
// loader), a padding value other than it, and a zero point per column
// (the generic loader): every value must be the reference's, bit for bit.
func TestKernelQGemm(t *testing.T) {
	forEach(t, func(t *testing.T, ex executor) {
		r := rand.New(rand.NewPCG(41, 42))
		t.Run("plain", func(t *testing.T) {
			const nb, M, N, K, Kp = 2, 37, 70, 45, 48
			A := randInts(r, nb*M*K, 0, 255)
			B := randInts(r, nb*K*N, -128, 127)
			za := randInts(r, M, 100, 140)
			zb := []float32{-3}
			bias := make([]int32, M)
			mult := make([]float32, M)
			for i := range bias {
				bias[i] = int32(r.IntN(20001) - 10000)
				mult[i] = float32(0.0001 + 0.0005*r.Float64())
			}
			var a Args
			a.In[0], a.In[1], a.In[2], a.In[3] = upload(t, ex, A), upload(t, ex, B), upload(t, ex, za), upload(t, ex, zb)
			a.In[4], a.In[5] = upload(t, ex, mult), upload(t, ex, int32Floats(bias))
			a.Out = outBuf(t, ex, nb*M*N)
			p := map[int]int64{0: M, 1: N, 2: K, 3: K, 4: N, 5: N, 6: nb, 7: 1, 8: M * K, 10: K * N, 12: M * N,
				17: 1, 18: 1, 20: 2, 21: 1, 22: 1, 23: 0, 24: 255, 28: Kp}
			for i, v := range p {
				a.P[i] = v
			}
			a.F[0] = 7 // the output's zero point
			runOp(t, ex, OpQGemm, &a)
			want := make([]float32, nb*M*N)
			for b := 0; b < nb; b++ {
				for m := 0; m < M; m++ {
					for n := 0; n < N; n++ {
						acc := int32(0)
						for k := 0; k < K; k++ {
							acc += int32(A[b*M*K+m*K+k]-za[m]) * int32(B[b*K*N+k*N+n]-zb[0])
						}
						f := float32(acc + bias[m])
						f = float32(math.RoundToEven(float64(f*mult[m]*1))) + a.F[0]
						want[b*M*N+m*N+n] = float32(math.Min(math.Max(float64(f), 0), 255))
					}
				}
			}
			closeTo(t, "qgemm plain", download(t, ex, a.Out, len(want)), want, 0)
		})
		g := convGeom{N: 2, C: 6, H: 9, W: 7, Cout: 8, G: 2, KH: 3, KW: 3, SH: 2, SW: 1, PT: 1, PL: 2, DH: 1, DW: 2}.withOut(1, 0)
		X := randInts(r, g.N*g.C*g.H*g.W, 0, 255)
		Cg, Mg, OHW := g.C/g.G, g.Cout/g.G, g.OH*g.OW
		K := Cg * g.KH * g.KW
		Wt := randInts(r, g.Cout*K, -127, 127)
		zcol := randInts(r, OHW, 120, 135)
		aux := make([]byte, 8*16)
		for i, v := range g.params() {
			binary.LittleEndian.PutUint64(aux[8*i:], uint64(v))
		}
		for _, c := range []struct {
			name   string
			perCol bool
			zb     float32
			pad    float32
		}{
			{"conv", false, 128, 128},
			{"conv-pad-not-zero-point", false, 128, 131},
			{"conv-zero-point-per-column", true, 0, 128},
		} {
			t.Run(c.name, func(t *testing.T) {
				var a Args
				a.In[0], a.In[1] = upload(t, ex, Wt), upload(t, ex, X)
				if c.perCol {
					a.In[3] = upload(t, ex, zcol)
				} else {
					a.In[3] = upload(t, ex, []float32{c.zb})
				}
				a.Aux = ex.Alloc(t, len(aux))
				ex.Write(t, a.Aux, aux)
				a.Out = outBuf(t, ex, g.N*g.Cout*OHW)
				p := map[int]int64{0: int64(Mg), 1: int64(OHW), 2: int64(K), 3: int64(K), 4: int64(OHW), 5: int64(OHW),
					6: int64(g.N), 7: int64(g.G), 9: int64(Mg * K), 12: int64(g.Cout * OHW), 13: int64(Mg * OHW),
					16: 1, 27: 1, 28: int64((K + 3) / 4 * 4)}
				if c.perCol {
					p[19] = 1
				}
				for i, v := range p {
					a.P[i] = v
				}
				a.F[1] = c.pad
				runOp(t, ex, OpQGemm, &a)
				want := make([]float32, g.N*g.Cout*OHW)
				for n := 0; n < g.N; n++ {
					for gi := 0; gi < g.G; gi++ {
						for m := 0; m < Mg; m++ {
							for pos := 0; pos < OHW; pos++ {
								oh, ow := pos/g.OW, pos%g.OW
								zb := c.zb
								if c.perCol {
									zb = zcol[pos]
								}
								acc := int32(0)
								for k := 0; k < K; k++ {
									ci, kh, kw := k/(g.KH*g.KW), k/g.KW%g.KH, k%g.KW
									ih, iw := oh*g.SH-g.PT+kh*g.DH, ow*g.SW-g.PL+kw*g.DW
									xv := c.pad
									if ih >= 0 && ih < g.H && iw >= 0 && iw < g.W {
										xv = X[((n*g.C+gi*Cg+ci)*g.H+ih)*g.W+iw]
									}
									acc += int32(Wt[(gi*Mg+m)*K+k]) * int32(xv-zb)
								}
								want[(n*g.Cout+gi*Mg+m)*OHW+pos] = float32(acc)
							}
						}
					}
				}
				closeTo(t, fmt.Sprintf("qgemm %s %+v", c.name, g), download(t, ex, a.Out, len(want)), want, 0)
			})
		}
	})
}

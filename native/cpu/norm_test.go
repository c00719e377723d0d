package cpu

import (
	"math"
	"testing"
)

// laneSum is skmath.h's sk_sum: element i in running sum i % 16, then the
// sums added pairwise (j + 8, + 4, + 2, + 1), every step rounded to
// float32.
func laneSum(x []float32, term func(float32) float32) float32 {
	var a [16]float32
	for i, v := range x {
		a[i%16] = float32(a[i%16] + term(v))
	}
	for w := 8; w > 0; w /= 2 {
		for j := 0; j < w; j++ {
			a[j] = float32(a[j] + a[j+w])
		}
	}
	return a[0]
}

// skExpf is skmath.h's sk_expf, each operation rounded to float32.
func skExpf(x float32) float32 {
	x = max(x, -87.3)
	x = min(x, 88.7)
	t := float32(x * 1.44269504088896341)
	fi := float32(float32(t+12582912.0) - 12582912.0)
	r := float32(x - float32(fi*0.693359375))
	r = float32(r - float32(fi*-2.12194440e-4))
	p := float32(1.3981999507e-3)
	p = float32(float32(p*r) + 8.3334519073e-3)
	p = float32(float32(p*r) + 4.1665795894e-2)
	p = float32(float32(p*r) + 1.6666665459e-1)
	p = float32(float32(p*r) + 5.0000001201e-1)
	p = float32(float32(float32(float32(p*r)*r)+r) + 1)
	return float32(p * math.Float32frombits(uint32(int32(fi)+127)<<23))
}

// TestNormLanes checks that softmax over a contiguous row and layer
// normalization sum in the documented order (16 lanes, then pairwise;
// skmath.h), bit for bit, on rows shorter than, equal to and longer than
// the lanes, with and without a tail: the order is part of the engine's
// determinism (every instruction set computes it alike), so a kernel that
// sums in any other order fails here.
func TestNormLanes(t *testing.T) {
	for _, n := range []int{1, 5, 16, 17, 37, 128, 770} {
		const rows = 3
		x := newFloats(t, rows*n, 0)
		rnd := uint32(n)
		fillLCG(x, &rnd)
		for i := range x.s() {
			x.s()[i] *= 9
		}
		sc, bi := newFloats(t, n, 0), newFloats(t, n, 0)
		fillLCG(sc, &rnd)
		fillLCG(bi, &rnd)
		// (log-softmax sums in the same lanes; its logf is libm's, so it is
		// left out of a bit-for-bit comparison)
		for _, op := range []string{"softmax", "layernorm"} {
			out := newFloats(t, rows*n, 0)
			d := Desc{Out: out.p}
			d.In[0] = x.p
			switch op {
			case "layernorm":
				d.Op = OpLayerNorm
				d.In[1], d.In[2] = sc.p, bi.p
				d.P[0], d.P[1] = rows, int64(n)
				d.F[0] = 1e-5
			default:
				d.Op = OpSoftmax
				d.P[0], d.P[1], d.P[2] = rows, int64(n), 1
			}
			ks := newKernels(t, 1)
			if err := ks.Set(0, &d, 2); err != nil {
				t.Fatalf("%s %d: %v", op, n, err)
			}
			runBlocks(ks, 0)
			for r := 0; r < rows; r++ {
				row := x.s()[r*n : (r+1)*n]
				got := out.s()[r*n : (r+1)*n]
				want := make([]float32, n)
				switch op {
				case "layernorm":
					mean := float32(laneSum(row, func(v float32) float32 { return v }) / float32(n))
					v := laneSum(row, func(v float32) float32 { d := float32(v - mean); return float32(d * d) })
					rstd := float32(1 / float32(math.Sqrt(float64(float32(float32(v/float32(n))+1e-5)))))
					for i, xv := range row {
						want[i] = float32(float32(float32(float32(xv-mean)*rstd)*sc.s()[i]) + bi.s()[i])
					}
				default:
					m := row[0]
					for _, v := range row {
						m = max(m, v)
					}
					e := make([]float32, n)
					for i, xv := range row {
						e[i] = skExpf(float32(xv - m))
					}
					rs := float32(1 / laneSum(e, func(v float32) float32 { return v }))
					for i := range e {
						want[i] = float32(e[i] * rs)
					}
				}
				for i := range want {
					if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s n=%d row %d: [%d] = %v, want %v", op, n, r, i, got[i], want[i])
					}
				}
			}
		}
	}
}

package cpu

import (
	"math"
	"testing"
)

// TestIm2col runs the IM2COL kernel against the definition, padding with
// the kernel's pad value, and checks that nothing past col's end is
// written (a guard of NaNs after it), on 1 and 3 units: at stride 1 and 2
// on small planes (the copy from phase planes of the padded plane, whose
// 16-float copies spill past each row segment) and at stride 2 on rows
// long enough for whole vectors (their loads must stay inside the row).
func TestIm2col(t *testing.T) {
	for _, c := range []struct{ n, ch, h, w, k, pad, s, oh, ow int64 }{
		{1, 64, 7, 7, 3, 1, 1, 7, 7}, {2, 5, 6, 6, 3, 1, 1, 6, 6}, {1, 3, 14, 14, 3, 1, 1, 14, 14},
		{1, 4, 5, 4, 3, 0, 1, 3, 2}, {1, 2, 9, 20, 3, 2, 1, 11, 22}, {1, 3, 8, 33, 3, 1, 1, 8, 33},
		{1, 3, 9, 80, 3, 1, 2, 5, 40}, {1, 2, 7, 67, 7, 3, 2, 4, 34}, {2, 2, 6, 64, 3, 0, 2, 2, 31},
		// stride 2 into small planes (ResNet's stride-2 3x3 layers at
		// 28x28 and 14x14), odd sizes, a 1x1 window, a plane too large
		{1, 16, 28, 28, 3, 1, 2, 14, 14}, {2, 8, 14, 14, 3, 1, 2, 7, 7}, {1, 5, 13, 11, 3, 1, 2, 7, 6},
		{1, 4, 14, 14, 1, 0, 2, 7, 7}, {1, 3, 15, 15, 5, 2, 2, 8, 8}, {1, 2, 60, 60, 3, 1, 2, 30, 30},
		// stride 2 on planes too large for the phase planes (the strided copy:
		// a 7x7 first layer, an odd width, a 2x2 window without padding)
		{1, 3, 40, 40, 7, 3, 2, 20, 20}, {1, 2, 71, 69, 3, 1, 2, 36, 35}, {1, 3, 50, 50, 2, 0, 2, 25, 25},
	} {
		for _, units := range []int{1, 3} {
			x := newFloats(t, int(c.n*c.ch*c.h*c.w), 0)
			rnd := uint32(c.h*7 + c.w)
			fillLCG(x, &rnd)
			kd, ohw := c.ch*c.k*c.k, c.oh*c.ow
			n := int(c.n * kd * ohw)
			const guard = 64
			out := newFloats(t, n+guard, float32(math.NaN()))
			d := Desc{Op: OpIm2col, Out: out.p}
			d.In[0] = x.p
			copy(d.P[:16], []int64{c.n, c.ch, c.h, c.w, 8, 1, c.k, c.k, c.s, c.s, c.pad, c.pad, 1, 1, c.oh, c.ow})
			d.F[0] = -0.25 // the pad value
			ks := newKernels(t, 1)
			if err := ks.Set(0, &d, units); err != nil {
				t.Fatal(err)
			}
			runBlocks(ks, 0)
			got, xs := out.s(), x.s()
			for b := int64(0); b < c.n; b++ {
				for r := int64(0); r < kd; r++ {
					ci, kh, kw := r/(c.k*c.k), r/c.k%c.k, r%c.k
					for p := int64(0); p < ohw; p++ {
						ih, iw := p/c.ow*c.s-c.pad+kh, p%c.ow*c.s-c.pad+kw
						want := float32(-0.25)
						if ih >= 0 && ih < c.h && iw >= 0 && iw < c.w {
							want = xs[((b*c.ch+ci)*c.h+ih)*c.w+iw]
						}
						if g := got[(b*kd+r)*ohw+p]; g != want {
							t.Fatalf("%+v, %d units: col[%d][%d][%d] = %v, want %v", c, units, b, r, p, g, want)
						}
					}
				}
			}
			for i := n; i < n+guard; i++ {
				if !math.IsNaN(float64(got[i])) {
					t.Fatalf("%+v, %d units: %v written %d floats past col's end", c, units, got[i], i-n+1)
				}
			}
		}
	}
}

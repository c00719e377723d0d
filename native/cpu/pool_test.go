package cpu

import (
	"fmt"
	"math"
	"testing"
	"unsafe"
)

// poolCase is a max pooling of planes of h x w by a k x k window.
type poolCase struct {
	planes, h, w, k, s, pad int64
}

func (pc poolCase) out() (int64, int64) {
	return (pc.h+2*pc.pad-pc.k)/pc.s + 1, (pc.w+2*pc.pad-pc.k)/pc.s + 1
}

// kernel sets up the pooling of x into a fresh output (NaNs) on units.
func (pc poolCase) kernel(t testing.TB, x *cfloats, units int) (*Kernels, *cfloats) {
	t.Helper()
	oh, ow := pc.out()
	y := newFloats(t, int(pc.planes*oh*ow), float32(math.NaN()))
	d := Desc{Op: OpPool, Out: y.p}
	d.In[0] = x.p
	copy(d.P[:17], []int64{pc.planes, pc.h, pc.w, oh, ow, pc.k, pc.k, pc.s, pc.s, pc.pad, pc.pad, 1, 1, 0, 0, pc.pad, pc.pad})
	ks := newKernels(t, 1)
	if err := ks.Set(0, &d, units); err != nil {
		t.Fatalf("%+v: %v", pc, err)
	}
	return ks, y
}

func (pc poolCase) run(t testing.TB, x *cfloats, units int) []float32 {
	t.Helper()
	ks, y := pc.kernel(t, x, units)
	runBlocks(ks, 0)
	return append([]float32(nil), y.s()...)
}

// TestMaxPoolSameBits: max pooling keeps, in every window, the first
// input (taps in row-major order) that no later one exceeds: ties of -0
// and +0 keep the earlier, NaNs are skipped. Its bits do not depend on
// the instruction set nor on the units. Inputs hold many ties of signed
// zeros and some NaNs.
func TestMaxPoolSameBits(t *testing.T) {
	defer SetGemmISA("")
	seen := map[poolCase]bool{} // a case's second time: negative inputs
	for _, pc := range []poolCase{
		{2, 112, 112, 3, 2, 1}, // ResNet's
		{1, 9, 67, 3, 2, 1}, {1, 2, 1, 3, 2, 1}, {2, 3, 5, 3, 2, 1},
		{3, 9, 37, 3, 2, 0}, {2, 8, 66, 2, 2, 0}, {2, 7, 70, 3, 2, 1}, {1, 5, 33, 3, 1, 1}, {2, 6, 35, 5, 2, 2},
		// rows of 13 vectors (four at a time, the last group partial),
		// and past the widest the vector path takes
		{1, 4, 200, 3, 1, 1}, {1, 4, 420, 3, 2, 1}, {1, 3, 300, 3, 1, 1},
		// windows of padding only at both ends of a row (output 0)
		{2, 6, 40, 2, 1, 2}, {1, 5, 41, 3, 2, 2},
		// negative inputs only (below): a window cut by the row's end
		// must not see a 0 there
		{1, 9, 67, 3, 2, 1}, {1, 5, 33, 3, 1, 1}, {1, 4, 420, 3, 2, 1},
	} {
		x := newFloats(t, int(pc.planes*pc.h*pc.w), 0)
		xs := x.s()
		rnd := uint32(pc.h*31 + pc.w)
		negative := seen[pc]
		seen[pc] = true
		for i := range xs {
			rnd = rnd*1664525 + 1013904223
			if negative {
				xs[i] = -float32(rnd>>24+1) / 8
				continue
			}
			switch r := rnd >> 24; {
			case r < 60:
				xs[i] = float32(math.Copysign(0, -1))
			case r < 120:
				xs[i] = 0
			case r < 125:
				xs[i] = float32(math.NaN())
			default:
				xs[i] = float32(int32(r)-190) / 8
			}
		}
		oh, ow := pc.out()
		want := make([]float32, pc.planes*oh*ow)
		for c := int64(0); c < pc.planes; c++ {
			for i := int64(0); i < oh; i++ {
				for j := int64(0); j < ow; j++ {
					m, any := float32(-math.MaxFloat32), false
					for a := int64(0); a < pc.k; a++ {
						for b := int64(0); b < pc.k; b++ {
							r, q := i*pc.s-pc.pad+a, j*pc.s-pc.pad+b
							if r < 0 || r >= pc.h || q < 0 || q >= pc.w {
								continue
							}
							any = true
							if v := xs[(c*pc.h+r)*pc.w+q]; v > m {
								m = v
							}
						}
					}
					if !any {
						m = 0
					}
					want[(c*oh+i)*ow+j] = m
				}
			}
		}
		for _, isa := range GemmISAs() {
			if err := SetGemmISA(isa); err != nil {
				t.Fatal(err)
			}
			for _, units := range []int{1, 3} {
				got := pc.run(t, x, units)
				for i, v := range want {
					if math.Float32bits(got[i]) != math.Float32bits(v) {
						t.Fatalf("%+v, %s, %d units: y[%d] = %v (bits %08x), want %v (%08x)", pc, isa, units, i,
							got[i], math.Float32bits(got[i]), v, math.Float32bits(v))
					}
				}
			}
		}
	}
}

// BenchmarkMaxPool runs ResNet's max pooling (64 planes of 112 x 112, 3 x 3,
// stride 2, padding 1) on one thread:
// go test -run '^$' -bench MaxPool ./native/cpu/
func BenchmarkMaxPool(b *testing.B) {
	pc := poolCase{64, 112, 112, 3, 2, 1}
	x := newFloats(b, int(pc.planes*pc.h*pc.w), 0)
	for i := range x.s() {
		x.s()[i] = float32(i%97) - 40
	}
	ks, _ := pc.kernel(b, x, 1)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runBlocks(ks, 0)
	}
}

// TestGlobalAverageSameBits: a global average sums a plane in 64 running
// sums (value i into sum i % 64), adds them by a fixed tree and divides
// by the plane's size; its bits do not depend on the instruction set (the
// AVX-512 path keeps the sums in four vectors) nor on the units. Planes
// shorter than a vector, between vectors, and over 64 values; inputs of
// wide magnitude, where any other order rounds differently.
func TestGlobalAverageSameBits(t *testing.T) {
	defer SetGemmISA("")
	for _, hw := range []int64{1, 7, 16, 49, 63, 64, 65, 100, 196, 200} {
		const planes = 19
		x := newFloats(t, int(planes*hw), 0)
		xs := x.s()
		rnd := uint32(hw)
		for i := range xs {
			rnd = rnd*1664525 + 1013904223
			switch r := rnd >> 24; {
			case r < 20:
				xs[i] = float32(math.Copysign(0, -1))
			default:
				xs[i] = float32(int32(rnd>>8)-1<<23) * float32(math.Pow(2, float64(int(r%24)-12)))
			}
		}
		want := make([]float32, planes)
		for c := range want {
			var acc [64]float32
			for i := int64(0); i < hw; i++ {
				acc[i%64] += xs[int64(c)*hw+i]
			}
			for w := 32; w >= 1; w /= 2 {
				for j := 0; j < w; j++ {
					acc[j] += acc[j+w]
				}
			}
			want[c] = acc[0] / float32(hw)
		}
		for _, isa := range GemmISAs() {
			if err := SetGemmISA(isa); err != nil {
				t.Fatal(err)
			}
			for _, units := range []int{1, 3} {
				y := newFloats(t, planes, float32(math.NaN()))
				d := Desc{Op: OpGPool, Out: y.p}
				d.In[0] = x.p
				d.P[0], d.P[1], d.P[2] = planes, hw, 1
				ks := newKernels(t, 1)
				if err := ks.Set(0, &d, units); err != nil {
					t.Fatal(err)
				}
				runBlocks(ks, 0)
				for c, v := range want {
					if got := y.s()[c]; math.Float32bits(got) != math.Float32bits(v) {
						t.Fatalf("%d values, %s, %d units: plane %d = %v, want %v", hw, isa, units, c, got, v)
					}
				}
			}
		}
	}
}

// TestMaxPoolBytes: max pooling with its input and output stored as
// bytes (uint8 and int8) gives, on every instruction set and any number
// of units, the values of the generic path, which stages each plane as
// float32: the byte path (pool_max_bytes_512) where the CPU has it.
// Windows of padding only give 0 (for int8 not the least value), at both
// ends of a row and on rows of padding only.
func TestMaxPoolBytes(t *testing.T) {
	for _, pc := range []poolCase{
		{2, 112, 112, 3, 2, 1}, // ResNet's
		{3, 9, 37, 3, 2, 0}, {2, 8, 66, 2, 2, 0}, {2, 7, 70, 3, 2, 1}, {1, 5, 33, 3, 1, 1},
		{2, 6, 35, 5, 2, 2}, {1, 4, 200, 3, 1, 1}, {1, 4, 300, 3, 2, 1},
		{2, 6, 40, 2, 1, 2}, {1, 5, 41, 3, 2, 2}, {1, 3, 5, 4, 1, 3},
	} {
		for _, code := range []int64{1, 2} { // uint8, int8
			n := int(pc.planes * pc.h * pc.w)
			x := newFloats(t, n/4+1, 0)
			xb := unsafe.Slice((*byte)(x.p), n)
			rnd := uint32(pc.h*31 + pc.w + int64(code))
			for i := range xb {
				rnd = rnd*1664525 + 1013904223
				xb[i] = byte(rnd >> 24)
			}
			oh, ow := pc.out()
			nout := int(pc.planes * oh * ow)
			run := func(units int) []byte {
				y := newFloats(t, nout/4+1, 0)
				yb := unsafe.Slice((*byte)(y.p), nout)
				for i := range yb {
					yb[i] = 0x5a
				}
				d := Desc{Op: OpPool, Out: y.p}
				d.In[0] = x.p
				copy(d.P[:17], []int64{pc.planes, pc.h, pc.w, oh, ow, pc.k, pc.k, pc.s, pc.s, pc.pad, pc.pad, 1, 1, 0, 0, pc.pad, pc.pad})
				d.P[PStore] = code | code<<2
				ks := newKernels(t, 1)
				if err := ks.Set(0, &d, units); err != nil {
					t.Fatalf("%+v: %v", pc, err)
				}
				runBlocks(ks, 0)
				return append([]byte(nil), yb...)
			}
			sameBytesEverywhere(t, fmt.Sprintf("%+v, code %d", pc, code), []int{QGemmBest}, run)
		}
	}
}

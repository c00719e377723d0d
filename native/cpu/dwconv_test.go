package cpu

import (
	"fmt"
	"math"
	"testing"
	"unsafe"
)

// dwCase is one depthwise convolution: C channels (times mult outputs
// each) over an h x w image, 3x3 unless k says otherwise.
type dwCase struct {
	n, c, mult, h, w, k, stride, padT, padL, padB, padR int64
	bias, res                                           bool
	act                                                 int64 // 0 none, 1 relu, 2 clip [0, 6]
	quant, requant                                      bool  // integer input (zero point 3), requantised
}

func (dc dwCase) String() string {
	return fmt.Sprintf("n%d c%d x%d %dx%d k%d s%d pad %d,%d,%d,%d bias %v res %v act %d quant %v/%v",
		dc.n, dc.c, dc.mult, dc.h, dc.w, dc.k, dc.stride, dc.padT, dc.padL, dc.padB, dc.padR,
		dc.bias, dc.res, dc.act, dc.quant, dc.requant)
}

func (dc dwCase) out() (int64, int64) {
	return (dc.h+dc.padT+dc.padB-dc.k)/dc.stride + 1, (dc.w+dc.padL+dc.padR-dc.k)/dc.stride + 1
}

// dwOperands are a case's inputs, seeded: integers in [0, 255] for a
// quantised input, values in [-0.5, 0.5) otherwise; weights integers in
// [-128, 127] less their zero point when quantised.
type dwOperands struct {
	x, w, bias, res, mult *cfloats
}

func dwMake(t testing.TB, dc dwCase) dwOperands {
	t.Helper()
	oh, ow := dc.out()
	cout := dc.c * dc.mult
	rnd := uint32(dc.h*131 + dc.w*7 + dc.c)
	next := func() float32 {
		rnd = rnd*1664525 + 1013904223
		return float32(rnd>>8) / float32(1<<24)
	}
	o := dwOperands{
		x: newFloats(t, int(dc.n*dc.c*dc.h*dc.w), 0), w: newFloats(t, int(cout*dc.k*dc.k), 0),
		bias: newFloats(t, int(cout), 0), res: newFloats(t, int(dc.n*cout*oh*ow), 0),
		mult: newFloats(t, int(cout), 0),
	}
	for i := range o.x.s() {
		if dc.quant {
			o.x.s()[i] = float32(math.Floor(float64(next()) * 256))
		} else {
			o.x.s()[i] = next() - 0.5
		}
	}
	for i := range o.w.s() {
		if dc.quant {
			o.w.s()[i] = float32(math.Floor(float64(next())*256)) - 128 - 5
		} else {
			o.w.s()[i] = next() - 0.5
		}
	}
	for i := range o.bias.s() {
		if dc.quant {
			o.bias.s()[i] = float32(math.Floor(float64(next())*2000)) - 1000
		} else {
			o.bias.s()[i] = next() - 0.5
		}
		o.mult.s()[i] = 1e-3 * (1 + next())
	}
	for i := range o.res.s() {
		o.res.s()[i] = next() - 0.5
	}
	return o
}

// dwDesc is the DWCONV kernel of a case writing y.
func dwDesc(dc dwCase, o dwOperands, y *cfloats) Desc {
	oh, ow := dc.out()
	d := Desc{Op: OpDWConv, Out: y.p}
	d.In[0], d.In[1] = o.x.p, o.w.p
	if dc.bias {
		d.In[2] = o.bias.p
	}
	if dc.res {
		d.In[3] = o.res.p
	}
	copy(d.P[:16], []int64{dc.n, dc.c, dc.h, dc.w, dc.c * dc.mult, dc.c, dc.k, dc.k, dc.stride, dc.stride,
		dc.padT, dc.padL, 1, 1, oh, ow})
	if dc.act == 1 {
		d.P[PAct] = 1
	} else if dc.act == 2 {
		d.P[PAct], d.F[FActA], d.F[FActB] = 2, 0, 6
	}
	if dc.quant {
		d.P[16], d.F[0] = 1, 3
		if dc.requant {
			d.P[17], d.P[18], d.P[19], d.F[1] = 1, 0, 255, 7
			d.In[4] = o.mult.p
		}
	}
	return d
}

// dwRun runs every block of a case's kernel on units, into y.
func dwRun(t testing.TB, dc dwCase, o dwOperands, y *cfloats, units int) {
	t.Helper()
	ks := newKernels(t, 1)
	d := dwDesc(dc, o, y)
	if err := ks.Set(0, &d, units); err != nil {
		t.Fatalf("%v: %v", dc, err)
	}
	runBlocks(ks, 0)
}

// dwRef is the case's result in float64, and each output's sum of
// magnitudes (the bound on its rounding error).
func dwRef(dc dwCase, o dwOperands) ([]float64, []float64) {
	oh, ow := dc.out()
	cout := dc.c * dc.mult
	ref, mag := make([]float64, dc.n*cout*oh*ow), make([]float64, dc.n*cout*oh*ow)
	x, w := o.x.s(), o.w.s()
	zx := 0.0
	if dc.quant {
		zx = 3
	}
	for n := int64(0); n < dc.n; n++ {
		for oc := int64(0); oc < cout; oc++ {
			ic := oc / dc.mult
			for i := int64(0); i < oh; i++ {
				for j := int64(0); j < ow; j++ {
					s, m := 0.0, 0.0
					if dc.bias {
						s, m = float64(o.bias.s()[oc]), math.Abs(float64(o.bias.s()[oc]))
					}
					for kh := int64(0); kh < dc.k; kh++ {
						for kw := int64(0); kw < dc.k; kw++ {
							ih, iw := i*dc.stride-dc.padT+kh, j*dc.stride-dc.padL+kw
							if ih < 0 || ih >= dc.h || iw < 0 || iw >= dc.w {
								continue
							}
							v := float64(w[oc*dc.k*dc.k+kh*dc.k+kw]) * (float64(x[((n*dc.c+ic)*dc.h+ih)*dc.w+iw]) - zx)
							s += v
							m += math.Abs(v)
						}
					}
					at := ((n*cout+oc)*oh+i)*ow + j
					if dc.res {
						s += float64(o.res.s()[at])
						m += math.Abs(float64(o.res.s()[at]))
					}
					switch {
					case dc.requant:
						s = math.Max(0, math.Min(255, math.RoundToEven(float64(float32(s)*o.mult.s()[oc]))+7))
						m = 0
					case dc.act == 1:
						s = math.Max(s, 0)
					case dc.act == 2:
						s = math.Max(0, math.Min(6, s))
					}
					ref[at], mag[at] = s, m
				}
			}
		}
	}
	return ref, mag
}

var dwCases = []dwCase{
	// MobileNet's shapes: 3x3, pad 1, stride 1 and 2, planes from
	// 112 to 7 columns wide
	{n: 2, c: 4, mult: 1, h: 112, w: 112, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, act: 2},
	{n: 1, c: 5, mult: 1, h: 112, w: 112, k: 3, stride: 2, padT: 0, padL: 0, padB: 1, padR: 1, bias: true, act: 2},
	{n: 1, c: 6, mult: 1, h: 28, w: 28, k: 3, stride: 2, padT: 1, padL: 1, padB: 1, padR: 1, bias: true},
	{n: 3, c: 7, mult: 1, h: 14, w: 14, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, act: 1},
	{n: 2, c: 9, mult: 1, h: 7, w: 7, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, res: true},
	// odd sizes, asymmetric and no padding, wider than 64 vectors,
	// channel multipliers
	{n: 1, c: 3, mult: 2, h: 9, w: 33, k: 3, stride: 2, padT: 2, padL: 0, padB: 0, padR: 2, bias: true, res: true},
	{n: 1, c: 2, mult: 3, h: 5, w: 17, k: 3, stride: 1, padT: 0, padL: 2, padB: 2, padR: 0},
	{n: 1, c: 2, mult: 1, h: 3, w: 1100, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true},
	{n: 1, c: 2, mult: 1, h: 4, w: 2, k: 3, stride: 2, padT: 1, padL: 1, padB: 1, padR: 1},
	{n: 1, c: 2, mult: 1, h: 3, w: 3, k: 3, stride: 1, padT: 0, padL: 0, padB: 0, padR: 0, bias: true},
	{n: 1, c: 3, mult: 1, h: 40, w: 47, k: 3, stride: 2, padT: 1, padL: 2, padB: 1, padR: 0, bias: true, res: true},
	{n: 1, c: 2, mult: 1, h: 6, w: 35, k: 3, stride: 1, padT: 2, padL: 2, padB: 2, padR: 2, act: 2},
	// a narrow input with wide padding: 43 output columns, past the
	// vector path's two vectors
	{n: 1, c: 2, mult: 1, h: 5, w: 8, k: 3, stride: 2, padT: 1, padL: 40, padB: 1, padR: 40, bias: true},
	// channels 16 a vector (dw3x3_cvec_512, input rows up to 32
	// wide): whole groups and a partial one, residual and activation,
	// stride 2 with asymmetric padding, padding wider than a tap,
	// one row; integers, shifted and requantised
	{n: 2, c: 37, mult: 1, h: 7, w: 7, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, res: true, act: 2},
	{n: 1, c: 20, mult: 1, h: 14, w: 14, k: 3, stride: 2, padT: 0, padL: 1, padB: 1, padR: 0, bias: true, act: 1},
	{n: 1, c: 33, mult: 1, h: 28, w: 28, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true},
	{n: 1, c: 17, mult: 1, h: 5, w: 32, k: 3, stride: 1, padT: 2, padL: 3, padB: 2, padR: 3, res: true},
	{n: 1, c: 16, mult: 1, h: 1, w: 9, k: 3, stride: 2, padT: 1, padL: 0, padB: 1, padR: 2, bias: true},
	{n: 2, c: 20, mult: 1, h: 7, w: 7, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	{n: 1, c: 17, mult: 1, h: 14, w: 13, k: 3, stride: 2, padT: 1, padL: 0, padB: 1, padR: 1, quant: true},
	{n: 1, c: 33, mult: 1, h: 28, w: 28, k: 3, stride: 2, padT: 0, padL: 0, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	{n: 1, c: 18, mult: 1, h: 9, w: 112, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	// the general path (5x5) and integers: shifted input, requantised
	{n: 1, c: 3, mult: 1, h: 13, w: 11, k: 5, stride: 2, padT: 2, padL: 2, padB: 2, padR: 2, bias: true, act: 1},
	{n: 2, c: 8, mult: 1, h: 14, w: 14, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	{n: 1, c: 6, mult: 2, h: 15, w: 29, k: 3, stride: 2, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	{n: 1, c: 4, mult: 1, h: 11, w: 9, k: 3, stride: 1, padT: 1, padL: 0, padB: 1, padR: 2, quant: true},
	{n: 1, c: 4, mult: 1, h: 12, w: 12, k: 5, stride: 1, padT: 2, padL: 2, padB: 2, padR: 2, bias: true, quant: true, requant: true},
	// the general path at stride 1 with the row in registers
	// (dw_plane_512): PaddleOCR's 5x5 planes, asymmetric and no
	// padding, 7x7, the widest row it takes (64 columns) and one past
	// it, a residual and a multiplier
	{n: 2, c: 3, mult: 1, h: 40, w: 40, k: 5, stride: 1, padT: 2, padL: 2, padB: 2, padR: 2, bias: true, act: 2},
	{n: 1, c: 2, mult: 2, h: 9, w: 21, k: 5, stride: 1, padT: 0, padL: 3, padB: 4, padR: 1, res: true},
	{n: 1, c: 2, mult: 1, h: 11, w: 17, k: 7, stride: 1, padT: 3, padL: 3, padB: 3, padR: 3, bias: true},
	{n: 1, c: 2, mult: 1, h: 6, w: 64, k: 5, stride: 1, padT: 2, padL: 2, padB: 2, padR: 2, bias: true, act: 1},
	{n: 1, c: 2, mult: 1, h: 6, w: 65, k: 5, stride: 1, padT: 2, padL: 2, padB: 2, padR: 2, bias: true},
	{n: 1, c: 3, mult: 1, h: 3, w: 4, k: 5, stride: 1, padT: 2, padL: 6, padB: 2, padR: 6, bias: true},
}

// TestDepthwiseMatchesReference: every depthwise case computes its
// float64 reference (within float32 rounding; requantised integers
// exactly), and its bits depend neither on the number of units (the
// blocks' split of the channels) nor on the instruction set (the 3x3
// path runs 16 columns a vector where sgemm uses AVX-512; "generic"
// runs the scalar-ordered loops).
func TestDepthwiseMatchesReference(t *testing.T) {
	defer SetGemmISA("")
	for _, dc := range dwCases {
		if err := SetGemmISA("generic"); err != nil {
			t.Fatal(err)
		}
		o := dwMake(t, dc)
		oh, ow := dc.out()
		nout := int(dc.n * dc.c * dc.mult * oh * ow)
		want := newFloats(t, nout, 0)
		dwRun(t, dc, o, want, 1)
		ref, mag := dwRef(dc, o)
		for i, v := range want.s() {
			if d := math.Abs(float64(v) - ref[i]); d > 1e-6*(mag[i]+1) || (dc.requant && d != 0) {
				t.Fatalf("%v: y[%d] = %v, float64 reference %v", dc, i, v, ref[i])
			}
		}
		for _, isa := range GemmISAs() {
			if err := SetGemmISA(isa); err != nil {
				t.Fatal(err)
			}
			for _, units := range []int{1, 3, 8} {
				got := newFloats(t, nout, float32(math.NaN()))
				dwRun(t, dc, o, got, units)
				for i, v := range want.s() {
					if math.Float32bits(got.s()[i]) != math.Float32bits(v) {
						t.Fatalf("%v, %s, %d units: y[%d] = %v, generic on one unit %v", dc, isa, units, i, got.s()[i], v)
					}
				}
			}
		}
	}
}

// BenchmarkDepthwise runs MobileNetV2's 3x3 depthwise layers at batch 8
// on one thread (every block in turn).
func BenchmarkDepthwise(b *testing.B) {
	layers := []struct {
		c, hw, stride int64
		int8          bool
	}{
		{32, 112, 1, false}, {96, 112, 2, false}, {144, 56, 1, false}, {144, 56, 2, false}, {192, 28, 1, false},
		{192, 28, 2, false}, {384, 14, 1, false}, {576, 14, 2, false}, {960, 7, 1, false},
		// MobileNetV2-int8's: shifted and requantised
		{32, 112, 1, true}, {144, 56, 1, true}, {384, 14, 1, true},
	}
	for _, l := range layers {
		dc := dwCase{n: 8, c: l.c, mult: 1, h: l.hw, w: l.hw, k: 3, stride: l.stride, padT: 1, padL: 1,
			padB: 1, padR: 1, bias: true, act: 2}
		if l.int8 {
			dc.act, dc.quant, dc.requant = 0, true, true
		}
		o := dwMake(b, dc)
		oh, ow := dc.out()
		y := newFloats(b, int(dc.n*dc.c*oh*ow), 0)
		name := fmt.Sprintf("%dx%dx%d_s%d", l.c, l.hw, l.hw, l.stride)
		if l.int8 {
			name += "_int8"
		}
		b.Run(name, func(b *testing.B) {
			ks := newKernels(b, 1)
			d := dwDesc(dc, o, y)
			if err := ks.Set(0, &d, 1); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				runBlocks(ks, 0)
			}
			b.ReportMetric(float64(dc.n*dc.c*oh*ow*9*2)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
		})
	}
}

// BenchmarkFirstConv runs MobileNetV2's first convolution (3 -> 32
// channels, 3x3, stride 2, pad 1, 224x224, bias and Clip) at batch 8 on
// one thread: an im2col of 27 rows a block, then a product with a
// reduction of 27.
func BenchmarkFirstConv(b *testing.B) {
	const n, c, hw, cout, ohw = 8, 3, 224, 32, 112
	x, w, bias := newFloats(b, n*c*hw*hw, 0), newFloats(b, cout*c*9, 0), newFloats(b, cout, 0.1)
	y := newFloats(b, n*cout*ohw*ohw, 0)
	rnd := uint32(7)
	fillLCG(x, &rnd)
	fillLCG(w, &rnd)
	d := Desc{Op: OpConv, Out: y.p}
	d.In[0], d.In[1], d.In[2] = x.p, w.p, bias.p
	copy(d.P[:16], []int64{n, c, hw, hw, cout, 1, 3, 3, 2, 2, 1, 1, 1, 1, ohw, ohw})
	d.P[PAct], d.F[FActA], d.F[FActB] = 2, 0, 6
	ks := newKernels(b, 1)
	if err := ks.Set(0, &d, 1); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		runBlocks(ks, 0)
	}
	b.ReportMetric(2*float64(n*cout*ohw*ohw*c*9)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
}

// TestDepthwiseBytes: a 3x3 depthwise layer whose input is stored as
// bytes (unsigned, zero point 3) gives, on every instruction set and
// integer micro-kernel choice and any number of units, the bits of the
// generic float path on one unit: the integer path (dw3x3_int_512, VNNI)
// where it takes a channel, the channel-vector and plane paths elsewhere.
// The outputs are float32 sums (no requantisation: a sum off by one shows)
// or requantised bytes. The weights reach past [-128, 127] and some
// biases take a channel's sums past 2^24, where float32 sums round: the
// integer path must leave those channels to the float path.
func TestDepthwiseBytes(t *testing.T) {
	cases := []dwCase{
		{n: 2, c: 6, mult: 1, h: 37, w: 71, k: 3, stride: 2, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true},
		{n: 1, c: 5, mult: 1, h: 33, w: 65, k: 3, stride: 2, padT: 0, padL: 0, padB: 1, padR: 1, bias: true, quant: true, requant: true},
		{n: 1, c: 3, mult: 2, h: 20, w: 66, k: 3, stride: 2, padT: 1, padL: 1, padB: 1, padR: 1, quant: true},
		{n: 2, c: 4, mult: 1, h: 6, w: 150, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true},
		{n: 1, c: 4, mult: 1, h: 5, w: 140, k: 3, stride: 1, padT: 2, padL: 0, padB: 0, padR: 2, bias: true, quant: true, requant: true},
		// the last output row's window holds the tensor's last row only
		{n: 1, c: 3, mult: 1, h: 5, w: 70, k: 3, stride: 2, padT: 2, padL: 1, padB: 2, padR: 1, bias: true, quant: true, requant: true},
		// the channel-vector path's planes
		{n: 1, c: 20, mult: 1, h: 14, w: 14, k: 3, stride: 1, padT: 1, padL: 1, padB: 1, padR: 1, bias: true, quant: true},
		{n: 1, c: 17, mult: 1, h: 28, w: 28, k: 3, stride: 2, padT: 0, padL: 0, padB: 1, padR: 1, bias: true, quant: true, requant: true},
	}
	for _, dc := range cases {
		o := dwMake(t, dc)
		if dc.bias && !dc.requant {
			// past 2^24 with the sums, and one at it
			o.bias.s()[0], o.bias.s()[1] = 1<<25+16, -(1<<24)+8
		}
		oh, ow := dc.out()
		nin, nout := int(dc.n*dc.c*dc.h*dc.w), int(dc.n*dc.c*dc.mult*oh*ow)
		xb := newFloats(t, nin/4+1, 0)
		bs := unsafe.Slice((*byte)(xb.p), nin)
		for i, v := range o.x.s() {
			bs[i] = byte(v)
		}
		run := func(units int) []byte {
			y := newFloats(t, nout, float32(math.NaN()))
			ks := newKernels(t, 1)
			d := dwDesc(dc, o, y)
			d.In[0] = xb.p
			d.P[PStore] = 1 << 2 // in[0] as uint8
			if dc.requant {
				d.P[PStore] |= 1 // the output as uint8
			}
			if err := ks.Set(0, &d, units); err != nil {
				t.Fatalf("%v: %v", dc, err)
			}
			runBlocks(ks, 0)
			if dc.requant {
				return append([]byte{}, unsafe.Slice((*byte)(y.p), nout)...)
			}
			return append([]byte{}, unsafe.Slice((*byte)(y.p), 4*nout)...)
		}
		sameBytesEverywhere(t, dc.String(), []int{QGemmBest, QGemmNoVNNI}, run)
	}
}

// sameBytesEverywhere runs run on the generic instruction set and one
// unit, then on every instruction set this CPU has with each integer
// micro-kernel choice of qks, on 1 and 3 units, and fails at the first
// byte that differs from the first run's.
func sameBytesEverywhere(t *testing.T, name string, qks []int, run func(units int) []byte) {
	t.Helper()
	defer SetGemmISA("")
	defer SetQGemmKernel(QGemmBest)
	if err := SetGemmISA("generic"); err != nil {
		t.Fatal(err)
	}
	want := run(1)
	for _, isa := range GemmISAs() {
		if err := SetGemmISA(isa); err != nil {
			t.Fatal(err)
		}
		for _, qk := range qks {
			SetQGemmKernel(qk)
			for _, units := range []int{1, 3} {
				got := run(units)
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s, %s, micro-kernel %d, %d units: byte %d = %d, generic %d", name, isa, qk, units, i, got[i], want[i])
					}
				}
			}
		}
	}
}

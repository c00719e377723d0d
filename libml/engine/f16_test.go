package engine

import (
	"math"
	"testing"
)

// RoundF16 gives the float16 value nearest, ties to even, at the edges of
// the format: the largest finite value, overflow, subnormals, underflow.
func TestRoundF16(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, c := range []struct{ in, want float32 }{
		{0, 0}, {1, 1}, {-2.5, -2.5},
		{0.1, 0.0999755859375},         // 0x2e66
		{1 + 1.0/2048, 1},              // a tie: to the even 1
		{1 + 3.0/2048, 1 + 2.0/1024},   // a tie: to the even 1+2^-9
		{65504, 65504}, {65519, 65504}, // the largest finite value
		{65520, inf}, {-70000, -inf}, // past it
		{0x1p-24, 0x1p-24},                 // the smallest subnormal
		{0x1p-25, 0}, {0x1.8p-25, 0x1p-24}, // half of it: to even (0); above: up
		{0x1.8p-24, 0x1p-23}, // a subnormal tie: to even
		{0x1p-14, 0x1p-14},   // the smallest normal
		{inf, inf},
	} {
		if got := RoundF16(c.in); got != c.want {
			t.Errorf("RoundF16(%g) = %g, want %g", c.in, got, c.want)
		}
	}
	if got := RoundF16(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("RoundF16(NaN) = %g", got)
	}
	if got := RoundF16(float32(math.Copysign(0, -1))); math.Float32bits(got) != 0x80000000 {
		t.Errorf("RoundF16(-0) = %g (%#x)", got, math.Float32bits(got))
	}
}

package cpu

import (
	"fmt"
	"testing"
)

// COPY gives the same values however its blocks cut the copy: many rows
// (a block takes whole rows) and a few long ones (blocks take pieces of a
// row, t[1]), contiguous, strided and broadcast (a stride-0 fill), on 1 to
// 8 units, against a direct loop.
func TestCopyPieces(t *testing.T) {
	for _, c := range []struct {
		dims, sin, sout []int64
	}{
		{[]int64{1 << 18}, []int64{1}, []int64{1}},                   // one long row: pieces
		{[]int64{3, 100001}, []int64{100001, 1}, []int64{100001, 1}}, // few long rows, odd length
		{[]int64{2, 70000}, []int64{0, 0}, []int64{70001, 1}},        // a fill (broadcast), rows apart
		{[]int64{2, 50000}, []int64{1, 2}, []int64{50000, 1}},        // strided reads (a transpose)
		{[]int64{4096, 64}, []int64{64, 1}, []int64{64, 1}},          // many short rows: whole rows
	} {
		for _, units := range []int{1, 2, 8} {
			name := fmt.Sprintf("dims %v in %v out %v units %d", c.dims, c.sin, c.sout, units)
			span := func(dims, st []int64) int {
				n := int64(1)
				for i := range dims {
					n += (dims[i] - 1) * st[i]
				}
				return int(n)
			}
			x := newFloats(t, span(c.dims, c.sin), 0)
			for i := range x.s() {
				x.s()[i] = float32(i%1009) - 500
			}
			y := newFloats(t, span(c.dims, c.sout), 0)
			for i := range y.s() {
				y.s()[i] = -1e9
			}
			d := Desc{Op: OpCopy, Out: y.p}
			d.In[0] = x.p
			d.P[0] = int64(len(c.dims))
			for i := range c.dims {
				d.P[1+i], d.P[7+i], d.P[13+i] = c.dims[i], c.sin[i], c.sout[i]
			}
			ks := newKernels(t, 1)
			if err := ks.Set(0, &d, units); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			runBlocks(ks, 0)
			want := make([]float32, len(y.s()))
			for i := range want {
				want[i] = -1e9
			}
			rows, inner := int64(1), c.dims[len(c.dims)-1]
			for _, v := range c.dims[:len(c.dims)-1] {
				rows *= v
			}
			for r := int64(0); r < rows; r++ {
				oi, oo := int64(0), int64(0)
				if len(c.dims) == 2 {
					oi, oo = r*c.sin[0], r*c.sout[0]
				}
				for j := int64(0); j < inner; j++ {
					want[oo+j*c.sout[len(c.dims)-1]] = x.s()[oi+j*c.sin[len(c.dims)-1]]
				}
			}
			for i := range want {
				if y.s()[i] != want[i] {
					t.Fatalf("%s (grid %d): [%d] = %v, want %v", name, ks.Info(0).Grid, i, y.s()[i], want[i])
				}
			}
		}
	}
}

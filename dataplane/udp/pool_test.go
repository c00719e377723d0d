package udp

import (
	"testing"

	"sluice/dataplane"
)

func TestPool(t *testing.T) {
	p := newPool(4, 100)
	if p.stride != 128 || len(p.slab) != 4*128 || p.capacity() != 4 {
		t.Fatalf("stride %d slab %d cap %d", p.stride, len(p.slab), p.capacity())
	}
	if top := p.free[len(p.free)-1]; top != 0 {
		t.Errorf("first buffer handed out is %d, want 0", top)
	}
	for i := range uint32(4) {
		b := p.buf(i)
		if len(b) != 100 || cap(b) != 100 || &b[0] != &p.slab[int(i)*128] {
			t.Errorf("buffer %d: len %d cap %d", i, len(b), cap(b))
		}
		if d := p.data(i, 10); len(d) != 10 || cap(d) != 10 {
			t.Errorf("data %d: len %d cap %d", i, len(d), cap(d))
		}
	}
	// Take two buffers by hand, as RxBurst does.
	p.free = p.free[:2]
	p.out[3], p.out[2] = true, true
	p.inUse.Store(2)
	p.release([]dataplane.BufRef{3, 3, 4, 1, 2})
	if len(p.free) != 4 || p.inUse.Load() != 0 || p.doubles.Load() != 2 || p.foreign.Load() != 1 {
		t.Errorf("free %v inUse %d doubles %d foreign %d", p.free, p.inUse.Load(), p.doubles.Load(), p.foreign.Load())
	}
	p.release(nil)
	if len(p.free) != 4 {
		t.Errorf("free %v", p.free)
	}
}

func TestStride(t *testing.T) {
	for _, c := range [][2]int{{1, 64}, {64, 64}, {65, 128}, {DefaultBufSize, 65536}} {
		if got := stride(c[0]); got != c[1] {
			t.Errorf("stride(%d) = %d, want %d", c[0], got, c[1])
		}
	}
}

package udp

import (
	"sync/atomic"

	"sluice/dataplane"
)

// bufAlign is the alignment of each buffer in the slab (a cache line).
const bufAlign = 64

// stride returns the distance between buffers of size bytes in the slab.
func stride(size int) int {
	return (size + bufAlign - 1) &^ (bufAlign - 1)
}

// pool is a fixed set of equal receive buffers carved from one slab, with a
// LIFO free list of their indices (recently used buffers are cache-warm).
// take and give belong to the I/O goroutine; the counters are atomic so
// Stats can read them from anywhere.
type pool struct {
	slab   []byte
	size   int      // usable bytes per buffer
	stride int      // distance between buffers
	free   []uint32 // stack of free indices; cap == count
	out    []bool   // out[i]: buffer i is held by a caller

	inUse   atomic.Uint64
	doubles atomic.Uint64
	foreign atomic.Uint64
}

// newPool allocates count buffers of size bytes.
func newPool(count, size int) *pool {
	st := stride(size)
	p := &pool{
		slab:   make([]byte, count*st),
		size:   size,
		stride: st,
		free:   make([]uint32, count),
		out:    make([]bool, count),
	}
	// Index 0 on top of the stack, so buffers are handed out in slab order
	// at first.
	for i := range p.free {
		p.free[i] = uint32(count - 1 - i)
	}
	return p
}

// capacity returns the number of buffers.
func (p *pool) capacity() int { return len(p.out) }

// buf returns the whole buffer with index i.
func (p *pool) buf(i uint32) []byte {
	off := int(i) * p.stride
	return p.slab[off : off+p.size : off+p.size]
}

// data returns the first n bytes of buffer i, capped so that appending to it
// cannot reach the next buffer.
func (p *pool) data(i uint32, n int) []byte {
	off := int(i) * p.stride
	return p.slab[off : off+n : off+n]
}

// release returns refs to the free list, counting and skipping references
// that are out of range or already free.
func (p *pool) release(refs []dataplane.BufRef) {
	var back, doubles, foreign uint64
	for _, r := range refs {
		if r >= dataplane.BufRef(len(p.out)) {
			foreign++
			continue
		}
		if !p.out[r] {
			doubles++
			continue
		}
		p.out[r] = false
		p.free = append(p.free, uint32(r))
		back++
	}
	if back != 0 {
		p.inUse.Add(^(back - 1))
	}
	if doubles != 0 {
		p.doubles.Add(doubles)
	}
	if foreign != 0 {
		p.foreign.Add(foreign)
	}
}

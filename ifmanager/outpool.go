package ifmanager

import (
	"encoding/binary"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"
)

// littleEndian reports whether float32 values in memory are already in
// the wire's byte order (little-endian): an output buffer is then sent as
// it is, with no conversion.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// outBuf is one batch's outputs: the backend writes them into f, and the
// batch's responses are sent from b, f's bytes. It goes back to its pool
// when the last of those responses has been sent (done, the responses'
// egress Sent hook, called on the I/O loop).
type outBuf struct {
	f       []float32
	b       []byte
	pending atomic.Int32 // responses not yet sent
	pool    *outPool
	// sent is done as a func value, made once: handing it to a response
	// allocates nothing.
	sent func([]byte)
}

func (o *outBuf) done([]byte) {
	if o.pending.Add(-1) == 0 {
		o.pool.put(o)
	}
}

// bytes returns the first n outputs as little-endian bytes.
func (o *outBuf) bytes(n int) []byte {
	if !littleEndian {
		for i, v := range o.f[:n] {
			binary.LittleEndian.PutUint32(o.b[4*i:], math.Float32bits(v))
		}
	}
	return o.b[:4*n]
}

// outPool is an IF's pool of output buffers, one per batch whose
// responses are still being sent: the serving path allocates none once
// the pool holds as many as the I/O loop keeps in flight.
type outPool struct {
	elems int // outputs per request
	mu    sync.Mutex
	free  []*outBuf
	total int
}

func (p *outPool) init(elems int) { p.elems = elems }

// get returns a free buffer for maxBatch requests, making one when none
// is free; a free buffer too small (made before a swap raised the batch
// bound) is dropped.
func (p *outPool) get(maxBatch int) *outBuf {
	need := maxBatch * p.elems
	p.mu.Lock()
	for len(p.free) > 0 {
		o := p.free[len(p.free)-1]
		p.free = p.free[:len(p.free)-1]
		if len(o.f) >= need {
			p.mu.Unlock()
			return o
		}
		p.total--
	}
	p.total++
	p.mu.Unlock()
	o := &outBuf{f: make([]float32, need), pool: p}
	if littleEndian {
		o.b = unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(o.f))), 4*need)
	} else {
		o.b = make([]byte, 4*need)
	}
	o.sent = o.done
	return o
}

// put gives o back.
func (p *outPool) put(o *outBuf) {
	p.mu.Lock()
	p.free = append(p.free, o)
	p.mu.Unlock()
}

// counts returns how many buffers the pool made (and keeps) and how many
// of them are out with responses being sent.
func (p *outPool) counts() (total, inUse int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.total, p.total - len(p.free)
}

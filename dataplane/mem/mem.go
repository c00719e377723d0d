// Package mem is an in-process port driver for tests and benchmarks. Inject
// plays the part of the NIC: it copies a datagram into a pool buffer and
// queues it for RxBurst. Transmitted datagrams go to a callback.
package mem

import (
	"errors"
	"fmt"
	"sync"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Config sizes a mem port.
type Config struct {
	// Buffers is the receive pool size; BufSize the bytes per buffer.
	Buffers int
	BufSize int
	// OnTx receives each transmitted datagram (header and payload joined in
	// a buffer reused after the call). Nil discards them.
	OnTx func(to dataplane.Endpoint, datagram []byte)
}

// ErrPoolEmpty is returned by Inject when every buffer is in use: the
// datagram is lost, as a NIC would lose it, and counted in RxMissed.
var ErrPoolEmpty = errors.New("mem: receive pool empty")

// Port is an in-process port. All methods are safe for concurrent use.
type Port struct {
	mu      sync.Mutex
	cfg     Config
	slab    []byte
	free    []int32 // stack of free buffer indices
	owned   []bool  // buffer index -> out of the pool
	rxq     []queued
	head    int
	n       int
	txBuf   []byte
	stats   dataplane.PortStats
	closed  bool
	badRefs uint64
}

type queued struct {
	buf  int32
	len  int32
	from dataplane.Endpoint
}

// New makes a mem port.
func New(cfg Config) (*Port, error) {
	if cfg.Buffers <= 0 || cfg.BufSize < wire.HeaderLen {
		return nil, fmt.Errorf("mem: need Buffers > 0 and BufSize >= %d, got %d and %d", wire.HeaderLen, cfg.Buffers, cfg.BufSize)
	}
	p := &Port{
		cfg:   cfg,
		slab:  make([]byte, cfg.Buffers*cfg.BufSize),
		free:  make([]int32, cfg.Buffers),
		owned: make([]bool, cfg.Buffers),
		rxq:   make([]queued, cfg.Buffers),
		txBuf: make([]byte, wire.HeaderLen+wire.MaxPayload),
	}
	for i := range p.free {
		p.free[i] = int32(cfg.Buffers - 1 - i)
	}
	p.stats.BufCapacity = uint64(cfg.Buffers)
	return p, nil
}

// Inject delivers one datagram to the receive side, copying it into a pool
// buffer.
func (p *Port) Inject(data []byte, from dataplane.Endpoint) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errors.New("mem: port closed")
	}
	if len(data) > p.cfg.BufSize {
		p.stats.RxFiltered++
		return fmt.Errorf("mem: datagram of %d bytes exceeds buffer size %d", len(data), p.cfg.BufSize)
	}
	if len(p.free) == 0 {
		p.stats.RxMissed++
		return ErrPoolEmpty
	}
	b := p.free[len(p.free)-1]
	p.free = p.free[:len(p.free)-1]
	p.owned[b] = true
	copy(p.slab[int(b)*p.cfg.BufSize:], data)
	p.rxq[(p.head+p.n)%len(p.rxq)] = queued{buf: b, len: int32(len(data)), from: from}
	p.n++
	return nil
}

// RxBurst implements dataplane.Port.
func (p *Port) RxBurst(pkts []dataplane.Packet) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	k := 0
	for k < len(pkts) && p.n > 0 {
		q := p.rxq[p.head]
		p.head = (p.head + 1) % len(p.rxq)
		p.n--
		off := int(q.buf) * p.cfg.BufSize
		pkts[k] = dataplane.Packet{Data: p.slab[off : off+int(q.len) : off+int(q.len)], From: q.from, Buf: dataplane.BufRef(q.buf)}
		p.stats.RxPackets++
		p.stats.RxBytes += uint64(q.len)
		k++
	}
	return k, nil
}

// Release implements dataplane.Port. Foreign or already released refs are
// counted and ignored.
func (p *Port) Release(bufs []dataplane.BufRef) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range bufs {
		if uint64(b) >= uint64(len(p.owned)) || !p.owned[b] {
			p.badRefs++
			continue
		}
		p.owned[b] = false
		p.free = append(p.free, int32(b))
	}
}

// TxBurst implements dataplane.Port.
func (p *Port) TxBurst(dgs []dataplane.Datagram) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := range dgs {
		d := &dgs[i]
		n := copy(p.txBuf, d.Header[:])
		n += copy(p.txBuf[n:], d.Payload)
		p.stats.TxPackets++
		p.stats.TxBytes += uint64(n)
		if p.cfg.OnTx != nil {
			p.cfg.OnTx(d.To, p.txBuf[:n])
		}
	}
	return len(dgs), nil
}

// Stats implements dataplane.Port.
func (p *Port) Stats() dataplane.PortStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.stats
	s.BufInUse = uint64(p.cfg.Buffers - len(p.free))
	return s
}

// BadReleases counts Release calls with a foreign or already released ref.
func (p *Port) BadReleases() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.badRefs
}

// Close implements dataplane.Port.
func (p *Port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}

// Package reasm reassembles sluice requests from their fragments without
// copying them: a request slot keeps a pointer to each fragment's payload in
// the driver's packet buffer, with a bitmap of the fragments it has. The
// payloads are copied exactly once, by Gather, into the batch tensor, and
// the packet buffers go back to the driver when the consumer calls Done.
//
// A request the table stops tracking (given back with Done, expired,
// failed, or refused at its first fragment) is remembered for
// Config.LateWindow, so that its late, stale or duplicated fragments are
// dropped and counted rather than answered a second time: each request is
// answered once (late.go).
//
// A Table belongs to one goroutine, the port's I/O loop: Add, Expire,
// TakeReleased and Shutdown are called from it. Gather and Done may be
// called from any goroutine by the consumer that owns a completed request.
package reasm

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"net/netip"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Config bounds a Table's memory.
type Config struct {
	// MaxRequests is the number of request slots: requests being assembled
	// plus completed requests not yet given back with Done.
	MaxRequests int
	// MaxFragments is the most fragments one request may have.
	MaxFragments int
	// MaxRequestBytes is the largest request payload accepted.
	MaxRequestBytes uint32
	// MaxHeldFragments caps the fragments (packet buffers) held by all
	// slots together. Keep it below the driver's buffer pool size.
	MaxHeldFragments int
	// Timeout is how long after its first fragment an incomplete request is
	// expired and answered timed_out.
	Timeout time.Duration
	// LateWindow is how long the table remembers a request after it stops
	// tracking it (given back with Done, expired, failed, or refused at its
	// first fragment): a fragment of a remembered request is dropped
	// unanswered (late or after_failure) instead of starting a new request
	// that would be answered a second time. 0 means DefaultLateFactor x
	// Timeout, at most Timeout + MaxDefaultLateSlack. Negative turns the
	// memory off, and with it the guarantee of one answer per request:
	// only for benchmarks that replay the same requests over and over.
	LateWindow time.Duration
	// MaxLate caps how many requests the table remembers at once, besides
	// those in its MaxRequests slots. While it is reached, the first
	// fragment of a new request is dropped unanswered (late_memory_full):
	// a request the table could not remember is never answered, so it is
	// never answered twice. Size it to the peak rate of new requests times
	// LateWindow. 0 means 64 x MaxRequests, within 4096..1<<20.
	MaxLate int
}

// DefaultConfig returns limits suited to 224x224x3 frames at 1 KiB
// fragments with a few hundred requests in flight.
func DefaultConfig() Config {
	return Config{
		MaxRequests:      1024,
		MaxFragments:     16384,
		MaxRequestBytes:  16 << 20,
		MaxHeldFragments: 32768,
		Timeout:          100 * time.Millisecond,
	}
}

func (c *Config) validate() error {
	switch {
	case c.MaxRequests < 1 || c.MaxRequests > 1<<20:
		return fmt.Errorf("MaxRequests %d out of range 1..%d", c.MaxRequests, 1<<20)
	case c.MaxFragments < 1 || c.MaxFragments > 65535:
		return fmt.Errorf("MaxFragments %d out of range 1..65535", c.MaxFragments)
	case c.MaxRequestBytes < 1:
		return errors.New("MaxRequestBytes must be positive")
	case c.MaxHeldFragments < 1 || c.MaxHeldFragments > 1<<24:
		return fmt.Errorf("MaxHeldFragments %d out of range 1..%d", c.MaxHeldFragments, 1<<24)
	case c.Timeout <= 0:
		return errors.New("Timeout must be positive")
	case c.MaxLate < 0 || c.MaxLate > 1<<24:
		return fmt.Errorf("MaxLate %d out of range 0..%d", c.MaxLate, 1<<24)
	}
	return nil
}

// withDefaults fills in LateWindow and MaxLate when they are 0.
func (c Config) withDefaults() Config {
	if c.LateWindow == 0 {
		c.LateWindow = DefaultLateFactor * c.Timeout
		if c.Timeout > MaxDefaultLateSlack/(DefaultLateFactor-1) {
			c.LateWindow = c.Timeout + MaxDefaultLateSlack
			if c.LateWindow < 0 {
				c.LateWindow = math.MaxInt64
			}
		}
	}
	if c.MaxLate == 0 {
		c.MaxLate = min(max(64*c.MaxRequests, 4096), 1<<20)
	}
	return c
}

// Handler receives what a Table produces. Both calls are made on the I/O
// loop's goroutine and must not block.
type Handler interface {
	// Complete hands over a request whose fragments have all arrived. The
	// receiver owns it until it calls Table.Done.
	Complete(r *Request)
	// Reject asks for an error response to the request described by h,
	// from the sender at to.
	Reject(to dataplane.Endpoint, h *wire.Header, st wire.Status)
}

type slotState uint8

// A slot is free, assembling or complete. A request that ends (given back,
// expired, failed) frees its slot at once; its key moves to the late memory.
const (
	stateFree       slotState = iota // not indexed
	stateAssembling                  // fragments arriving
	stateComplete                    // handed to the consumer
)

// Info is what a request's fragments say about it, and when they came:
// the part of a request the layers above the table see (ioloop.Request
// carries a copy).
type Info struct {
	From      dataplane.Endpoint
	Model     uint16
	Flow      uint32
	ID        uint64
	Flags     uint8
	TotalLen  uint32
	FragCount uint16
	// DeadlineUS is the client's latency budget (0 when none).
	DeadlineUS uint32
	// FirstNS and LastNS are the arrival times of the first and the last
	// fragment, on the clock passed to Add.
	FirstNS, LastNS int64
}

// Request is one request slot. Its Info is valid from Complete until Done.
type Request struct {
	Info

	fragSize uint32
	received uint16
	state    slotState
	idx      int32
	fragHead int32 // first fragment entry, linked through fragNext
	// expiry list of assembling slots, oldest first
	prev, next int32
}

// Class returns the request's scheduling class.
func (r *Request) Class() wire.Class {
	if r.Flags&wire.FlagRT != 0 {
		return wire.ClassRT
	}
	return wire.ClassBE
}

// Header returns a header describing the request, for building its response.
func (r *Request) Header() wire.Header {
	return wire.Header{Kind: wire.KindRequest, Flags: r.Flags, Model: r.Model, Flow: r.Flow,
		Request: r.ID, TotalLen: r.TotalLen, FragCount: r.FragCount, DeadlineUS: r.DeadlineUS}
}

// Table is the reassembly table.
type Table struct {
	cfg     Config
	handler Handler
	C       Counters

	slots []Request
	words int // bitmap words per slot
	bits  []uint64

	// hash index: open addressing with linear probing, -1 = empty
	index []int32
	mask  uint32

	// free slots, FIFO
	freeRing           []int32
	freeHead, freeSize int

	// fragment entries
	fragData []fragRef
	fragNext []int32
	fragFree int32 // head of the free list
	fragHeld int

	// expiry list (assembling slots), oldest first
	oldest, newest int32
	assembling     int

	// buffers to give back to the driver
	release []dataplane.BufRef
	// slots given back by consumers, drained by the I/O loop
	done chan int32
	// completed slots not yet Done
	outstanding int

	hdr wire.Header
	// last is the slot the previous fragment belonged to, or -1.
	last int32
	// fragments counts accepted fragments and received the datagrams
	// given to Add; Expire publishes them to C.
	fragments, received uint64

	// late remembers requests no longer in a slot (late.go).
	late lateMemory
	// clock is the latest time passed to Add or Expire: DrainDone, which
	// is given none, remembers the requests it frees from then.
	clock int64
}

type fragRef struct {
	data  []byte
	buf   dataplane.BufRef
	index uint16
}

// ErrNotOwned is returned by Done for a request that is not outstanding.
var ErrNotOwned = errors.New("reasm: request is not an outstanding completed request")

// New makes a Table. h receives completed requests and rejections.
func New(cfg Config, h Handler) (*Table, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("reasm: %w", err)
	}
	if h == nil {
		return nil, errors.New("reasm: nil handler")
	}
	cfg = cfg.withDefaults()
	n := cfg.MaxRequests
	words := (cfg.MaxFragments + 63) / 64
	isize := 1 << bits.Len(uint(2*n-1))
	t := &Table{
		cfg: cfg, handler: h,
		slots:    make([]Request, n),
		words:    words,
		bits:     make([]uint64, n*words),
		index:    make([]int32, isize),
		mask:     uint32(isize - 1),
		freeRing: make([]int32, n),
		fragData: make([]fragRef, cfg.MaxHeldFragments),
		fragNext: make([]int32, cfg.MaxHeldFragments),
		oldest:   -1, newest: -1, last: -1,
		release: make([]dataplane.BufRef, 0, cfg.MaxHeldFragments),
		done:    make(chan int32, n),
	}
	for i := range t.index {
		t.index[i] = -1
	}
	for i := range t.slots {
		t.slots[i].idx = int32(i)
		t.slots[i].prev, t.slots[i].next = -1, -1
		t.freeRing[i] = int32(i)
	}
	t.freeSize = n
	for i := range t.fragNext {
		t.fragNext[i] = int32(i + 1)
	}
	t.fragNext[len(t.fragNext)-1] = -1
	t.late.init(int64(cfg.LateWindow), cfg.MaxLate+n)
	return t, nil
}

// Config returns the table's limits, LateWindow and MaxLate filled in.
func (t *Table) Config() Config { return t.cfg }

// Remembered is the number of requests in the late memory. Like Assembling,
// it is for the I/O loop's goroutine; others read Counters.Remembered.
func (t *Table) Remembered() int { return t.late.n }

// Assembling is the number of requests still collecting fragments.
func (t *Table) Assembling() int { return t.assembling }

// Outstanding is the number of completed requests not yet given back; it
// is exact after DrainDone.
func (t *Table) Outstanding() int { return t.outstanding }

// HeldFragments is the number of packet buffers the table holds.
func (t *Table) HeldFragments() int { return t.fragHeld }

// Add takes one received datagram at time now (nanoseconds, monotonic). The
// packet's buffer is either kept by a request or queued for release; the
// caller gives queued buffers back with TakeReleased.
func (t *Table) Add(p *dataplane.Packet, now int64) {
	t.received++
	if now > t.clock {
		t.clock = now
	}
	h := &t.hdr
	if err := wire.Decode(p.Data, h); err != nil {
		t.C.drop(decodeReason(err))
		t.release = append(t.release, p.Buf)
		return
	}
	if h.Kind != wire.KindRequest {
		t.C.drop(ReasonBadKind)
		t.release = append(t.release, p.Buf)
		return
	}
	// Fragments of one request mostly arrive back to back: try the slot
	// the previous fragment went to before hashing.
	si := t.last
	if si < 0 || !t.slots[si].is(&p.From.Addr, h.Flow, h.Request) {
		si = t.lookup(&p.From.Addr, h.Flow, h.Request)
	}
	t.last = si
	if si < 0 {
		t.addFirst(p, h, now)
		return
	}
	s := &t.slots[si]
	if s.state == stateComplete {
		t.C.drop(ReasonLate)
		t.release = append(t.release, p.Buf)
		return
	}
	if !t.sameRequest(s, h) {
		t.fail(s, ReasonInconsistent, wire.StatusMalformed)
		t.release = append(t.release, p.Buf)
		return
	}
	if !fits(h, s) {
		t.fail(s, ReasonInconsistent, wire.StatusMalformed)
		t.release = append(t.release, p.Buf)
		return
	}
	t.store(s, p, h, now)
}

// fits reports whether a fragment of an existing request describes the
// same geometry as the request's first fragment did (wire.FragSize checked
// that one in full): fragment i sits at i*S and carries S bytes, or the
// rest if it is the last. It needs no division, unlike wire.FragSize.
func fits(h *wire.Header, s *Request) bool {
	off := uint64(h.FragIndex) * uint64(s.fragSize)
	if uint64(h.Offset) != off {
		return false
	}
	if h.FragIndex == s.FragCount-1 {
		return off+uint64(h.PayloadLen) == uint64(s.TotalLen)
	}
	return uint32(h.PayloadLen) == s.fragSize
}

func decodeReason(err error) Reason {
	switch err {
	case wire.ErrTruncated:
		return ReasonTruncated
	case wire.ErrBadMagic:
		return ReasonBadMagic
	case wire.ErrBadVersion:
		return ReasonBadVersion
	case wire.ErrBadKind:
		return ReasonBadKind
	case wire.ErrBadFlags:
		return ReasonBadFlags
	case wire.ErrLengthMismatch:
		return ReasonLengthMismatch
	default:
		return ReasonBadFragIndex
	}
}

func (t *Table) sameRequest(s *Request, h *wire.Header) bool {
	return s.Model == h.Model && s.Flags == h.Flags && s.TotalLen == h.TotalLen &&
		s.FragCount == h.FragCount && s.DeadlineUS == h.DeadlineUS
}

// addFirst handles a fragment of a request no slot holds: one the late
// memory remembers, or the first fragment seen of a new request.
func (t *Table) addFirst(p *dataplane.Packet, h *wire.Header, now int64) {
	var k lateEntry
	if t.late.on() {
		t.late.expire(now)
		k = lateKeyOf(&p.From.Addr, h.Flow, h.Request)
		if pos := t.late.lookup(&k); pos >= 0 {
			t.C.drop(t.late.reason(pos))
			t.release = append(t.release, p.Buf)
			return
		}
		// Every request in a slot has its place in the late memory
		// reserved; admit this one (to a slot or to an answer) only if
		// it can have one too, else it would have to be forgotten
		// early and a stale fragment could have it answered twice.
		if t.late.room() <= len(t.slots)-t.freeSize {
			t.C.drop(ReasonLateMemoryFull)
			t.release = append(t.release, p.Buf)
			return
		}
	}
	fs, gerr := wire.FragSize(h)
	var (
		reason Reason
		status wire.Status
		bad    bool
	)
	switch {
	case h.TotalLen > t.cfg.MaxRequestBytes || int(h.FragCount) > t.cfg.MaxFragments:
		reason, status, bad = ReasonTooLarge, wire.StatusTooLarge, true
	case gerr != nil:
		reason, status, bad = ReasonBadGeometry, wire.StatusMalformed, true
	}
	var s *Request
	if !bad {
		s = t.allocSlot(now)
		if s == nil {
			// No slot: refuse the request on the first fragment seen,
			// whichever it is, and remember it so that its other
			// fragments are dropped (after_failure) rather than start
			// it again once a slot frees.
			reason, status, bad = ReasonTableFull, wire.StatusOverloaded, true
		}
	}
	if bad {
		// Refused at its first fragment, without a slot.
		t.C.drop(reason)
		t.C.Answered.Add(1)
		t.handler.Reject(p.From, h, status)
		if t.late.on() {
			t.late.push(k, lateFailed, t.clock)
		}
		t.release = append(t.release, p.Buf)
		return
	}
	s.From = p.From
	s.Model, s.Flow, s.ID, s.Flags = h.Model, h.Flow, h.Request, h.Flags
	s.TotalLen, s.FragCount, s.DeadlineUS = h.TotalLen, h.FragCount, h.DeadlineUS
	s.FirstNS, s.LastNS = now, now
	s.fragSize, s.received, s.fragHead = fs, 0, -1
	s.state = stateAssembling
	t.insert(s)
	t.pushExpiry(s)
	t.assembling++
	b := t.bits[int(s.idx)*t.words : int(s.idx)*t.words+(int(s.FragCount)+63)/64]
	clear(b)
	t.store(s, p, h, now)
}

// store keeps one fragment of an assembling request.
func (t *Table) store(s *Request, p *dataplane.Packet, h *wire.Header, now int64) {
	w := &t.bits[int(s.idx)*t.words+int(h.FragIndex>>6)]
	bit := uint64(1) << (h.FragIndex & 63)
	if *w&bit != 0 {
		t.C.drop(ReasonDuplicate)
		t.release = append(t.release, p.Buf)
		return
	}
	fi := t.fragFree
	if fi < 0 {
		t.fail(s, ReasonFragmentsFull, wire.StatusOverloaded)
		t.release = append(t.release, p.Buf)
		return
	}
	t.fragFree = t.fragNext[fi]
	t.fragHeld++
	t.fragData[fi] = fragRef{data: p.Data[wire.HeaderLen:], buf: p.Buf, index: h.FragIndex}
	t.fragNext[fi] = s.fragHead
	s.fragHead = fi
	*w |= bit
	s.received++
	s.LastNS = now
	t.fragments++
	if s.received == s.FragCount {
		t.unlinkExpiry(s)
		t.assembling--
		s.state = stateComplete
		t.outstanding++
		t.C.Completed.Add(1)
		t.handler.Complete(s)
	}
}

// fail answers an assembling request with an error and frees its fragments
// and its slot; the late memory absorbs the rest of its fragments.
func (t *Table) fail(s *Request, r Reason, st wire.Status) {
	t.C.drop(r)
	t.C.Answered.Add(1)
	t.freeFrags(s)
	t.unlinkExpiry(s)
	t.assembling--
	h := s.Header()
	t.handler.Reject(s.From, &h, st)
	t.retire(s, lateFailed)
}

func (t *Table) freeFrags(s *Request) {
	for fi := s.fragHead; fi >= 0; {
		next := t.fragNext[fi]
		t.release = append(t.release, t.fragData[fi].buf)
		t.fragData[fi] = fragRef{}
		t.fragNext[fi] = t.fragFree
		t.fragFree = fi
		t.fragHeld--
		fi = next
	}
	s.fragHead = -1
}

// Expire answers and frees requests whose timeout has passed at now, and
// forgets the requests remembered for LateWindow. It returns how many
// requests timed out.
func (t *Table) Expire(now int64) int {
	if now > t.clock {
		t.clock = now
	}
	limit := now - int64(t.cfg.Timeout)
	n := 0
	for t.oldest >= 0 {
		s := &t.slots[t.oldest]
		if s.FirstNS > limit {
			break
		}
		t.unlinkExpiry(s)
		t.assembling--
		n++
		t.C.drop(ReasonTimedOut)
		t.C.Answered.Add(1)
		t.freeFrags(s)
		h := s.Header()
		t.handler.Reject(s.From, &h, wire.StatusTimedOut)
		t.retire(s, lateDone)
	}
	if t.late.on() {
		t.late.expire(now)
	}
	t.publish()
	return n
}

// publish refreshes the counters other goroutines read.
func (t *Table) publish() {
	t.C.Fragments.Store(t.fragments)
	t.C.Received.Store(t.received)
	t.C.Remembered.Store(int64(t.late.n))
	t.C.HeldFragments.Store(int64(t.fragHeld))
	t.C.Assembling.Store(int64(t.assembling))
}

// Shutdown answers every request still assembling with shutting_down and
// frees it. Completed requests stay with their consumers.
func (t *Table) Shutdown() {
	for t.oldest >= 0 {
		s := &t.slots[t.oldest]
		t.unlinkExpiry(s)
		t.assembling--
		t.C.drop(ReasonShutdown)
		t.C.Answered.Add(1)
		t.freeFrags(s)
		h := s.Header()
		t.handler.Reject(s.From, &h, wire.StatusShuttingDown)
		t.retire(s, lateDone)
	}
	t.publish()
}

// Done gives a completed request back: its packet buffers will be released
// by the I/O loop. Call it once per completed request, after Gather, from
// any goroutine.
func (t *Table) Done(r *Request) {
	t.done <- r.idx // never blocks: at most MaxRequests slots are outstanding
}

// DrainDone processes requests given back with Done. The I/O loop calls it
// once per iteration, before TakeReleased.
func (t *Table) DrainDone() {
	for {
		select {
		case i := <-t.done:
			s := &t.slots[i]
			if s.state != stateComplete {
				panic(fmt.Sprintf("reasm: Done on slot %d in state %d", i, s.state))
			}
			t.freeFrags(s)
			t.outstanding--
			t.C.Released.Add(1)
			t.retire(s, lateDone)
		default:
			return
		}
	}
}

// TakeReleased returns the packet buffers that must go back to the driver
// and resets the list; the slice is reused by the next call.
func (t *Table) TakeReleased() []dataplane.BufRef {
	r := t.release
	t.release = t.release[:0]
	return r
}

// Gather copies the payload of r into dst, which must hold r.TotalLen
// bytes. Each byte is copied once, straight from the packet buffer.
func (t *Table) Gather(dst []byte, r *Request) error {
	if len(dst) < int(r.TotalLen) {
		return fmt.Errorf("reasm: gather: destination holds %d bytes, request has %d", len(dst), r.TotalLen)
	}
	if r.state != stateComplete {
		return ErrNotOwned
	}
	for fi := r.fragHead; fi >= 0; fi = t.fragNext[fi] {
		f := &t.fragData[fi]
		copy(dst[uint32(f.index)*r.fragSize:], f.data)
	}
	return nil
}

// GatherBatch copies each request's payload into dst at i*stride: the batch
// tensor. Every request must fit in stride bytes.
func (t *Table) GatherBatch(dst []byte, stride int, reqs []*Request) error {
	if len(dst) < stride*len(reqs) {
		return fmt.Errorf("reasm: gather: destination holds %d bytes, batch needs %d", len(dst), stride*len(reqs))
	}
	for i, r := range reqs {
		if int(r.TotalLen) > stride {
			return fmt.Errorf("reasm: gather: request %d has %d bytes, stride is %d", r.ID, r.TotalLen, stride)
		}
		if err := t.Gather(dst[i*stride:(i+1)*stride], r); err != nil {
			return err
		}
	}
	return nil
}

// --- slots, index and expiry list ---

func (t *Table) allocSlot(now int64) *Request {
	if t.freeSize == 0 {
		// Reclaim expired requests before refusing.
		t.Expire(now)
		if t.freeSize == 0 {
			return nil
		}
	}
	i := t.freeRing[t.freeHead]
	t.freeHead = (t.freeHead + 1) % len(t.freeRing)
	t.freeSize--
	return &t.slots[i]
}

// retire frees a slot: its key leaves the index for the late memory (why
// says how its later fragments are counted), where its place was reserved
// when it was admitted.
func (t *Table) retire(s *Request, why uint8) {
	t.remove(s)
	if t.late.on() {
		t.late.push(lateKeyOf(&s.From.Addr, s.Flow, s.ID), why, t.clock)
	}
	s.state = stateFree
	tail := (t.freeHead + t.freeSize) % len(t.freeRing)
	t.freeRing[tail] = s.idx
	t.freeSize++
}

func (t *Table) pushExpiry(s *Request) {
	s.prev, s.next = t.newest, -1
	if t.newest >= 0 {
		t.slots[t.newest].next = s.idx
	} else {
		t.oldest = s.idx
	}
	t.newest = s.idx
}

func (t *Table) unlinkExpiry(s *Request) {
	if s.prev >= 0 {
		t.slots[s.prev].next = s.next
	} else {
		t.oldest = s.next
	}
	if s.next >= 0 {
		t.slots[s.next].prev = s.prev
	} else {
		t.newest = s.prev
	}
	s.prev, s.next = -1, -1
}

func hashKey(a *netip.AddrPort, flow uint32, id uint64) uint32 {
	b := a.Addr().As16()
	x := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	y := uint64(b[8]) | uint64(b[9])<<8 | uint64(b[10])<<16 | uint64(b[11])<<24 |
		uint64(b[12])<<32 | uint64(b[13])<<40 | uint64(b[14])<<48 | uint64(b[15])<<56
	h := x*0x9E3779B97F4A7C15 ^ y*0xC2B2AE3D27D4EB4F ^ id*0x165667B19E3779F9 ^
		(uint64(flow)<<16|uint64(a.Port()))*0xD6E8FEB86659FD93
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return uint32(h)
}

// is reports whether s is indexed under the key (a, flow, id).
func (s *Request) is(a *netip.AddrPort, flow uint32, id uint64) bool {
	return s.state != stateFree && s.ID == id && s.Flow == flow && s.From.Addr == *a
}

func (t *Table) lookup(a *netip.AddrPort, flow uint32, id uint64) int32 {
	for i := hashKey(a, flow, id) & t.mask; ; i = (i + 1) & t.mask {
		si := t.index[i]
		if si < 0 {
			return -1
		}
		if t.slots[si].is(a, flow, id) {
			return si
		}
	}
}

func (t *Table) insert(s *Request) {
	i := hashKey(&s.From.Addr, s.Flow, s.ID) & t.mask
	for t.index[i] >= 0 {
		i = (i + 1) & t.mask
	}
	t.index[i] = s.idx
}

// remove deletes s from the index with backward-shift deletion, so the
// table never fills with tombstones.
func (t *Table) remove(s *Request) {
	i := hashKey(&s.From.Addr, s.Flow, s.ID) & t.mask
	for t.index[i] != s.idx {
		if t.index[i] < 0 {
			return
		}
		i = (i + 1) & t.mask
	}
	for {
		t.index[i] = -1
		j := i
		for {
			j = (j + 1) & t.mask
			sj := t.index[j]
			if sj < 0 {
				return
			}
			o := &t.slots[sj]
			home := hashKey(&o.From.Addr, o.Flow, o.ID) & t.mask
			// move o back to i if its home is not in (i, j]
			if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
				t.index[i] = sj
				i = j
				break
			}
		}
	}
}

package reasm

import (
	"encoding/binary"
	"math"
	"math/bits"
	"net/netip"
	"time"
)

// The late memory remembers the keys of requests the table no longer tracks
// in a slot, for LateWindow after it stopped tracking them: requests
// completed and given back with Done, expired, shut down, failed, and
// refused at their first fragment (too large, bad geometry, table full).
// A fragment whose key it holds is dropped without an answer, so a stale
// or duplicated fragment can never start a new request that would be
// answered a second time.
//
// It is a FIFO ring of entries in the order they were remembered (which is
// the order they expire in: every entry lives the same LateWindow), with an
// open-addressing index over the ring positions that also keeps each
// entry's hash, so probing and deleting rarely touch the ring. Both are
// allocated by New; neither holds pointers, so the garbage collector never
// scans them.
//
// The ring has room for MaxLate entries plus one per request slot, and a
// new request is admitted only while remembered + slots in use < that
// room: every request that can still be answered has its place reserved,
// so remembering it when it ends never fails and never evicts an entry
// younger than LateWindow.

// Why a key is remembered, which says how its later fragments are counted.
const (
	lateDone   uint8 = iota // completed, expired or shut down: ReasonLate
	lateFailed              // answered with an error: ReasonAfterFailure
)

// When the configuration leaves LateWindow 0, it is DefaultLateFactor x
// Timeout, but at most Timeout + MaxDefaultLateSlack: a long reassembly
// timeout (set for slow links or tests) does not make the memory hold
// requests for tens of minutes, which would lower the request rate the
// MaxLate cap allows as much.
const (
	DefaultLateFactor   = 10
	MaxDefaultLateSlack = 10 * time.Second
)

// lateEntry is one remembered request key (40 bytes, no pointers). The
// address is kept as its 16-byte form plus an IPv4 bit; an IPv6 zone is not
// kept, so two link-local senders that differ only by zone share entries.
type lateEntry struct {
	a0, a1 uint64 // address, As16
	id     uint64
	until  int64 // forgotten at the first expire at or after this time
	flow   uint32
	port   uint16
	v4     bool
	why    uint8
}

func lateKeyOf(a *netip.AddrPort, flow uint32, id uint64) lateEntry {
	ip := a.Addr()
	b := ip.As16()
	return lateEntry{a0: binary.LittleEndian.Uint64(b[:8]), a1: binary.LittleEndian.Uint64(b[8:]),
		id: id, flow: flow, port: a.Port(), v4: ip.Is4()}
}

func (e *lateEntry) sameKey(k *lateEntry) bool {
	return e.id == k.id && e.a0 == k.a0 && e.a1 == k.a1 && e.flow == k.flow && e.port == k.port && e.v4 == k.v4
}

func (e *lateEntry) hash() uint32 {
	h := e.a0*0x9E3779B97F4A7C15 ^ e.a1*0xC2B2AE3D27D4EB4F ^ e.id*0x165667B19E3779F9 ^
		(uint64(e.flow)<<16|uint64(e.port))*0xD6E8FEB86659FD93
	if e.v4 {
		h ^= 0x27D4EB2F165667C5
	}
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return uint32(h)
}

type lateMemory struct {
	window int64 // nanoseconds; < 0: the memory is off
	ring   []lateEntry
	head   int
	n      int
	// index: hash<<32 | ring position+1; 0 = empty
	index []uint64
	mask  uint32
}

// init allocates room for size entries (size > 0), or nothing when window
// is negative.
func (m *lateMemory) init(window int64, size int) {
	m.window = window
	if window < 0 {
		return
	}
	isize := 1 << bits.Len(uint(2*size-1))
	m.ring = make([]lateEntry, size)
	m.index = make([]uint64, isize)
	m.mask = uint32(isize - 1)
}

func (m *lateMemory) on() bool { return m.window >= 0 }

// room is how many more entries the ring can take.
func (m *lateMemory) room() int { return len(m.ring) - m.n }

// push remembers k from now on. The caller has made sure there is room.
func (m *lateMemory) push(k lateEntry, why uint8, now int64) {
	pos := m.head + m.n
	if pos >= len(m.ring) {
		pos -= len(m.ring)
	}
	k.why, k.until = why, now+m.window
	if k.until < now {
		k.until = math.MaxInt64 // a window too long to add
	}
	m.ring[pos] = k
	m.n++
	h := k.hash()
	i := h & m.mask
	for m.index[i] != 0 {
		i = (i + 1) & m.mask
	}
	m.index[i] = uint64(h)<<32 | uint64(pos+1)
}

// lookup returns the ring position of k's entry, or -1.
func (m *lateMemory) lookup(k *lateEntry) int32 {
	h := k.hash()
	for i := h & m.mask; ; i = (i + 1) & m.mask {
		v := m.index[i]
		if v == 0 {
			return -1
		}
		if uint32(v>>32) == h {
			if pos := int32(uint32(v)) - 1; m.ring[pos].sameKey(k) {
				return pos
			}
		}
	}
}

// reason is how a fragment of the entry at pos is counted.
func (m *lateMemory) reason(pos int32) Reason {
	if m.ring[pos].why == lateFailed {
		return ReasonAfterFailure
	}
	return ReasonLate
}

// expire forgets the entries whose time is up at now.
func (m *lateMemory) expire(now int64) {
	for m.n > 0 && m.ring[m.head].until <= now {
		m.unindex(int32(m.head))
		m.ring[m.head] = lateEntry{}
		m.head++
		if m.head == len(m.ring) {
			m.head = 0
		}
		m.n--
	}
}

// unindex deletes ring position pos from the index with backward-shift
// deletion, so the index never fills with tombstones.
func (m *lateMemory) unindex(pos int32) {
	h := m.ring[pos].hash()
	want := uint64(h)<<32 | uint64(pos+1)
	i := h & m.mask
	for m.index[i] != want {
		if m.index[i] == 0 {
			return
		}
		i = (i + 1) & m.mask
	}
	for {
		m.index[i] = 0
		j := i
		for {
			j = (j + 1) & m.mask
			vj := m.index[j]
			if vj == 0 {
				return
			}
			home := uint32(vj>>32) & m.mask
			// move vj back to i if its home is not in (i, j]
			if (j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j)) {
				m.index[i] = vj
				i = j
				break
			}
		}
	}
}

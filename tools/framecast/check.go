package main

import (
	"encoding/binary"
	"math"
	"net/netip"
	"time"

	"sluice/dataplane/wire"
)

// maxUnknownTracked bounds the set of unknown request ids remembered to
// count each once; past it every such datagram counts.
const maxUnknownTracked = 1 << 16

// tolerance is the largest relative difference allowed between the
// outputs for equal frames: batching reorders floating-point sums.
const tolerance = 1e-3

// handle takes one datagram received from addr at now.
func (c *client) handle(b []byte, from netip.AddrPort, now time.Time) {
	var h wire.Header
	if err := wire.Decode(b, &h); err != nil || h.Kind != wire.KindResponse {
		c.mu.Lock()
		c.garbage++
		c.mu.Unlock()
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st := c.streamOf(h.Flow)
	if st == nil || netip.AddrPortFrom(from.Addr().Unmap(), from.Port()) != c.target {
		c.foreign++
		return
	}
	p := st.pending[h.Request]
	if p == nil {
		st.stray(h.Request)
		return
	}
	c.fragment(st, p, &h, b[wire.HeaderLen:], now)
}

// streamOf returns the stream a flow id belongs to, or nil. c.mu is held.
func (c *client) streamOf(flow uint32) *streamState {
	i := flow - c.cfg.Flow
	if int64(i) >= int64(len(c.streams)) {
		return nil
	}
	return c.streams[i]
}

// stray counts a response datagram for a request that is not pending:
// never sent (unknown), already answered (duplicate) or already counted
// lost (late). Each request is counted once, however many datagrams.
func (st *streamState) stray(id uint64) {
	switch {
	case id == 0 || id > st.nextID:
		if len(st.unknownSeen) >= maxUnknownTracked {
			st.c.Unknown++
		} else if !st.unknownSeen[id] {
			st.unknownSeen[id] = true
			st.c.Unknown++
		}
	case st.done.has(id):
		if !st.dupSeen.has(id) {
			st.dupSeen.set(id)
			st.c.Duplicates++
		}
	case st.expired.has(id):
		if !st.lateSeen.has(id) {
			st.lateSeen.set(id)
			st.c.Late++
		}
	}
}

// fragment places one response fragment of a pending request; the last
// one completes the response. Fragments that break the protocol's rules
// or disagree with the response's first fragment are counted and dropped.
// c.mu is held.
func (c *client) fragment(st *streamState, p *pending, h *wire.Header, payload []byte, now time.Time) {
	s, err := wire.FragSize(h)
	if err != nil || h.TotalLen > maxResponse {
		st.c.BadFragments++
		return
	}
	if !p.started {
		p.started, p.h, p.s = true, *h, s
		p.got = make([]bool, h.FragCount)
		p.data = make([]byte, h.TotalLen)
	} else if h.Status != p.h.Status || h.Model != p.h.Model || h.TotalLen != p.h.TotalLen ||
		h.FragCount != p.h.FragCount || s != p.s {
		st.c.BadFragments++
		return
	}
	if p.got[h.FragIndex] {
		st.c.DupFragments++
		return
	}
	p.got[h.FragIndex] = true
	p.n++
	copy(p.data[h.Offset:], payload)
	if p.n == len(p.got) {
		c.complete(st, p, now)
	}
}

// complete checks a whole response and counts its outcome: wrong model,
// an error status, a wrong output size, a mismatch, or ok. c.mu is held.
func (c *client) complete(st *streamState, p *pending, now time.Time) {
	c.finished(st, p)
	switch {
	case p.h.Model != st.spec.Model:
		st.c.WrongModel++
	case p.h.Status != wire.StatusOK:
		st.c.Errors[p.h.Status.String()]++
	default:
		st.checkOutput(p, now, c.start)
	}
}

// checkOutput checks an ok response's output: the stream's first ok
// output sets the size all must have, and the first output for each frame
// is the reference later outputs for it must match. c.mu is held.
func (st *streamState) checkOutput(p *pending, now, start time.Time) {
	if st.expectSize < 0 {
		st.expectSize = len(p.data)
	}
	if len(p.data) != st.expectSize {
		st.c.WrongSize++
		return
	}
	if ref, ok := st.refs[p.frame]; ok {
		d, same := outputDiff(ref, p.data)
		if !math.IsInf(d, 0) {
			st.c.MaxRelDiff = max(st.c.MaxRelDiff, d)
		}
		if !same {
			st.c.Mismatched++
			return
		}
	} else {
		st.refs[p.frame] = p.data
	}
	st.c.OK++
	ms := float64(now.Sub(p.sent)) / 1e6
	st.c.lat = append(st.c.lat, ms)
	st.c.series = append(st.c.series, timedLatency{at: p.sent.Sub(start).Seconds(), ms: ms})
	st.recent = append(st.recent, ms)
}

// outputDiff compares output b with reference a. Outputs whose size is a
// multiple of 4 are little-endian float32 vectors: the result is the
// largest element difference relative to the reference's largest
// magnitude, and whether it is within tolerance (NaN must meet NaN).
// Other outputs must be equal byte for byte.
func outputDiff(a, b []byte) (float64, bool) {
	if len(a) != len(b) {
		return math.Inf(1), false
	}
	if len(a)%4 != 0 {
		if string(a) == string(b) {
			return 0, true
		}
		return math.Inf(1), false
	}
	var diff, mag float64
	for i := 0; i < len(a); i += 4 {
		x := float64(math.Float32frombits(binary.LittleEndian.Uint32(a[i:])))
		y := float64(math.Float32frombits(binary.LittleEndian.Uint32(b[i:])))
		if math.IsNaN(x) || math.IsNaN(y) {
			if math.IsNaN(x) != math.IsNaN(y) {
				return math.Inf(1), false
			}
			continue
		}
		if math.IsInf(x, 0) || math.IsInf(y, 0) {
			if x != y {
				return math.Inf(1), false
			}
			continue
		}
		diff = max(diff, math.Abs(x-y))
		mag = max(mag, math.Abs(x))
	}
	rel := diff / max(mag, 1e-6)
	return rel, rel <= tolerance
}

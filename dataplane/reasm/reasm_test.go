package reasm

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

type key struct {
	addr netip.AddrPort
	flow uint32
	id   uint64
}

type rejection struct {
	key    key
	status wire.Status
}

// harness feeds datagrams to a Table and tracks every buffer it hands out.
type harness struct {
	t         testing.TB
	tab       *Table
	completed []*Request
	rejects   []rejection
	held      map[dataplane.BufRef]bool
	nextBuf   dataplane.BufRef
	now       int64
	pkt       dataplane.Packet
	// answeredOK counts completed requests per key (fuzz bookkeeping).
	answeredOK map[key]int
}

func (h *harness) Complete(r *Request) { h.completed = append(h.completed, r) }
func (h *harness) Reject(to dataplane.Endpoint, hd *wire.Header, st wire.Status) {
	h.rejects = append(h.rejects, rejection{key{to.Addr, hd.Flow, hd.Request}, st})
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, held: map[dataplane.BufRef]bool{}}
	tab, err := New(cfg, h)
	if err != nil {
		t.Fatal(err)
	}
	h.tab = tab
	return h
}

var client = dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:40000")}

func (h *harness) deliver(d []byte, from dataplane.Endpoint) {
	h.nextBuf++
	h.held[h.nextBuf] = true
	h.pkt = dataplane.Packet{Data: d, From: from, Buf: h.nextBuf}
	h.tab.Add(&h.pkt, h.now)
	h.collect()
}

func (h *harness) collect() {
	for _, b := range h.tab.TakeReleased() {
		if !h.held[b] {
			h.t.Fatalf("buffer %d released twice or never handed out", b)
		}
		delete(h.held, b)
	}
}

func (h *harness) doneAll() {
	for _, r := range h.completed {
		h.tab.Done(r)
	}
	h.completed = h.completed[:0]
	h.tab.DrainDone()
	h.collect()
}

// checkBaseline asserts nothing is held any more.
func (h *harness) checkBaseline() {
	h.t.Helper()
	h.now += int64(h.tab.cfg.Timeout) * 2
	h.tab.Expire(h.now)
	h.doneAll()
	if len(h.held) != 0 || h.tab.HeldFragments() != 0 || h.tab.Outstanding() != 0 || h.tab.Assembling() != 0 {
		h.t.Fatalf("not back to baseline: %d buffers held by test view, table holds %d fragments, %d outstanding, %d assembling",
			len(h.held), h.tab.HeldFragments(), h.tab.Outstanding(), h.tab.Assembling())
	}
}

func payload(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func frags(t testing.TB, id uint64, p []byte, fragSize int) [][]byte {
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Flags: wire.FlagRT, Model: 3, Flow: 9, Request: id}, p, fragSize)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

func smallConfig() Config {
	c := DefaultConfig()
	c.MaxRequests = 16
	c.MaxHeldFragments = 4096
	c.Timeout = 10 * time.Millisecond
	return c
}

func (h *harness) gather(r *Request) []byte {
	out := make([]byte, r.TotalLen)
	if err := h.tab.Gather(out, r); err != nil {
		h.t.Fatal(err)
	}
	return out
}

func TestInOrderShuffledDuplicated(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		frag int
		perm func([][]byte) [][]byte
	}{
		{"in-order", 150528, 1024, func(d [][]byte) [][]byte { return d }},
		{"single-fragment", 700, 1024, func(d [][]byte) [][]byte { return d }},
		{"jumbo", 150528, 8960, func(d [][]byte) [][]byte { return d }},
		{"reversed", 10000, 1000, func(d [][]byte) [][]byte {
			o := make([][]byte, len(d))
			for i := range d {
				o[len(d)-1-i] = d[i]
			}
			return o
		}},
		{"shuffled", 150528, 1024, func(d [][]byte) [][]byte {
			o := append([][]byte(nil), d...)
			rand.New(rand.NewPCG(1, 2)).Shuffle(len(o), func(i, j int) { o[i], o[j] = o[j], o[i] })
			return o
		}},
		{"duplicated", 5000, 512, func(d [][]byte) [][]byte {
			var o [][]byte
			for _, x := range d {
				o = append(o, x, x)
			}
			return o
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, smallConfig())
			p := payload(tc.size, uint64(tc.size))
			ds := frags(t, 1, p, tc.frag)
			for _, d := range tc.perm(ds) {
				h.deliver(d, client)
			}
			if len(h.completed) != 1 || len(h.rejects) != 0 {
				t.Fatalf("completed %d, rejected %d; want 1, 0", len(h.completed), len(h.rejects))
			}
			r := h.completed[0]
			if r.Class() != wire.ClassRT || r.Model != 3 || r.Flow != 9 || r.ID != 1 || r.From != client {
				t.Fatalf("request fields wrong: %+v", r)
			}
			if !bytes.Equal(h.gather(r), p) {
				t.Fatal("gathered payload differs")
			}
			wantDup := uint64(0)
			if tc.name == "duplicated" {
				wantDup = uint64(len(ds))
			}
			// duplicates of fragments arriving after completion are late, the others duplicates
			if got := h.tab.C.Drops(ReasonDuplicate) + h.tab.C.Drops(ReasonLate); got != wantDup {
				t.Fatalf("duplicate+late drops = %d, want %d", got, wantDup)
			}
			h.checkBaseline()
		})
	}
}

func TestGatherBatch(t *testing.T) {
	h := newHarness(t, smallConfig())
	const stride = 3000
	var want [][]byte
	for i := 0; i < 5; i++ {
		p := payload(stride, uint64(i))
		want = append(want, p)
		for _, d := range frags(t, uint64(100+i), p, 1024) {
			h.deliver(d, client)
		}
	}
	dst := make([]byte, 5*stride)
	if err := h.tab.GatherBatch(dst, stride, h.completed); err != nil {
		t.Fatal(err)
	}
	for i := range want {
		if !bytes.Equal(dst[i*stride:(i+1)*stride], want[i]) {
			t.Fatalf("request %d differs in batch", i)
		}
	}
	if err := h.tab.GatherBatch(dst[:10], stride, h.completed); err == nil {
		t.Fatal("short destination accepted")
	}
	h.checkBaseline()
}

func TestMissingFragmentTimesOut(t *testing.T) {
	h := newHarness(t, smallConfig())
	ds := frags(t, 5, payload(8000, 1), 1000)
	for i, d := range ds {
		if i != 3 {
			h.deliver(d, client)
		}
	}
	if h.tab.HeldFragments() != len(ds)-1 {
		t.Fatalf("held %d fragments, want %d", h.tab.HeldFragments(), len(ds)-1)
	}
	h.now += int64(5 * time.Millisecond)
	if n := h.tab.Expire(h.now); n != 0 {
		t.Fatalf("expired %d before the timeout", n)
	}
	h.now += int64(6 * time.Millisecond)
	if n := h.tab.Expire(h.now); n != 1 {
		t.Fatalf("expired %d, want 1", n)
	}
	h.collect()
	if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusTimedOut || h.rejects[0].key.id != 5 {
		t.Fatalf("rejects = %+v", h.rejects)
	}
	// The missing fragment arriving now is late, and answers nothing more.
	h.deliver(ds[3], client)
	if h.tab.C.Drops(ReasonLate) != 1 || len(h.rejects) != 1 || len(h.completed) != 0 {
		t.Fatalf("late fragment: late=%d rejects=%d completed=%d", h.tab.C.Drops(ReasonLate), len(h.rejects), len(h.completed))
	}
	h.checkBaseline()
}

func encodeRaw(h wire.Header, payloadLen int) []byte {
	h.PayloadLen = uint16(payloadLen)
	b := make([]byte, wire.HeaderLen+payloadLen)
	wire.Encode(b, &h)
	return b
}

func TestBadInputCountedByReason(t *testing.T) {
	good := wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 2, Request: 3, FragCount: 2, TotalLen: 2000}
	mut := func(f func(b []byte)) []byte {
		b := encodeRaw(good, 1000)
		f(b)
		return b
	}
	cases := []struct {
		name   string
		dg     []byte
		reason Reason
		answer wire.Status // 0xff: no answer
	}{
		{"truncated", make([]byte, 10), ReasonTruncated, 0xff},
		{"bad-magic", mut(func(b []byte) { b[0] = 0 }), ReasonBadMagic, 0xff},
		{"bad-version", mut(func(b []byte) { b[2] = 9 }), ReasonBadVersion, 0xff},
		{"response-kind", mut(func(b []byte) { b[3] = byte(wire.KindResponse) }), ReasonBadKind, 0xff},
		{"unknown-kind", mut(func(b []byte) { b[3] = 77 }), ReasonBadKind, 0xff},
		{"reserved-flags", mut(func(b []byte) { b[4] = 0x80 }), ReasonBadFlags, 0xff},
		{"length-mismatch", encodeRaw(good, 1000)[:900], ReasonLengthMismatch, 0xff},
		{"index-out-of-range", mut(func(b []byte) { b[21] = 5 }), ReasonBadFragIndex, 0xff},
		{"zero-count", mut(func(b []byte) { b[22], b[23] = 0, 0 }), ReasonBadFragIndex, 0xff},
		{"offset-not-index-times-size", mut(func(b []byte) { b[31] = 7 }), ReasonBadGeometry, wire.StatusMalformed},
		{"count-mismatch", mut(func(b []byte) { b[23] = 3 }), ReasonBadGeometry, wire.StatusMalformed},
		{"too-large", func() []byte {
			g := good
			g.TotalLen = 1 << 30
			g.FragCount = 65535
			return encodeRaw(g, 1000)
		}(), ReasonTooLarge, wire.StatusTooLarge},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, smallConfig())
			h.deliver(tc.dg, client)
			if got := h.tab.C.Drops(tc.reason); got != 1 {
				t.Fatalf("drops[%v] = %d, want 1 (total %d)", tc.reason, got, h.tab.C.TotalDrops())
			}
			if h.tab.C.TotalDrops() != 1 {
				t.Fatalf("total drops %d, want 1", h.tab.C.TotalDrops())
			}
			if tc.answer == 0xff {
				if len(h.rejects) != 0 {
					t.Fatalf("answered %v, want silence", h.rejects)
				}
			} else {
				if len(h.rejects) != 1 || h.rejects[0].status != tc.answer {
					t.Fatalf("answers %v, want one %v", h.rejects, tc.answer)
				}
				// the rest of the request is absorbed without more answers
				h.deliver(tc.dg, client)
				if len(h.rejects) != 1 || h.tab.C.Drops(ReasonAfterFailure) != 1 {
					t.Fatalf("second fragment: answers %d, after_failure %d", len(h.rejects), h.tab.C.Drops(ReasonAfterFailure))
				}
			}
			h.checkBaseline()
		})
	}
}

func TestOverlapFailsRequestOnce(t *testing.T) {
	h := newHarness(t, smallConfig())
	p := payload(4000, 3)
	a := frags(t, 7, p, 1000) // 4 fragments of 1000
	b := frags(t, 7, p, 800)  // 5 fragments of 800: overlapping ranges, other count
	h.deliver(a[0], client)
	h.deliver(a[1], client)
	h.deliver(b[1], client)
	if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusMalformed || h.tab.C.Drops(ReasonInconsistent) != 1 {
		t.Fatalf("rejects %v inconsistent %d", h.rejects, h.tab.C.Drops(ReasonInconsistent))
	}
	for _, d := range a[2:] {
		h.deliver(d, client)
	}
	if len(h.completed) != 0 || len(h.rejects) != 1 {
		t.Fatal("failed request completed or answered twice")
	}
	h.checkBaseline()
}

func TestSameKeyFromOtherSenderIsOtherRequest(t *testing.T) {
	h := newHarness(t, smallConfig())
	other := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.3:40000")}
	p1, p2 := payload(3000, 1), payload(3000, 2)
	d1, d2 := frags(t, 1, p1, 1000), frags(t, 1, p2, 1000)
	for i := range d1 {
		h.deliver(d1[i], client)
		h.deliver(d2[i], other)
	}
	if len(h.completed) != 2 {
		t.Fatalf("completed %d, want 2", len(h.completed))
	}
	for _, r := range h.completed {
		want := p1
		if r.From == other {
			want = p2
		}
		if !bytes.Equal(h.gather(r), want) {
			t.Fatal("payloads mixed between senders")
		}
	}
	h.checkBaseline()
}

func TestTableFullAnswersOncePerRequest(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 2
	h := newHarness(t, cfg)
	for id := uint64(1); id <= 2; id++ {
		h.deliver(frags(t, id, payload(2000, id), 1000)[0], client) // incomplete
	}
	ds := frags(t, 3, payload(3000, 3), 1000)
	for _, d := range ds {
		h.deliver(d, client)
	}
	if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusOverloaded || h.rejects[0].key.id != 3 {
		t.Fatalf("rejects = %v", h.rejects)
	}
	// table_full counts the refused request once; its other fragments
	// are fragments of a request already answered.
	if h.tab.C.Drops(ReasonTableFull) != 1 || h.tab.C.Drops(ReasonAfterFailure) != uint64(len(ds)-1) {
		t.Fatalf("table_full drops %d, after_failure %d; want 1, %d", h.tab.C.Drops(ReasonTableFull),
			h.tab.C.Drops(ReasonAfterFailure), len(ds)-1)
	}
	// After the timeout the slots come back and a new request fits.
	h.now += int64(cfg.Timeout) + 1
	for _, d := range frags(t, 4, payload(3000, 4), 1000) {
		h.deliver(d, client)
	}
	if len(h.completed) != 1 || h.completed[0].ID != 4 {
		t.Fatalf("request after reclaim: completed %d", len(h.completed))
	}
	h.checkBaseline()
}

func TestFragmentCapRefusesRequest(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxHeldFragments = 5
	h := newHarness(t, cfg)
	ds := frags(t, 1, payload(8000, 1), 1000)
	for _, d := range ds {
		h.deliver(d, client)
	}
	if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusOverloaded || h.tab.C.Drops(ReasonFragmentsFull) != 1 {
		t.Fatalf("rejects %v fragments_full %d", h.rejects, h.tab.C.Drops(ReasonFragmentsFull))
	}
	if h.tab.HeldFragments() != 0 {
		t.Fatalf("held %d fragments after failure", h.tab.HeldFragments())
	}
	h.checkBaseline()
}

func TestFloodOfIncompleteRequestsIsBounded(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 64
	cfg.MaxHeldFragments = 256
	h := newHarness(t, cfg)
	for id := uint64(0); id < 10000; id++ {
		h.deliver(frags(t, id, payload(4000, 1), 1000)[id%3], client)
		if h.tab.HeldFragments() > cfg.MaxHeldFragments || h.tab.Assembling() > cfg.MaxRequests {
			t.Fatal("memory cap exceeded")
		}
		h.now += int64(10 * time.Microsecond)
	}
	if h.tab.C.Drops(ReasonTimedOut) == 0 || h.tab.C.Drops(ReasonTableFull) == 0 {
		t.Fatalf("flood: timed_out %d table_full %d", h.tab.C.Drops(ReasonTimedOut), h.tab.C.Drops(ReasonTableFull))
	}
	if h.tab.Remembered() > h.tab.Config().MaxLate+cfg.MaxRequests {
		t.Fatalf("late memory holds %d requests, over its cap", h.tab.Remembered())
	}
	seen := map[key]bool{}
	for _, r := range h.rejects {
		if seen[r.key] {
			t.Fatalf("request %d answered twice", r.key.id)
		}
		seen[r.key] = true
	}
	// A legitimate request still gets through once slots expire, and the
	// late memory has room once the flood's requests age out of it.
	h.now += int64(h.tab.Config().LateWindow) + 1
	for _, d := range frags(t, 1<<40, payload(3000, 9), 1000) {
		h.deliver(d, client)
	}
	if len(h.completed) != 1 {
		t.Fatal("legitimate request lost after flood")
	}
	h.checkBaseline()
}

func TestShutdownAnswersAssembling(t *testing.T) {
	h := newHarness(t, smallConfig())
	h.deliver(frags(t, 1, payload(3000, 1), 1000)[0], client)
	for _, d := range frags(t, 2, payload(3000, 2), 1000) {
		h.deliver(d, client)
	}
	h.tab.Shutdown()
	h.collect()
	if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusShuttingDown || h.rejects[0].key.id != 1 {
		t.Fatalf("rejects %v", h.rejects)
	}
	if len(h.completed) != 1 {
		t.Fatal("completed request lost by shutdown")
	}
	h.checkBaseline()
}

// TestIndexChurn drives many inserts and removals through the hash index and
// the late memory's, and checks lookups against a map: a key is late for
// LateWindow after its request was given back, and new after that.
func TestIndexChurn(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 37
	h := newHarness(t, cfg)
	window := int64(h.tab.Config().LateWindow)
	retired := map[key]int64{}
	rng := rand.New(rand.NewPCG(5, 5))
	for i := 0; i < 20000; i++ {
		h.now += window / 50
		id := rng.Uint64N(300)
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 99, 0, byte(rng.IntN(4))}), 40000)
		ds := frags(t, id, payload(100, id), 100)
		late := h.tab.C.Drops(ReasonLate)
		h.deliver(ds[0], dataplane.Endpoint{Addr: addr})
		k := key{addr, 9, id}
		if at, ok := retired[k]; ok && h.now-at < window {
			if len(h.completed) != 0 || h.tab.C.Drops(ReasonLate) != late+1 {
				t.Fatalf("request %d from %v given back %v ago: completed %d, late +%d; want 0, +1",
					id, addr, time.Duration(h.now-at), len(h.completed), h.tab.C.Drops(ReasonLate)-late)
			}
		} else {
			if len(h.completed) != 1 {
				t.Fatalf("request %d from %v: completed %d, want 1", id, addr, len(h.completed))
			}
			r := h.completed[0]
			if r.ID != id || r.From.Addr != addr {
				t.Fatalf("completed wrong request %d from %v, want %d from %v", r.ID, r.From.Addr, id, addr)
			}
			retired[k] = h.now
			h.doneAll()
		}
		if i%64 == 0 {
			h.tab.Expire(h.now)
		}
		// every live index entry must be findable
		for si := range h.tab.slots {
			s := &h.tab.slots[si]
			if s.state == stateFree {
				continue
			}
			if got := h.tab.lookup(&s.From.Addr, s.Flow, s.ID); got != int32(si) {
				t.Fatalf("slot %d (state %d) not found in index (got %d)", si, s.state, got)
			}
		}
	}
	h.checkBaseline()
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	cfg := smallConfig()
	h := newHarness(t, cfg)
	ds := frags(t, 1, payload(150528, 1), 1024)
	pkts := make([]dataplane.Packet, len(ds))
	id := uint64(0)
	dst := make([]byte, 150528)
	run := func() {
		id++
		for i, d := range ds {
			wire.Encode(d, &wire.Header{Kind: wire.KindRequest, Model: 3, Flow: 9, Request: id,
				FragIndex: uint16(i), FragCount: uint16(len(ds)), TotalLen: 150528, Offset: uint32(i * 1024),
				PayloadLen: uint16(len(d) - wire.HeaderLen)})
			pkts[i] = dataplane.Packet{Data: d, From: client, Buf: dataplane.BufRef(i)}
			h.tab.Add(&pkts[i], h.now)
		}
		r := h.completed[len(h.completed)-1]
		h.completed = h.completed[:0]
		_ = h.tab.Gather(dst, r)
		h.tab.Done(r)
		h.tab.DrainDone()
		h.tab.TakeReleased()
	}
	run()
	h.completed = make([]*Request, 0, 4)
	if a := testing.AllocsPerRun(50, run); a != 0 {
		t.Fatalf("%.1f allocations per request in steady state", a)
	}
}

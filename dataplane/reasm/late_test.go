package reasm

import (
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Tests of the one-answer-per-request rules: the late memory, refusals at
// the first fragment, and the counters' identities. Time is the harness's
// explicit clock (h.now); nothing sleeps.

// answers counts the answers the harness saw per request: error responses
// and requests handed over complete (which the consumer answers). Completed
// requests are given back with Done as they are counted.
type answers map[key]int

func (a answers) take(h *harness) {
	for _, r := range h.rejects {
		a[r.key]++
	}
	h.rejects = h.rejects[:0]
	for _, r := range h.completed {
		a[key{r.From.Addr, r.Flow, r.ID}]++
	}
	h.doneAll()
}

func (a answers) checkOnce(t *testing.T) {
	t.Helper()
	for k, n := range a {
		if n > 1 {
			t.Fatalf("request %d from %v answered %d times", k.id, k.addr, n)
		}
	}
}

// checkCounts asserts the counters' identities (drops.go) and the late
// memory's bound.
func checkCounts(t *testing.T, h *harness) {
	t.Helper()
	h.tab.Expire(h.now) // publishes Received and Fragments
	c := &h.tab.C
	var datagrams, answered uint64
	for _, r := range Reasons() {
		if r != ReasonTimedOut && r != ReasonShutdown {
			datagrams += c.Drops(r)
		}
		if r.Answered() {
			answered += c.Drops(r)
		}
	}
	if got := c.Fragments.Load() + datagrams; got != c.Received.Load() {
		t.Fatalf("received %d datagrams, but fragments %d + datagram drops %d = %d",
			c.Received.Load(), c.Fragments.Load(), datagrams, got)
	}
	if answered != c.Answered.Load() {
		t.Fatalf("answered %d, but the answered reasons sum to %d", c.Answered.Load(), answered)
	}
	inUse := len(h.tab.slots) - h.tab.freeSize
	if h.tab.Remembered()+inUse > h.tab.Config().MaxLate+h.tab.Config().MaxRequests {
		t.Fatalf("late memory %d + slots in use %d over its room %d", h.tab.Remembered(), inUse,
			h.tab.Config().MaxLate+h.tab.Config().MaxRequests)
	}
}

func TestLateWindowDefaults(t *testing.T) {
	h := newHarness(t, smallConfig())
	c := h.tab.Config()
	if c.LateWindow != DefaultLateFactor*c.Timeout || c.MaxLate != 4096 {
		t.Fatalf("LateWindow %v MaxLate %d; want %v, 4096", c.LateWindow, c.MaxLate, DefaultLateFactor*c.Timeout)
	}
	d := DefaultConfig()
	d.MaxRequests = 1024
	h = newHarness(t, d)
	if c := h.tab.Config(); c.LateWindow != time.Second || c.MaxLate != 65536 {
		t.Fatalf("defaults: LateWindow %v MaxLate %d; want 1s, 65536", c.LateWindow, c.MaxLate)
	}
	// A long reassembly timeout gets 10 s more, not 10 times as long.
	d.Timeout = 2 * time.Minute
	if c := d.withDefaults(); c.LateWindow != 2*time.Minute+10*time.Second {
		t.Fatalf("LateWindow %v for a 2-minute timeout, want 2m10s", c.LateWindow)
	}
	d.Timeout = 1<<63 - 1
	if c := d.withDefaults(); c.LateWindow <= 0 {
		t.Fatalf("LateWindow %v for the longest timeout", c.LateWindow)
	}
	d.MaxLate = -1
	if _, err := New(d, h); err == nil {
		t.Fatal("negative MaxLate accepted")
	}
}

// TestTableFullThenRestOfFragments is issue 13's case: a two-fragment
// request refused overloaded at one fragment while the table is full must
// not be started again by its other fragment once a slot frees (which
// then timed out and was answered a second time).
func TestTableFullThenRestOfFragments(t *testing.T) {
	for _, first := range []int{0, 1} {
		t.Run([]string{"fragment-0-first", "fragment-1-first"}[first], func(t *testing.T) {
			cfg := smallConfig()
			cfg.MaxRequests = 2
			h := newHarness(t, cfg)
			got := answers{}
			for id := uint64(1); id <= 2; id++ {
				h.deliver(frags(t, id, payload(2000, id), 1000)[0], client) // incomplete: fill the table
			}
			ds := frags(t, 3, payload(2000, 3), 1000)
			h.deliver(ds[first], client)
			if len(h.rejects) != 1 || h.rejects[0].status != wire.StatusOverloaded || h.rejects[0].key.id != 3 {
				t.Fatalf("rejects %v, want request 3 overloaded", h.rejects)
			}
			got.take(h)
			// The table frees: requests 1 and 2 time out.
			h.now += int64(cfg.Timeout) + 1
			h.tab.Expire(h.now)
			got.take(h)
			if h.tab.Assembling() != 0 {
				t.Fatalf("%d assembling after the timeout", h.tab.Assembling())
			}
			// The rest of request 3 arrives, with a free slot: dropped.
			h.deliver(ds[1-first], client)
			h.deliver(ds[1-first], client)
			if h.tab.Assembling() != 0 || len(h.rejects) != 0 || len(h.completed) != 0 {
				t.Fatalf("refused request restarted: assembling %d rejects %v completed %d",
					h.tab.Assembling(), h.rejects, len(h.completed))
			}
			h.now += 2 * int64(cfg.Timeout)
			h.tab.Expire(h.now)
			got.take(h)
			got.checkOnce(t)
			if got[key{client.Addr, 9, 3}] != 1 {
				t.Fatal("request 3 not answered")
			}
			c := &h.tab.C
			if c.Drops(ReasonTableFull) != 1 || c.Drops(ReasonAfterFailure) != 2 || c.Drops(ReasonTimedOut) != 2 {
				t.Fatalf("table_full %d after_failure %d timed_out %d; want 1, 2, 2",
					c.Drops(ReasonTableFull), c.Drops(ReasonAfterFailure), c.Drops(ReasonTimedOut))
			}
			checkCounts(t, h)
			h.checkBaseline()
		})
	}
}

// TestTableFullChurnAnswersOnce interleaves many two-fragment requests
// with a table that fills and frees (the hostile test that found ~0.4% of
// requests answered twice): every request gets exactly one answer.
func TestTableFullChurnAnswersOnce(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 8
	h := newHarness(t, cfg)
	got := answers{}
	const n = 2000
	ds := make([][][]byte, n)
	for id := range ds {
		ds[id] = frags(t, uint64(id), payload(2000, uint64(id)), 1000)
	}
	// Request id's fragment 0 goes out at step id, its fragment 1 at step
	// id+gap(id), with gap from 0 to 11 steps: fragment 1 may find the
	// table full or not, whatever fragment 0 found. Every 5th request
	// loses its fragment 1 (it times out or was refused), every 7th sends
	// fragment 1 first. A step is a tenth of the timeout.
	gap := func(id int) int { return (id * 7) % 12 }
	step := int64(cfg.Timeout) / 10
	for s := 0; s < n+12; s++ {
		for id := max(0, s-11); id <= min(s, n-1); id++ {
			f0, f1 := 0, 1
			if id%7 == 0 {
				f0, f1 = 1, 0
			}
			if id == s {
				h.deliver(ds[id][f0], client)
			}
			if s == id+gap(id) && id%5 != 0 {
				h.deliver(ds[id][f1], client)
			}
		}
		got.take(h)
		h.now += step
		h.tab.Expire(h.now)
		got.take(h)
	}
	h.now += 2 * int64(cfg.Timeout)
	h.tab.Expire(h.now)
	got.take(h)
	got.checkOnce(t)
	c := &h.tab.C
	if len(got) != n {
		t.Fatalf("%d of %d requests answered", len(got), n)
	}
	if c.Drops(ReasonTableFull) == 0 || c.Drops(ReasonAfterFailure) == 0 || c.Completed.Load() == 0 {
		t.Fatalf("the table never filled: table_full %d after_failure %d completed %d",
			c.Drops(ReasonTableFull), c.Drops(ReasonAfterFailure), c.Completed.Load())
	}
	if uint64(len(got)) != c.Completed.Load()+c.Answered.Load() {
		t.Fatalf("%d requests answered, but completed %d + answered %d", len(got), c.Completed.Load(), c.Answered.Load())
	}
	checkCounts(t, h)
	h.checkBaseline()
}

// TestStaleDuplicate sends a stale copy of a fragment after its request
// completed, after it expired, and after many other requests (more than
// the old count-based memory held), all within LateWindow: no second
// answer, counted late. After LateWindow the key is forgotten.
func TestStaleDuplicate(t *testing.T) {
	for _, tc := range []struct {
		name   string
		expire bool // the request loses a fragment and times out
		others int  // requests completed in between
	}{
		{"after-completion", false, 0},
		{"after-expiry", true, 0},
		{"after-completion-long", false, 3000},
		{"after-expiry-long", true, 3000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := smallConfig()
			h := newHarness(t, cfg)
			got := answers{}
			ds := frags(t, 1, payload(3000, 1), 1000)
			for i, d := range ds {
				if !tc.expire || i != 1 {
					h.deliver(d, client)
				}
			}
			if tc.expire {
				h.now += int64(cfg.Timeout) + 1
				h.tab.Expire(h.now)
			}
			got.take(h)
			// Other requests pass through every slot many times over,
			// spread across 90% of LateWindow.
			window := int64(cfg.LateWindow)
			if window == 0 {
				window = DefaultLateFactor * int64(cfg.Timeout)
			}
			for id := 2; id < 2+tc.others; id++ {
				h.now += window * 9 / 10 / int64(tc.others)
				for _, d := range frags(t, uint64(id), payload(500, uint64(id)), 1000) {
					h.deliver(d, client)
				}
				got.take(h)
				h.tab.Expire(h.now)
			}
			late := h.tab.C.Drops(ReasonLate)
			for _, d := range ds {
				h.deliver(d, client) // the whole request again, stale
			}
			got.take(h)
			got.checkOnce(t)
			if got[key{client.Addr, 9, 1}] != 1 || h.tab.Assembling() != 0 {
				t.Fatalf("request 1: %d answers, %d assembling", got[key{client.Addr, 9, 1}], h.tab.Assembling())
			}
			if d := h.tab.C.Drops(ReasonLate) - late; d != uint64(len(ds)) {
				t.Fatalf("late drops %d, want %d", d, len(ds))
			}
			checkCounts(t, h)
			// Past LateWindow the key is forgotten: the same id is a new
			// request (the protocol asks clients not to reuse ids).
			h.now += window + 1
			h.tab.Expire(h.now)
			for _, d := range ds {
				h.deliver(d, client)
			}
			if len(h.completed) != 1 {
				t.Fatalf("after LateWindow: completed %d, want 1", len(h.completed))
			}
			h.checkBaseline()
		})
	}
}

// TestRefusedAtFirstFragmentRemembered: requests refused at their first
// fragment without a slot (too large, bad geometry) absorb their other
// fragments for LateWindow, even past the reassembly timeout, and take no
// slot.
func TestRefusedAtFirstFragmentRemembered(t *testing.T) {
	cfg := smallConfig()
	h := newHarness(t, cfg)
	big := wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 2, Request: 3, FragCount: 2, TotalLen: 1 << 30}
	bad := wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 2, Request: 4, FragCount: 3, TotalLen: 2000}
	h.deliver(encodeRaw(big, 1000), client)
	h.deliver(encodeRaw(bad, 1000), client)
	if len(h.rejects) != 2 || h.rejects[0].status != wire.StatusTooLarge || h.rejects[1].status != wire.StatusMalformed {
		t.Fatalf("rejects %v", h.rejects)
	}
	if h.tab.freeSize != cfg.MaxRequests || h.tab.Remembered() != 2 {
		t.Fatalf("refusals took %d slots, %d remembered", cfg.MaxRequests-h.tab.freeSize, h.tab.Remembered())
	}
	h.now += 5 * int64(cfg.Timeout)
	h.tab.Expire(h.now)
	big.FragIndex, big.Offset = 1, 1000
	h.deliver(encodeRaw(big, 1000), client)
	h.deliver(encodeRaw(bad, 1000), client)
	if len(h.rejects) != 2 || h.tab.C.Drops(ReasonAfterFailure) != 2 {
		t.Fatalf("rejects %d after_failure %d; want 2, 2", len(h.rejects), h.tab.C.Drops(ReasonAfterFailure))
	}
	checkCounts(t, h)
	h.checkBaseline()
}

// TestLateMemoryFull fills the late memory to its cap: a new request is
// then dropped unanswered (late_memory_full), never admitted and
// forgotten early, until remembered requests age out.
func TestLateMemoryFull(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 4
	cfg.MaxLate = 6
	cfg.LateWindow = 50 * time.Millisecond
	h := newHarness(t, cfg)
	got := answers{}
	one := func(id uint64) [][]byte { return frags(t, id, payload(1500, id), 1000) }
	// 6 completed requests fill the cap; 3 more hold slots, incomplete.
	for id := uint64(1); id <= 6; id++ {
		for _, d := range one(id) {
			h.deliver(d, client)
		}
		got.take(h)
	}
	h.now += int64(time.Millisecond)
	for id := uint64(7); id <= 9; id++ {
		h.deliver(one(id)[0], client)
	}
	// 6 remembered + 3 slots + 1 = the room of 10: request 10 is admitted,
	// request 11 is not.
	h.deliver(one(10)[0], client)
	if h.tab.Assembling() != 4 {
		t.Fatalf("assembling %d, want 4", h.tab.Assembling())
	}
	for _, d := range one(11) {
		h.deliver(d, client)
	}
	if c := h.tab.C.Drops(ReasonLateMemoryFull); c != 2 || len(h.rejects) != 0 || len(h.completed) != 0 {
		t.Fatalf("late_memory_full %d, rejects %v, completed %d; want 2, none, 0", c, h.rejects, len(h.completed))
	}
	// The incomplete ones time out (answered, and remembered in their
	// reserved places); the memory is still full.
	h.now += int64(cfg.Timeout) + 1
	h.tab.Expire(h.now)
	got.take(h)
	h.deliver(one(12)[0], client)
	if h.tab.C.Drops(ReasonLateMemoryFull) != 3 || h.tab.Remembered() != 10 {
		t.Fatalf("late_memory_full %d remembered %d; want 3, 10", h.tab.C.Drops(ReasonLateMemoryFull), h.tab.Remembered())
	}
	// Stale fragments of every remembered request are still dropped.
	for id := uint64(1); id <= 10; id++ {
		h.deliver(one(id)[1], client)
	}
	if h.tab.C.Drops(ReasonLate) != 10 {
		t.Fatalf("late %d, want 10", h.tab.C.Drops(ReasonLate))
	}
	// Once the first six age out, request 11 gets through, whole.
	h.now = int64(cfg.LateWindow) + 1
	h.tab.Expire(h.now)
	if h.tab.Remembered() != 4 {
		t.Fatalf("remembered %d after the window, want 4", h.tab.Remembered())
	}
	for _, d := range one(11) {
		h.deliver(d, client)
	}
	got.take(h)
	got.checkOnce(t)
	if got[key{client.Addr, 9, 11}] != 1 || got[key{client.Addr, 9, 12}] != 0 || len(got) != 11 {
		t.Fatalf("answers %v", got)
	}
	checkCounts(t, h)
	h.checkBaseline()
}

// TestFloodNeverAnswersTwice floods single-fragment and incomplete
// requests, each sent twice (the copy later), faster than the late memory
// can hold for LateWindow: some are dropped unanswered, none is answered
// twice, the counters add up and the memory stays within its cap.
func TestFloodNeverAnswersTwice(t *testing.T) {
	cfg := smallConfig()
	cfg.MaxRequests = 32
	cfg.MaxLate = 200
	h := newHarness(t, cfg)
	got := answers{}
	sent := map[uint64]bool{}
	for i := uint64(0); i < 5000; i++ {
		id := i
		if i%3 == 2 {
			id = i - 1 // a copy of the previous request
		}
		// even ids are one fragment, odd ones two, of which one is sent
		h.deliver(frags(t, id, payload(500+1000*int(id%2), 1), 1000)[0], client)
		sent[id] = true
		got.take(h)
		h.now += int64(20 * time.Microsecond)
		if i%16 == 0 {
			h.tab.Expire(h.now)
			got.take(h)
			checkCounts(t, h)
		}
	}
	h.now += int64(cfg.Timeout) + 1
	h.tab.Expire(h.now)
	got.take(h)
	got.checkOnce(t)
	c := &h.tab.C
	if c.Drops(ReasonLateMemoryFull) == 0 || c.Drops(ReasonLate) == 0 {
		t.Fatalf("flood too weak: late_memory_full %d late %d", c.Drops(ReasonLateMemoryFull), c.Drops(ReasonLate))
	}
	// Every request sent was answered once or dropped without an answer.
	unanswered := 0
	for id := range sent {
		if got[key{client.Addr, 9, id}] == 0 {
			unanswered++
		}
	}
	if unanswered == 0 || uint64(len(got)) != c.Completed.Load()+c.Answered.Load() {
		t.Fatalf("answered %d (completed %d + answered %d), unanswered %d", len(got), c.Completed.Load(), c.Answered.Load(), unanswered)
	}
	checkCounts(t, h)
	h.checkBaseline()
}

// TestLateMemoryOff: a negative LateWindow keeps nothing, so a replayed
// request is a new one (what dpbench wants).
func TestLateMemoryOff(t *testing.T) {
	cfg := smallConfig()
	cfg.LateWindow = -1
	h := newHarness(t, cfg)
	ds := frags(t, 1, payload(2000, 1), 1000)
	for round := 0; round < 3; round++ {
		for _, d := range ds {
			h.deliver(d, client)
		}
		if len(h.completed) != 1 {
			t.Fatalf("round %d: completed %d", round, len(h.completed))
		}
		h.doneAll()
	}
	if h.tab.Remembered() != 0 || h.tab.C.TotalDrops() != 0 {
		t.Fatalf("remembered %d drops %d", h.tab.Remembered(), h.tab.C.TotalDrops())
	}
	h.checkBaseline()
}

// TestLateKeyIdentity: the late memory tells apart what the slot index
// tells apart (port, flow, id, address family), so one request's memory
// never swallows another's fragments.
func TestLateKeyIdentity(t *testing.T) {
	h := newHarness(t, smallConfig())
	ds := frags(t, 1, payload(500, 1), 1000)
	h.deliver(ds[0], client)
	h.doneAll()
	for _, from := range []string{"10.99.0.2:40001", "10.99.0.3:40000", "[::ffff:10.99.0.2]:40000", "[fd00::2]:40000"} {
		h.deliver(ds[0], dataplane.Endpoint{Addr: netip.MustParseAddrPort(from)})
	}
	other := frags(t, 2, payload(500, 1), 1000) // same sender and flow, other id
	h.deliver(other[0], client)
	if len(h.completed) != 5 || h.tab.C.Drops(ReasonLate) != 0 {
		t.Fatalf("completed %d late %d; want 5, 0", len(h.completed), h.tab.C.Drops(ReasonLate))
	}
	h.doneAll()
	h.deliver(ds[0], client)
	if h.tab.C.Drops(ReasonLate) != 1 {
		t.Fatal("the remembered request's copy was not late")
	}
	h.checkBaseline()
}

// TestLateMemoryRingAndIndex churns a small late memory (an 8-entry ring,
// a 16-slot index, keys crowding few home slots) through many wraparounds
// and checks every lookup against a model: an entry is found exactly while
// it is remembered, with its reason.
func TestLateMemoryRingAndIndex(t *testing.T) {
	var m lateMemory
	const window = 100
	m.init(window, 8)
	type rec struct {
		until int64
		why   uint8
	}
	model := map[uint64]rec{} // by id; one sender, one flow
	var order []uint64        // ids in push order
	hits, fulls := 0, 0
	keyOf := func(id uint64) lateEntry { return lateKeyOf(&client.Addr, 9, id) }
	now := int64(0)
	for step := 0; step < 5000; step++ {
		now += int64(step%7) * int64(1+(step/250)%4) // phases of shorter and longer lives
		m.expire(now)
		for len(order) > 0 && model[order[0]].until <= now {
			delete(model, order[0])
			order = order[1:]
		}
		if m.n != len(order) {
			t.Fatalf("step %d: %d entries, model has %d", step, m.n, len(order))
		}
		// 12 ids at a time, from a set that shifts every 500 steps: the
		// 16-slot index sees many patterns of collision and wraparound
		id := uint64(step*5)%12 + uint64(step/500)*7
		k := keyOf(id)
		pos := m.lookup(&k)
		r, ok := model[id]
		if ok != (pos >= 0) {
			t.Fatalf("step %d: id %d found=%v, remembered=%v", step, id, pos >= 0, ok)
		}
		if ok {
			hits++
			if want := []Reason{ReasonLate, ReasonAfterFailure}[r.why]; m.reason(pos) != want {
				t.Fatalf("step %d: id %d reason %v, want %v", step, id, m.reason(pos), want)
			}
			continue
		}
		if m.room() == 0 {
			fulls++
			continue // full: the table would drop the fragment
		}
		why := uint8(step % 2)
		m.push(k, why, now)
		model[id] = rec{now + window, why}
		order = append(order, id)
	}
	for id := uint64(0); id < 100; id++ {
		k := keyOf(id)
		if _, ok := model[id]; ok != (m.lookup(&k) >= 0) {
			t.Fatalf("end: id %d found=%v, remembered=%v", id, !ok, ok)
		}
	}
	if hits < 500 || fulls < 100 {
		t.Fatalf("weak churn: %d hits, %d times full", hits, fulls)
	}
}

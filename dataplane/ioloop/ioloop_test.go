package ioloop

import (
	"bytes"
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/mem"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// sumSink answers each request with the 64-bit sum of its payload bytes
// followed by the payload reversed, from its own goroutine, as an inference
// function would.
type sumSink struct {
	loop *Loop
	in   chan *Request
	full bool // answer everything overloaded, as a full queue does
}

func (s *sumSink) Deliver(r *Request) {
	if s.full {
		r.Reply(wire.StatusOverloaded, nil, nil)
		return
	}
	s.in <- r
}

func (s *sumSink) run(ctx context.Context, wg *sync.WaitGroup) {
	defer wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.in:
			buf := make([]byte, r.TotalLen)
			if err := r.CopyPayload(buf); err != nil {
				panic(err)
			}
			r.Release()
			var sum uint64
			for _, b := range buf {
				sum += uint64(b)
			}
			out := make([]byte, 8+len(buf))
			binary.BigEndian.PutUint64(out, sum)
			for i, b := range buf {
				out[len(out)-1-i] = b
			}
			r.Reply(wire.StatusOK, out, nil)
		}
	}
}

type collector struct {
	mu   sync.Mutex
	msgs map[uint64][][]byte
}

func (c *collector) onTx(to dataplane.Endpoint, d []byte) {
	var h wire.Header
	if err := wire.Decode(d, &h); err != nil {
		panic(err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs[h.Request] = append(c.msgs[h.Request], append([]byte(nil), d...))
}

// response reassembles the response to request id, if complete.
func (c *collector) response(t *testing.T, id uint64) (wire.Status, []byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ds := c.msgs[id]
	if len(ds) == 0 {
		return 0, nil, false
	}
	var h wire.Header
	_ = wire.Decode(ds[0], &h)
	if len(ds) != int(h.FragCount) {
		return 0, nil, false
	}
	out := make([]byte, h.TotalLen)
	for _, d := range ds {
		_ = wire.Decode(d, &h)
		copy(out[h.Offset:], d[wire.HeaderLen:])
	}
	return h.Status, out, true
}

func setup(t *testing.T, bufs int, full bool) (*mem.Port, *Loop, *sumSink, *collector, context.CancelFunc, chan error) {
	sink := &sumSink{in: make(chan *Request, 1024), full: full}
	port, loop, col := newLoop(t, bufs, DefaultConfig(), sink)
	sink.loop = loop
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go sink.run(ctx, &wg)
	errc := make(chan error, 1)
	lctx, lcancel := context.WithCancel(context.Background())
	go func() { errc <- loop.Run(lctx) }()
	stop := func() {
		lcancel()
		if err := <-errc; err != nil {
			t.Errorf("loop: %v", err)
		}
		cancel()
		wg.Wait()
	}
	return port, loop, sink, col, stop, errc
}

// newLoop is a loop (not running) on a mem port of bufs buffers whose
// sent datagrams a collector keeps, answering through 1000-byte response
// fragments, with a reassembly table that times requests out after 20 ms.
func newLoop(t *testing.T, bufs int, cfg Config, sink Sink) (*mem.Port, *Loop, *collector) {
	t.Helper()
	col := &collector{msgs: map[uint64][][]byte{}}
	port, err := mem.New(mem.Config{Buffers: bufs, BufSize: 2048, OnTx: col.onTx})
	if err != nil {
		t.Fatal(err)
	}
	ecfg := egress.DefaultConfig()
	ecfg.FragSize = 1000
	out, err := egress.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	loop, err := New(cfg, port, out, sink, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxHeldFragments = bufs - 100
	rc.Timeout = 20 * time.Millisecond
	if _, err := loop.NewTable(rc); err != nil {
		t.Fatal(err)
	}
	return port, loop, col
}

func TestLoopEndToEnd(t *testing.T) {
	port, loop, _, col, stop, _ := setup(t, 4096, false)
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	want := map[uint64][]byte{}
	for id := uint64(1); id <= 200; id++ {
		p := make([]byte, 500+int(id)*37)
		for i := range p {
			p[i] = byte(int(id) * i)
		}
		want[id] = p
		ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: id}, p, 900)
		for _, d := range ds {
			for port.Inject(d, from) == mem.ErrPoolEmpty {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	// one request with a lost fragment: answered timed_out
	ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: 999}, make([]byte, 5000), 900)
	for _, d := range ds[1:] {
		_ = port.Inject(d, from)
	}
	deadline := time.Now().Add(10 * time.Second)
	for id := uint64(1); id <= 200; id++ {
		for {
			st, out, ok := col.response(t, id)
			if ok {
				if st != wire.StatusOK {
					t.Fatalf("request %d: status %v", id, st)
				}
				p := want[id]
				var sum uint64
				for _, b := range p {
					sum += uint64(b)
				}
				if binary.BigEndian.Uint64(out) != sum || len(out) != 8+len(p) || out[8] != p[len(p)-1] {
					t.Fatalf("request %d: wrong result", id)
				}
				rev := make([]byte, len(p))
				for i, b := range p {
					rev[len(p)-1-i] = b
				}
				if !bytes.Equal(out[8:], rev) {
					t.Fatalf("request %d: wrong payload echo", id)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d: no response", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for {
		if st, _, ok := col.response(t, 999); ok {
			if st != wire.StatusTimedOut {
				t.Fatalf("incomplete request answered %v", st)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("incomplete request never answered")
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if s := port.Stats(); s.BufInUse != 0 {
		t.Fatalf("%d buffers still in use after the loop stopped", s.BufInUse)
	}
	if port.BadReleases() != 0 {
		t.Fatalf("%d bad releases", port.BadReleases())
	}
	c := &loop.Table().C
	if c.Completed.Load() != 200 || c.Released.Load() != 200 || c.Drops(reasm.ReasonTimedOut) != 1 {
		t.Fatalf("completed %d released %d timed_out %d", c.Completed.Load(), c.Released.Load(), c.Drops(reasm.ReasonTimedOut))
	}
}

func TestLoopShutdownAnswersEverything(t *testing.T) {
	port, _, _, col, stop, _ := setup(t, 1024, false)
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: 1}, make([]byte, 3000), 1000)
	_ = port.Inject(ds[0], from) // stays incomplete
	ds2, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: 2}, make([]byte, 3000), 1000)
	for _, d := range ds2 {
		_ = port.Inject(d, from)
	}
	time.Sleep(5 * time.Millisecond)
	stop()
	// The drain keeps the port open for DrainQuiet, longer than this
	// table's 20 ms timeout: the incomplete request may time out first.
	if st, _, ok := col.response(t, 1); !ok || (st != wire.StatusShuttingDown && st != wire.StatusTimedOut) {
		t.Fatalf("incomplete request: ok=%v status=%v", ok, st)
	}
	if st, _, ok := col.response(t, 2); !ok || st != wire.StatusOK {
		t.Fatalf("complete request: ok=%v status=%v", ok, st)
	}
	if port.Stats().BufInUse != 0 {
		t.Fatal("buffers leaked")
	}
}

func TestLoopOverloadAnswered(t *testing.T) {
	port, loop, _, col, stop, _ := setup(t, 1024, true)
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	for id := uint64(1); id <= 50; id++ {
		ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: id}, make([]byte, 1500), 1000)
		for _, d := range ds {
			for port.Inject(d, from) == mem.ErrPoolEmpty {
				time.Sleep(100 * time.Microsecond)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for id := uint64(1); id <= 50; id++ {
		for {
			if st, _, ok := col.response(t, id); ok {
				if st != wire.StatusOverloaded {
					t.Fatalf("request %d answered %v", id, st)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("request %d unanswered", id)
			}
			time.Sleep(time.Millisecond)
		}
	}
	stop()
	if port.Stats().BufInUse != 0 || loop.Table().C.Released.Load() != 50 {
		t.Fatal("buffers or requests leaked under overload")
	}
}

func TestNewTableChecksBufferBudget(t *testing.T) {
	port, _ := mem.New(mem.Config{Buffers: 100, BufSize: 2048})
	out, _ := egress.New(egress.DefaultConfig())
	loop, err := New(DefaultConfig(), port, out, &sumSink{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := reasm.DefaultConfig()
	rc.MaxHeldFragments = 100
	if _, err := loop.NewTable(rc); err == nil {
		t.Fatal("a table that can hold every driver buffer was accepted")
	}
}

// drainSink answers every request at once, ok, unless it is draining:
// then shutting_down (as the IF router does).
type drainSink struct {
	draining atomic.Bool
	set      atomic.Int32
}

func (s *drainSink) SetDraining(on bool) { s.draining.Store(on); s.set.Add(1) }

func (s *drainSink) Deliver(r *Request) {
	if s.draining.Load() {
		r.Reply(wire.StatusShuttingDown, nil, nil)
		return
	}
	r.Reply(wire.StatusOK, []byte{1, 2, 3, 4}, nil)
}

// A drain admits the port's backlog first: requests whose packets had
// reached the port before the drain began are served, however late the
// loop reads them; a request that arrives after that is refused. The
// loop here never ran before its drain: the whole backlog is unread.
func TestDrainServesBacklog(t *testing.T) {
	sink := &drainSink{}
	cfg := DefaultConfig()
	cfg.DrainQuiet, cfg.DrainTimeout = time.Millisecond, 5*time.Second
	port, loop, col := newLoop(t, 1024, cfg, sink)
	from := dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:7000")}
	const n = 20
	for id := uint64(1); id <= n; id++ {
		ds, _ := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Model: 1, Flow: 4, Request: id}, make([]byte, 3000), 1000)
		for _, d := range ds {
			if err := port.Inject(d, from); err != nil {
				t.Fatal(err)
			}
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Run goes straight to its drain
	if err := loop.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for id := uint64(1); id <= n; id++ {
		if st, _, ok := col.response(t, id); !ok || st != wire.StatusOK {
			t.Fatalf("request %d, in the port before the drain: ok=%v status=%v", id, ok, st)
		}
	}
	if sink.set.Load() != 1 || !sink.draining.Load() {
		t.Fatalf("the sink was set draining %d times (draining now: %v)", sink.set.Load(), sink.draining.Load())
	}
	if port.Stats().BufInUse != 0 {
		t.Fatal("buffers leaked")
	}
}

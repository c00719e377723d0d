package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"sluice/dataplane/pace"
	"sluice/dataplane/wire"
)

// maxResponse caps the output a response may announce; a larger total_len
// is counted as a bad fragment rather than allocated.
const maxResponse = 64 << 20

// config is one run's settings: the command line, parsed.
type config struct {
	Target   string
	Bind     string
	Duration time.Duration
	Timeout  time.Duration
	FragSize int
	Frames   int
	Seed     uint64
	// Flow is the first stream's flow id; stream i uses Flow+i. Zero picks
	// one at random.
	Flow       uint32
	JSONPath   string
	PlotPath   string
	MetricsURL string
	Streams    []streamSpec
	// SLO, when > 0, is the latency target the report and the plot
	// measure against (-slo).
	SLO time.Duration
	// MaxLoss and MaxErrors, when >= 0, are the largest fractions of the
	// requests sent that may be lost, or answered with an error or a wrong
	// output, before framecast exits with status 3.
	MaxLoss, MaxErrors float64
	// Pace caps the rate datagrams leave at, bytes per second over every
	// stream (bursts of pace.DefaultBurst go at once); 0: as fast as the
	// socket takes them.
	Pace float64
}

// pending is a request awaiting its response, and the response's
// fragments as they arrive.
type pending struct {
	id    uint64
	frame int
	sent  time.Time

	started bool        // a fragment has arrived
	h       wire.Header // the first fragment's header
	s       uint32      // the response's fragment size
	got     []bool      // fragments received, by index
	n       int         // how many
	data    []byte      // the reassembled output
}

// streamState is one stream's frames, schedule and results. Everything
// but the immutable setup is guarded by client.mu.
type streamState struct {
	spec     streamSpec
	flow     uint32
	frames   [][]byte
	dgrams   [][][]byte // per frame: its encoded request datagrams
	arrivals arrivalGen // open loop
	slots    chan struct{}

	nextID  uint64 // the last request id sent
	pending map[uint64]*pending
	order   []uint64 // ids in sending order, for expiry
	head    int      // order[:head] are finished

	done, expired, dupSeen, lateSeen bitset
	unknownSeen                      map[uint64]bool
	expectSize                       int            // output size; -1 until the first ok response
	refs                             map[int][]byte // frame → first ok output

	c      *Row      // counters
	recent []float64 // latencies since the last progress line, ms
}

// client runs the streams over one UDP socket.
type client struct {
	cfg    config
	conn   *net.UDPConn
	target netip.AddrPort
	start  time.Time
	pacer  *pace.Pacer // nil: not paced

	mu       sync.Mutex
	streams  []*streamState
	inFlight int
	// maxInFlight is the most requests outstanding at once, all streams.
	maxInFlight int
	foreign     int // responses from another address or on flows not ours
	garbage     int // datagrams that are not sluice responses
}

// newClient resolves the target, prepares every stream's frames and
// datagrams, and opens the socket.
func newClient(cfg config) (*client, error) {
	ua, err := net.ResolveUDPAddr("udp", cfg.Target)
	if err != nil {
		return nil, fmt.Errorf("target %q: %w", cfg.Target, err)
	}
	c := &client{cfg: cfg, target: ua.AddrPort()}
	if cfg.Pace > 0 {
		c.pacer = pace.New(cfg.Pace, 0)
	}
	c.target = netip.AddrPortFrom(c.target.Addr().Unmap(), c.target.Port())
	if cfg.Flow == 0 {
		c.cfg.Flow = rand.Uint32() | 1
	}
	traces, err := traceTimes(cfg.Streams)
	if err != nil {
		return nil, err
	}
	for i, s := range cfg.Streams {
		st, err := c.newStream(i, s, traces[i])
		if err != nil {
			return nil, err
		}
		c.streams = append(c.streams, st)
	}
	if c.conn, err = listen(cfg.Bind, c.target); err != nil {
		return nil, err
	}
	return c, nil
}

// newStream sets up stream i.
func (c *client) newStream(i int, s streamSpec, trace []time.Duration) (*streamState, error) {
	seed := c.cfg.Seed*1000003 + uint64(i)
	frames, err := streamFrames(s, c.cfg.Frames, seed)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", s.Name, err)
	}
	st := &streamState{spec: s, flow: c.cfg.Flow + uint32(i), frames: frames,
		pending: map[uint64]*pending{}, unknownSeen: map[uint64]bool{}, expectSize: -1,
		refs: map[int][]byte{}, c: newRow(s.Name, s.Class)}
	spec := s
	st.c.Spec, st.c.Flow = &spec, st.flow
	h := wire.Header{Kind: wire.KindRequest, Model: s.Model, Flow: st.flow}
	if s.Class == "rt" {
		h.Flags |= wire.FlagRT
	}
	if s.DeadlineMS > 0 {
		h.Flags |= wire.FlagDeadline
		h.DeadlineUS = uint32(s.DeadlineMS * 1000)
	}
	for _, f := range frames {
		ds, err := wire.Datagrams(h, f, c.cfg.FragSize)
		if err != nil {
			return nil, fmt.Errorf("stream %s: %w", s.Name, err)
		}
		st.dgrams = append(st.dgrams, ds)
	}
	if s.Loop == loopClosed {
		st.slots = make(chan struct{}, s.Concurrency)
		for range s.Concurrency {
			st.slots <- struct{}{}
		}
	} else {
		st.arrivals = newArrivals(s, rand.New(rand.NewPCG(seed, 0xa11)), trace)
	}
	return st, nil
}

// listen opens the client's socket, in the target's address family.
func listen(bind string, target netip.AddrPort) (*net.UDPConn, error) {
	network := "udp4"
	if target.Addr().Is6() {
		network = "udp6"
	}
	var la *net.UDPAddr
	if bind != "" {
		var err error
		if la, err = net.ResolveUDPAddr(network, bind); err != nil {
			return nil, fmt.Errorf("bind %q: %w", bind, err)
		}
	}
	conn, err := net.ListenUDP(network, la)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	_ = conn.SetReadBuffer(16 << 20)
	_ = conn.SetWriteBuffer(16 << 20)
	return conn, nil
}

// sweepEvery is how often requests are checked for their timeout.
func (c *client) sweepEvery() time.Duration {
	return max(time.Millisecond, min(10*time.Millisecond, c.cfg.Timeout/10))
}

// runStreams sends for the run's duration (or until ctx ends, or every
// stream's arrivals run out), waits for the last responses (at most
// -timeout), and stops every goroutine it started. It returns the send
// window that rates are computed over.
func (c *client) runStreams(ctx context.Context, progress *progressOut) time.Duration {
	c.mu.Lock()
	c.start = time.Now()
	c.mu.Unlock()
	sendCtx, cancel := context.WithDeadline(ctx, c.start.Add(c.cfg.Duration))
	defer cancel()

	recvDone := make(chan struct{})
	go func() {
		defer close(recvDone)
		c.receive()
	}()
	stopAux := make(chan struct{})
	var aux sync.WaitGroup
	aux.Go(func() { c.sweep(stopAux) })
	if progress != nil {
		aux.Go(func() { c.progress(stopAux, *progress) })
	}
	var senders sync.WaitGroup
	for _, st := range c.streams {
		senders.Go(func() { c.send(sendCtx, st) })
	}
	senders.Wait()
	// Rates are per -duration even when a stream's arrivals ran out
	// early; an interrupted run counts the time it sent.
	sending := c.cfg.Duration
	if ctx.Err() != nil {
		sending = min(time.Since(c.start), c.cfg.Duration)
	}
	c.drain(time.Now().Add(c.cfg.Timeout + 2*c.sweepEvery()))
	close(stopAux)
	aux.Wait()
	c.conn.Close()
	<-recvDone
	c.expireAll()
	return sending
}

// drain waits until every request is answered or expired, or until
// deadline.
func (c *client) drain(deadline time.Time) {
	for time.Now().Before(deadline) {
		c.mu.Lock()
		n := c.inFlight
		c.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// send runs one stream's sender until ctx ends or its arrivals run out.
func (c *client) send(ctx context.Context, st *streamState) {
	if st.slots != nil {
		c.sendClosed(ctx, st)
		return
	}
	c.sendOpen(ctx, st)
}

// sendOpen sends at the arrival process's times, whatever is outstanding.
// A sender that falls behind schedule sends at once until it catches up.
func (c *client) sendOpen(ctx context.Context, st *streamState) {
	end, _ := ctx.Deadline()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		off, ok := st.arrivals.next()
		if !ok {
			return
		}
		at := c.start.Add(off)
		if !at.Before(end) {
			return
		}
		if d := time.Until(at); d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		}
		if ctx.Err() != nil {
			return
		}
		c.sendOne(st)
	}
}

// sendClosed keeps spec.Concurrency requests outstanding: each send takes
// a slot, and a response or a timeout gives it back.
func (c *client) sendClosed(ctx context.Context, st *streamState) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.slots:
		}
		if ctx.Err() != nil {
			return
		}
		c.sendOne(st)
	}
}

// sendOne registers the stream's next request and sends its datagrams.
func (c *client) sendOne(st *streamState) {
	c.mu.Lock()
	st.nextID++
	id := st.nextID
	p := &pending{id: id, frame: int((id - 1) % uint64(len(st.frames))), sent: time.Now()}
	st.pending[id] = p
	st.order = append(st.order, id)
	st.c.Sent++
	st.c.MaxInFlight = max(st.c.MaxInFlight, len(st.pending))
	c.inFlight++
	c.maxInFlight = max(c.maxInFlight, c.inFlight)
	c.mu.Unlock()
	// Only this goroutine touches the stream's datagrams, and the kernel
	// copies each one, so the request id is patched in place.
	for _, d := range st.dgrams[p.frame] {
		binary.BigEndian.PutUint64(d[12:20], id)
		c.pacer.Wait(len(d))
		if _, err := c.conn.WriteToUDPAddrPort(d, c.target); err != nil {
			c.sendFailed(st, id, err)
			return
		}
	}
}

// sendFailed ends a request whose datagrams could not all be sent.
func (c *client) sendFailed(st *streamState, id uint64, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := st.pending[id]; p != nil {
		c.finished(st, p)
		st.c.Errors["send_failed"]++
		st.c.SendError = err.Error()
	}
}

// finished removes a request from the pending set, marks it done and
// frees its closed-loop slot. c.mu is held.
func (c *client) finished(st *streamState, p *pending) {
	delete(st.pending, p.id)
	st.done.set(p.id)
	c.inFlight--
	if st.slots != nil {
		select {
		case st.slots <- struct{}{}:
		default:
		}
	}
}

// lose counts a request unanswered within the timeout as lost. c.mu is
// held.
func (c *client) lose(st *streamState, p *pending) {
	c.finished(st, p)
	st.done.clear(p.id)
	st.expired.set(p.id)
	st.c.Lost++
}

// sweep expires requests past their timeout until stop is closed.
func (c *client) sweep(stop <-chan struct{}) {
	t := time.NewTicker(c.sweepEvery())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			c.expire(now)
		}
	}
}

// expire counts as lost every request sent more than -timeout before now.
func (c *client) expire(now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.streams {
		for st.head < len(st.order) {
			p := st.pending[st.order[st.head]]
			if p != nil {
				if now.Sub(p.sent) < c.cfg.Timeout {
					break
				}
				c.lose(st, p)
			}
			st.head++
		}
		if st.head > 4096 && 2*st.head > len(st.order) {
			st.order = append(st.order[:0], st.order[st.head:]...)
			st.head = 0
		}
	}
}

// expireAll counts every request still pending as lost.
func (c *client) expireAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, st := range c.streams {
		for _, p := range st.pending {
			c.lose(st, p)
		}
	}
}

// receive reads responses until the socket is closed.
func (c *client) receive() {
	buf := make([]byte, 65536)
	for {
		n, from, err := c.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. an ICMP error reported on the socket
		}
		c.handle(buf[:n], from, time.Now())
	}
}

// bitset is a growable set of request ids.
type bitset []uint64

func (b *bitset) set(i uint64) {
	w := int(i / 64)
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b)+len(*b)/2)...)
	}
	(*b)[w] |= 1 << (i % 64)
}

func (b bitset) clear(i uint64) {
	if w := int(i / 64); w < len(b) {
		b[w] &^= 1 << (i % 64)
	}
}

func (b bitset) has(i uint64) bool {
	w := int(i / 64)
	return w < len(b) && b[w]&(1<<(i%64)) != 0
}

// Package egress sends responses back to their senders through the port
// they came in on: it fragments each response into datagrams and transmits
// them in bursts from the port's I/O loop.
//
// Producers queue responses with Send or SendWait from any goroutine; the
// I/O loop calls Flush. The I/O loop's own responses (the replies of
// ioloop's request handles, which have a slot reserved from admission on)
// skip the queue: SendNow transmits them at once.
package egress

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// Config sizes the egress queue.
type Config struct {
	// FragSize is the output bytes per response datagram; it must fit the
	// port's MTU (wire.DefaultFragSize for 1500-byte Ethernet).
	FragSize int
	// QueueLen is how many responses may wait for the I/O loop.
	QueueLen int
	// Burst is the most datagrams handed to one TxBurst call.
	Burst int
	// Retries is how many times a datagram the driver refused is offered
	// again before it is counted as failed.
	Retries int
	// OnSent, when set, is called on the I/O loop for every response
	// about to be handed to the driver, with the time it is (dataplane.Now
	// clock): the "sent" timestamp of the request's life, to set against
	// Response.ArrivedNS. It runs just before the burst that carries the
	// response's last datagram, so a client that holds the whole response
	// always finds it counted. It must not block.
	OnSent func(r *Response, sentNS int64)
}

// DefaultConfig returns the defaults for a 1500-byte MTU.
func DefaultConfig() Config {
	return Config{FragSize: wire.DefaultFragSize, QueueLen: 4096, Burst: 32, Retries: 3}
}

// Response is one answer to one request.
type Response struct {
	To     dataplane.Endpoint
	Model  uint16
	Flow   uint32
	ID     uint64
	Flags  uint8
	Status wire.Status
	// Output is the result (nil for errors). It must stay unchanged until
	// Sent is called.
	Output []byte
	// Sent, when set, is called on the I/O loop once Output has been copied
	// to the wire or dropped, so its owner can reuse the buffer.
	Sent func(output []byte)
	// ArrivedNS is when the request's first fragment arrived
	// (dataplane.Now clock; 0: unknown), for Config.OnSent.
	ArrivedNS int64
	// QueuedNS is when the response was queued (dataplane.Now clock), for
	// Counters.WaitNS: Send and SendWait set it; a caller of SendNow sets
	// it itself.
	QueuedNS int64
}

// ErrFull is returned by Send when the queue is full.
var ErrFull = errors.New("egress: queue full")

// Counters are egress's cumulative counts.
type Counters struct {
	Responses atomic.Uint64 // responses fully handed to the driver
	Datagrams atomic.Uint64 // datagrams handed to the driver
	QueueFull atomic.Uint64 // responses refused by Send because the queue was full
	TxFailed  atomic.Uint64 // datagrams the driver refused after all retries
	ByStatus  [16]atomic.Uint64
	// WaitNS sums, over responses sent, the time from being queued to
	// being handed to the driver: the "sent" stage of a request's
	// timestamps.
	WaitNS atomic.Uint64
}

// Egress is the response path of one port.
type Egress struct {
	cfg Config
	C   Counters

	mu      sync.Mutex
	notFull *sync.Cond
	ring    []Response
	head, n int
	closed  bool

	// owned by the I/O loop
	work []Response
	dgs  []dataplane.Datagram
	sent []int // indices into work whose datagrams are all in dgs
	// notify is called after a response is queued (SetNotify).
	notify atomic.Pointer[func()]
}

// New makes an Egress.
func New(cfg Config) (*Egress, error) {
	if cfg.FragSize <= 0 || cfg.FragSize > wire.MaxPayload {
		return nil, fmt.Errorf("egress: FragSize %d out of range 1..%d", cfg.FragSize, wire.MaxPayload)
	}
	if cfg.QueueLen <= 0 || cfg.Burst <= 0 || cfg.Retries < 0 {
		return nil, fmt.Errorf("egress: need QueueLen > 0, Burst > 0, Retries >= 0")
	}
	e := &Egress{
		cfg:  cfg,
		ring: make([]Response, cfg.QueueLen),
		work: make([]Response, 0, cfg.QueueLen),
		dgs:  make([]dataplane.Datagram, 0, cfg.Burst),
		sent: make([]int, 0, cfg.QueueLen),
	}
	e.notFull = sync.NewCond(&e.mu)
	return e, nil
}

// SetNotify registers fn, called after each response is queued, outside
// the queue's lock: the I/O loop's wake-up (ioloop.New registers it). fn
// must not block.
func (e *Egress) SetNotify(fn func()) { e.notify.Store(&fn) }

// notified runs the SetNotify callback, if any.
func (e *Egress) notified() {
	if fn := e.notify.Load(); fn != nil && *fn != nil {
		(*fn)()
	}
}

// Send queues r without blocking; it returns ErrFull when the queue is full.
func (e *Egress) Send(r *Response) error {
	if !e.tryPush(r) {
		e.C.QueueFull.Add(1)
		return ErrFull
	}
	return nil
}

// TrySend queues r if there is room, without counting a refusal: for
// callers that fall back to SendWait.
func (e *Egress) TrySend(r *Response) bool { return e.tryPush(r) }

// tryPush queues r if there is room and the egress is open.
func (e *Egress) tryPush(r *Response) bool {
	e.mu.Lock()
	ok := e.n < len(e.ring) && !e.closed
	if ok {
		e.push(r)
	}
	e.mu.Unlock()
	if ok {
		e.notified()
	}
	return ok
}

// SendWait queues r, waiting for room until ctx is done.
func (e *Egress) SendWait(ctx context.Context, r *Response) error {
	if err := e.sendWait(ctx, r); err != nil {
		return err
	}
	e.notified()
	return nil
}

func (e *Egress) sendWait(ctx context.Context, r *Response) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == len(e.ring) {
		stop := context.AfterFunc(ctx, func() {
			e.mu.Lock()
			e.notFull.Broadcast()
			e.mu.Unlock()
		})
		defer stop()
		for e.n == len(e.ring) && !e.closed {
			if err := ctx.Err(); err != nil {
				e.C.QueueFull.Add(1)
				return fmt.Errorf("egress: %w", err)
			}
			e.notFull.Wait()
		}
	}
	if e.closed {
		e.C.QueueFull.Add(1)
		return ErrFull
	}
	e.push(r)
	return nil
}

func (e *Egress) push(r *Response) {
	slot := &e.ring[(e.head+e.n)%len(e.ring)]
	*slot = *r
	slot.QueuedNS = dataplane.Now()
	e.n++
}

// Pending is the number of responses waiting for Flush.
func (e *Egress) Pending() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// Close makes further Sends fail and wakes waiting senders.
func (e *Egress) Close() {
	e.mu.Lock()
	e.closed = true
	e.notFull.Broadcast()
	e.mu.Unlock()
}

// Flush transmits every queued response through port and returns how many
// responses it finished. It is called from the port's I/O loop only.
func (e *Egress) Flush(port dataplane.Port) int {
	e.mu.Lock()
	for e.n > 0 {
		e.work = append(e.work, e.ring[e.head])
		e.ring[e.head] = Response{}
		e.head = (e.head + 1) % len(e.ring)
		e.n--
	}
	if len(e.work) > 0 {
		e.notFull.Broadcast()
	}
	e.mu.Unlock()
	if len(e.work) == 0 {
		return 0
	}
	done := e.SendNow(port, e.work)
	clear(e.work)
	e.work = e.work[:0]
	return done
}

// SendNow transmits rs through port at once, as Flush transmits the
// queued responses, and returns how many it finished (all of them). It is
// called from the port's I/O loop only; rs may be reused when it returns.
func (e *Egress) SendNow(port dataplane.Port, rs []Response) int {
	var h wire.Header
	for i := range rs {
		r := &rs[i]
		h = wire.Header{Kind: wire.KindResponse, Flags: r.Flags &^ wire.FlagDeadline, Status: r.Status,
			Model: r.Model, Flow: r.Flow, Request: r.ID, TotalLen: uint32(len(r.Output))}
		if r.Status != wire.StatusOK {
			h.TotalLen = 0
		}
		count := 1
		if h.TotalLen > 0 {
			count = (int(h.TotalLen) + e.cfg.FragSize - 1) / e.cfg.FragSize
		}
		for f := 0; f < count; f++ {
			h.SetFragment(f, e.cfg.FragSize)
			e.dgs = append(e.dgs, dataplane.Datagram{To: r.To})
			d := &e.dgs[len(e.dgs)-1]
			wire.Encode(d.Header[:], &h)
			if h.PayloadLen > 0 {
				d.Payload = r.Output[h.Offset : h.Offset+uint32(h.PayloadLen)]
			}
			if len(e.dgs) == cap(e.dgs) {
				e.transmit(port, rs)
			}
		}
		e.sent = append(e.sent, i)
		e.C.ByStatus[r.Status&15].Add(1)
	}
	e.transmit(port, rs)
	return len(rs)
}

// transmit counts the responses whose last datagram is in dgs (indices
// into rs in e.sent), sends the datagrams, retrying refusals, then tells
// the owners of those responses. Counting comes first so that a response
// is in the counters and metrics before a client can hold it.
func (e *Egress) transmit(port dataplane.Port, rs []Response) {
	now := dataplane.Now()
	for _, i := range e.sent {
		r := &rs[i]
		e.C.Responses.Add(1)
		e.C.WaitNS.Add(uint64(now - r.QueuedNS))
		if e.cfg.OnSent != nil {
			e.cfg.OnSent(r, now)
		}
	}
	pending := e.dgs
	for try := 0; len(pending) > 0 && try <= e.cfg.Retries; try++ {
		n, err := port.TxBurst(pending)
		if n < 0 {
			n = 0
		}
		e.C.Datagrams.Add(uint64(n))
		pending = pending[n:]
		if err != nil {
			break
		}
	}
	if len(pending) > 0 {
		e.C.TxFailed.Add(uint64(len(pending)))
	}
	clear(e.dgs)
	e.dgs = e.dgs[:0]
	for _, i := range e.sent {
		if r := &rs[i]; r.Sent != nil {
			r.Sent(r.Output)
		}
	}
	e.sent = e.sent[:0]
}

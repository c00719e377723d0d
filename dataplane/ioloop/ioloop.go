// Package ioloop runs one port's receive, reassembly and transmit loop:
// bursts in, fragments into the reassembly table, completed requests to a
// sink as request handles (Request: payload views, Release, Reply),
// released buffers back to the driver in bulk, responses out in bursts.
// It is the only goroutine that touches the port and the table.
package ioloop

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// Sink receives completed requests on the I/O loop's goroutine. Deliver
// must not block: a sink that cannot take a request answers it at once
// (r.Reply with wire.StatusOverloaded, say).
type Sink interface {
	Deliver(r *Request)
}

// Config tunes a Loop.
type Config struct {
	// Burst is the receive burst size.
	Burst int
	// Spin is how many empty polls a poll-mode port gets before the loop
	// starts sleeping; IdleSleep is the longest sleep.
	Spin      int
	IdleSleep time.Duration
	// IdleWait is how long one Wait of a kernel-socket port (a
	// dataplane.Waiter) may block; a queued response cuts it short when
	// the port is a dataplane.Waker, and otherwise it is IdleSleep.
	IdleWait time.Duration
	// DrainTimeout bounds how long Run waits, after its context ends, for
	// outstanding requests to be given back and their responses sent.
	DrainTimeout time.Duration
	// DrainQuiet is how long the port must stay silent, once its context
	// ended, before the loop stops receiving.
	DrainQuiet time.Duration
	// Replies is the number of request handles, each a reply slot: the
	// most requests delivered and not yet answered and sent. 0 means
	// twice the reassembly table's MaxRequests (a request holds a table
	// slot until its consumer releases its payload, then only its handle).
	Replies int
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{Burst: 32, Spin: 2000, IdleSleep: 200 * time.Microsecond, IdleWait: time.Millisecond, DrainTimeout: 5 * time.Second,
		DrainQuiet: 50 * time.Millisecond}
}

// Loop is one port's I/O loop.
type Loop struct {
	cfg    Config
	port   dataplane.Port
	table  *reasm.Table
	out    *egress.Egress
	sink   Sink
	log    *slog.Logger
	pkts   []dataplane.Packet
	reject egress.Response
	// sleeping is set while the loop waits for the port or sleeps; a
	// response queued then wakes it (wake), through the port's Waker or
	// wakeCh.
	sleeping atomic.Bool
	waker    dataplane.Waker
	wakeCh   chan struct{}
	// Wakes counts wake-ups by queued responses.
	Wakes atomic.Uint64
	// C counts request handles.
	C Counters

	// request handles (request.go): free is the loop's stack of free
	// handles, ready the replies waiting to be sent, replies the batch
	// handed to egress; inUse counts handles not free
	reqs    []Request
	free    []int32
	ready   chan int32
	replies []egress.Response
	inUse   int
}

// New wires a loop. The table must have been made with the loop as its
// handler: use NewTable.
func New(cfg Config, port dataplane.Port, out *egress.Egress, sink Sink, log *slog.Logger) (*Loop, error) {
	if cfg.Burst <= 0 {
		return nil, errors.New("ioloop: Burst must be positive")
	}
	if port == nil || out == nil || sink == nil {
		return nil, errors.New("ioloop: port, egress and sink are required")
	}
	if log == nil {
		log = slog.Default()
	}
	l := &Loop{cfg: cfg, port: port, out: out, sink: sink, log: log,
		pkts: make([]dataplane.Packet, cfg.Burst), wakeCh: make(chan struct{}, 1)}
	l.waker, _ = port.(dataplane.Waker)
	out.SetNotify(l.wake)
	return l, nil
}

// wake is the egress's notification: a response was queued. A loop asleep
// (in the port's Wait or its idle sleep) gets up to send it rather than
// leave it until the next datagram or the end of the sleep.
func (l *Loop) wake() {
	if !l.sleeping.CompareAndSwap(true, false) {
		return
	}
	l.Wakes.Add(1)
	if l.waker != nil {
		l.waker.Wake()
	}
	select {
	case l.wakeCh <- struct{}{}:
	default:
	}
}

// NewTable makes the loop's reassembly table, checking that its fragment
// cap leaves the driver buffers to keep receiving.
func (l *Loop) NewTable(cfg reasm.Config) (*reasm.Table, error) {
	if c := l.port.Stats().BufCapacity; c > 0 && uint64(cfg.MaxHeldFragments)+uint64(2*l.cfg.Burst) > c {
		return nil, fmt.Errorf("ioloop: reassembly may hold %d fragments but the port has only %d buffers (need %d spare for bursts)",
			cfg.MaxHeldFragments, c, 2*l.cfg.Burst)
	}
	t, err := reasm.New(cfg, l)
	if err != nil {
		return nil, fmt.Errorf("ioloop: %w", err)
	}
	n := l.cfg.Replies
	if n <= 0 {
		n = 2 * cfg.MaxRequests
	}
	l.table = t
	l.initHandles(n)
	return t, nil
}

// Table returns the loop's reassembly table.
func (l *Loop) Table() *reasm.Table { return l.table }

// Now is the loop's clock, dataplane.Now.
func (l *Loop) Now() int64 { return dataplane.Now() }

// Complete implements reasm.Handler: r goes to the sink in a request
// handle.
func (l *Loop) Complete(r *reasm.Request) { l.deliver(r) }

// Reject implements reasm.Handler.
func (l *Loop) Reject(to dataplane.Endpoint, h *wire.Header, st wire.Status) {
	l.reject = egress.Response{To: to, Model: h.Model, Flow: h.Flow, ID: h.Request, Flags: h.Flags, Status: st}
	_ = l.out.Send(&l.reject) // a full queue is counted by egress
}

// Poll runs one iteration: send the replies of request handles, receive a
// burst, reassemble it, expire, give buffers back, transmit the other
// responses. It reports whether there was any work.
// Run calls it in a loop; benchmarks call it directly. now (dataplane.Now
// nanoseconds) is the only clock the table sees: it times fragments out and
// ages the table's memory of answered requests (reasm.Config.LateWindow).
func (l *Loop) Poll(now int64) (bool, error) {
	n, sent, err := l.poll(now)
	return n > 0 || sent > 0, err
}

// pollRx is Poll reporting the packets the burst received.
func (l *Loop) pollRx(now int64) (int, error) {
	n, _, err := l.poll(now)
	return n, err
}

// poll is Poll's body: it returns the packets received and the responses
// sent.
func (l *Loop) poll(now int64) (n, sent int, err error) {
	// replies first: their slots are free again for the requests this
	// burst completes
	sent = l.collect()
	n, err = l.port.RxBurst(l.pkts)
	if err != nil {
		return 0, sent, fmt.Errorf("ioloop: rx: %w", err)
	}
	for i := 0; i < n; i++ {
		l.table.Add(&l.pkts[i], now)
		l.pkts[i] = dataplane.Packet{}
	}
	l.table.Expire(now)
	l.table.DrainDone()
	if rel := l.table.TakeReleased(); len(rel) > 0 {
		l.port.Release(rel)
	}
	sent += l.out.Flush(l.port)
	return n, sent, nil
}

// Flush gives back the buffers of released requests and sends every
// response queued so far. Run does it on every iteration; after Run has
// returned, the owner calls Flush to send the answers of requests its
// consumers finished later.
func (l *Loop) Flush() {
	l.table.DrainDone()
	if rel := l.table.TakeReleased(); len(rel) > 0 {
		l.port.Release(rel)
	}
	l.out.Flush(l.port)
	l.collect()
}

// InFlight is the number of requests delivered whose replies have not
// been sent yet.
func (l *Loop) InFlight() int { return int(l.C.InFlight.Load()) }

// Run polls until ctx ends, then drains (see drain): every request that
// reaches the port is answered, and Run returns once the port is quiet and
// nothing is outstanding, or DrainTimeout passes.
func (l *Loop) Run(ctx context.Context) error {
	if l.table == nil {
		return errors.New("ioloop: NewTable was not called")
	}
	waiter, _ := l.port.(dataplane.Waiter)
	sleep := time.NewTimer(time.Hour)
	sleep.Stop()
	defer sleep.Stop()
	idle := 0
	for ctx.Err() == nil {
		busy, err := l.Poll(l.Now())
		if err != nil {
			return err
		}
		if busy {
			idle = 0
			continue
		}
		idle++
		switch {
		case waiter != nil:
			if !l.asleep() {
				continue // a response came in meanwhile
			}
			wait := int64(l.cfg.IdleWait)
			if l.waker == nil || wait <= 0 {
				wait = int64(l.cfg.IdleSleep) // responses wait at most this
			}
			err := waiter.Wait(wait)
			l.sleeping.Store(false)
			if err != nil && ctx.Err() == nil {
				return fmt.Errorf("ioloop: wait: %w", err)
			}
		case idle < l.cfg.Spin:
			runtime.Gosched()
		default:
			if !l.asleep() {
				continue
			}
			sleep.Reset(l.cfg.IdleSleep)
			select {
			case <-sleep.C:
			case <-l.wakeCh:
				// Go 1.23 timers: after Stop nothing stale is left in
				// sleep.C (draining it could block forever)
				sleep.Stop()
			}
			l.sleeping.Store(false)
		}
	}
	return l.drain()
}

// asleep marks the loop asleep unless a response is waiting to be sent:
// then it stays awake and reports false. A response queued after the
// mark wakes it (wake).
func (l *Loop) asleep() bool {
	// drop a stale wake-up from an earlier sleep
	select {
	case <-l.wakeCh:
	default:
	}
	l.sleeping.Store(true)
	if l.out.Pending() > 0 || len(l.ready) > 0 {
		l.sleeping.Store(false)
		return false
	}
	return true
}

// Drainer is implemented by sinks that can refuse new requests while the
// loop drains (they answer them shutting_down).
type Drainer interface {
	SetDraining(on bool)
}

// drainBacklogPolls bounds the backlog a drain admits: a port that
// still has packets after this many bursts (a client flooding it) is
// drained from there (64-packet bursts: more than a 64 MiB socket buffer
// of 1 KiB datagrams).
const drainBacklogPolls = 1024

// drain keeps receiving, so that every request that reaches the port is
// answered, until nothing has arrived for DrainQuiet and every admitted
// request has been answered, or DrainTimeout passes. The port's backlog
// comes first: the packets that had reached it when the drain began are
// admitted as before (a request a client sent before the shutdown is
// served, however late the loop reads it), a burst at a time until a
// burst comes back empty; only then does a Drainer sink refuse new
// requests with shutting_down. Last, requests still being reassembled
// are answered shutting_down and the last responses are sent.
func (l *Loop) drain() error {
	start := time.Now()
	deadline := start.Add(l.cfg.DrainTimeout)
	var err error
	for polls := 0; err == nil && polls < drainBacklogPolls && time.Now().Before(deadline); polls++ {
		n, perr := l.pollRx(l.Now())
		if perr != nil {
			err = perr
		}
		if n == 0 {
			break
		}
	}
	if d, ok := l.sink.(Drainer); ok {
		d.SetDraining(true)
	}
	quiet := time.Now()
	for err == nil {
		busy, perr := l.Poll(l.Now())
		if perr != nil {
			err = perr
			break
		}
		now := time.Now()
		if busy {
			quiet = now
		}
		if l.inUse == 0 && l.table.Outstanding() == 0 && l.out.Pending() == 0 && now.Sub(quiet) >= l.cfg.DrainQuiet {
			break
		}
		if now.After(deadline) {
			l.log.Warn("ioloop: drain timed out", "in_flight", l.inUse, "outstanding", l.table.Outstanding(), "pending_responses", l.out.Pending())
			err = fmt.Errorf("ioloop: drain: %d requests still in flight after %v", l.inUse, l.cfg.DrainTimeout)
			break
		}
		if !busy {
			time.Sleep(100 * time.Microsecond)
		}
	}
	l.table.Shutdown()
	for i := 0; i < 100 && (l.inUse > 0 || l.table.Outstanding() > 0 || l.out.Pending() > 0 || i == 0); i++ {
		l.Flush()
		if i > 0 {
			time.Sleep(time.Millisecond)
		}
	}
	return err
}

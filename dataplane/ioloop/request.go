package ioloop

import (
	"errors"
	"sync/atomic"

	"sluice/dataplane"
	"sluice/dataplane/egress"
	"sluice/dataplane/reasm"
	"sluice/dataplane/wire"
)

// Request is the handle of one complete request, which the I/O loop gives
// its Sink. It belongs to the dataplane: its consumer (an inference
// function) reads the payload where it arrived (AppendPayload), gives the
// packet buffers back once it has gathered them (Release), and answers
// the request exactly once (Reply), from any goroutine, without ever
// touching the reassembly table or the egress queue.
//
// Reply never blocks and never fails: every handle is a reply slot,
// reserved when its request is admitted, that the I/O loop drains. There
// are Config.Replies of them; a request completed while every one is
// taken is refused at once (overloaded) and counted (Counters.NoReplySlot).
type Request struct {
	// The request's header and arrival times (dataplane.Now clock); valid
	// until Reply.
	reasm.Info

	l     *Loop
	r     *reasm.Request // the reassembly slot, nil once released
	idx   int32
	state atomic.Uint32
	resp  egress.Response
}

// Handle states.
const (
	handleFree      uint32 = iota // in the loop's free list
	handleDelivered               // with the consumer
	handleReplied                 // its reply waits for the loop
)

// ErrReleased is returned for the payload of a request whose packet
// buffers were given back.
var ErrReleased = errors.New("ioloop: request payload already released")

// Class returns the request's scheduling class.
func (h *Request) Class() wire.Class {
	if h.Flags&wire.FlagRT != 0 {
		return wire.ClassRT
	}
	return wire.ClassBE
}

// AppendPayload appends the request's payload to dst: one view per
// fragment, in payload order, aliasing the packet buffers (no copy). The
// views are valid until Release or Reply.
func (h *Request) AppendPayload(dst [][]byte) ([][]byte, error) {
	if h.r == nil {
		return dst, ErrReleased
	}
	return h.l.table.AppendPayload(dst, h.r)
}

// CopyPayload copies the payload into dst, which must hold TotalLen bytes
// (for consumers that want it in one piece: tests, tools).
func (h *Request) CopyPayload(dst []byte) error {
	if h.r == nil {
		return ErrReleased
	}
	return h.l.table.Gather(dst, h.r)
}

// Release gives the request's packet buffers back to the driver (through
// the I/O loop); the payload views become invalid. It is called once the
// payload has been gathered, and at the latest by Reply; a second call
// does nothing.
func (h *Request) Release() {
	if h.r != nil {
		h.l.table.Done(h.r)
		h.r = nil
	}
}

// Reply answers the request: status st and, for StatusOK, output, which
// must stay unchanged until sent is called (on the I/O loop, once output
// has been handed to the driver or dropped; sent may be nil). It releases
// the packet buffers if Release was not called. Reply is called exactly
// once per request; the handle must not be used afterwards.
func (h *Request) Reply(st wire.Status, output []byte, sent func([]byte)) {
	if !h.state.CompareAndSwap(handleDelivered, handleReplied) {
		panic("ioloop: Reply on a request that is not with its consumer (answered twice?)")
	}
	h.Release()
	h.resp = egress.Response{To: h.From, Model: h.Model, Flow: h.Flow, ID: h.ID, Flags: h.Flags, Status: st,
		Output: output, Sent: sent, ArrivedNS: h.FirstNS, QueuedNS: dataplane.Now()}
	l := h.l
	l.ready <- h.idx // never blocks: there is room for every handle
	l.wake()
}

// Counters are a loop's counts of request handles.
type Counters struct {
	// Delivered counts complete requests handed to the sink.
	Delivered atomic.Uint64
	// Replied counts replies handed to egress.
	Replied atomic.Uint64
	// NoReplySlot counts complete requests refused (overloaded) at once
	// because every reply slot was taken.
	NoReplySlot atomic.Uint64
	// InFlight is the number of handles delivered and not yet replied to
	// and sent.
	InFlight atomic.Int64
}

// initHandles makes n request handles, all free.
func (l *Loop) initHandles(n int) {
	l.reqs = make([]Request, n)
	l.free = make([]int32, n)
	for i := range l.reqs {
		l.reqs[i].l, l.reqs[i].idx = l, int32(i)
		l.free[i] = int32(n - 1 - i)
	}
	l.ready = make(chan int32, n)
	l.replies = make([]egress.Response, 0, l.cfg.Burst)
}

// deliver hands r, just completed, to the sink in a handle, or refuses it
// when no handle is free.
func (l *Loop) deliver(r *reasm.Request) {
	if len(l.free) == 0 {
		l.C.NoReplySlot.Add(1)
		hd := r.Header()
		l.Reject(r.From, &hd, wire.StatusOverloaded)
		l.table.Done(r)
		return
	}
	idx := l.free[len(l.free)-1]
	l.free = l.free[:len(l.free)-1]
	h := &l.reqs[idx]
	h.Info = r.Info
	h.r = r
	h.state.Store(handleDelivered)
	l.inUse++
	l.C.InFlight.Store(int64(l.inUse))
	l.C.Delivered.Add(1)
	l.sink.Deliver(h)
}

// collect sends the replies waiting in their slots and frees the slots;
// it returns how many it sent.
func (l *Loop) collect() int {
	n := 0
	for {
		select {
		case idx := <-l.ready:
			h := &l.reqs[idx]
			l.replies = append(l.replies, h.resp)
			h.resp = egress.Response{}
			h.From = dataplane.Endpoint{}
			h.state.Store(handleFree)
			l.free = append(l.free, idx)
			l.inUse--
			n++
			if len(l.replies) == cap(l.replies) {
				l.sendReplies()
			}
			continue
		default:
		}
		break
	}
	l.sendReplies()
	if n > 0 {
		l.C.InFlight.Store(int64(l.inUse))
		l.C.Replied.Add(uint64(n))
	}
	return n
}

func (l *Loop) sendReplies() {
	if len(l.replies) == 0 {
		return
	}
	l.out.SendNow(l.port, l.replies)
	clear(l.replies)
	l.replies = l.replies[:0]
}

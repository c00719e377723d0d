package main

import (
	"encoding/binary"
	"errors"
	"hash/fnv"
	"math"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"sluice/dataplane/wire"
)

// action is what the fake appliance does with a complete request.
type action int

const (
	actAnswer     action = iota // the right output
	actDrop                     // no answer
	actDup                      // the right output, twice
	actCorrupt                  // a wrong output, for a frame answered right before
	actError                    // status overloaded
	actWrongModel               // the right output under another model id
	actWrongSize                // an output one float longer
	actLate                     // the right output, after the client's timeout
	actUnknown                  // the right output, plus one for a request never sent
	numActions
)

// fakeApp is an in-test appliance on 127.0.0.1: it reassembles requests
// per the wire protocol and answers each with float32 outputs derived from
// the frame, or misbehaves as policy says.
type fakeApp struct {
	t        *testing.T
	conn     *net.UDPConn
	policy   func(flow uint32, id uint64) action
	delay    time.Duration // before every answer
	lateBy   time.Duration // actLate's delay
	outLen   int           // output floats
	respFrag int           // response fragment size

	mu          sync.Mutex
	partial     map[reqKey]*fakeReq
	did         map[uint32]*[numActions]int // per flow
	received    map[uint32]int              // complete requests per flow
	sizes       map[uint32]map[int]bool     // request sizes seen per flow
	clean       map[cleanKey]bool           // (flow, frame) answered right
	outstanding map[uint32]int              // answers not yet sent, per flow
	maxOut      map[uint32]int
	timers      sync.WaitGroup
	done        chan struct{}
}

type reqKey struct {
	from netip.AddrPort
	flow uint32
	id   uint64
}

type cleanKey struct {
	flow uint32
	hash uint64
}

type fakeReq struct {
	h    wire.Header
	got  []bool
	n    int
	data []byte
}

// startFake starts a fake appliance, set up by the options; it stops when
// the test ends.
func startFake(t *testing.T, policy func(flow uint32, id uint64) action, opts ...func(*fakeApp)) *fakeApp {
	t.Helper()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadBuffer(8 << 20)
	f := &fakeApp{t: t, conn: conn, policy: policy, outLen: 16, respFrag: 24, lateBy: time.Second,
		partial: map[reqKey]*fakeReq{}, did: map[uint32]*[numActions]int{}, received: map[uint32]int{},
		sizes: map[uint32]map[int]bool{}, clean: map[cleanKey]bool{}, outstanding: map[uint32]int{},
		maxOut: map[uint32]int{}, done: make(chan struct{})}
	for _, o := range opts {
		o(f)
	}
	go f.serve()
	t.Cleanup(func() {
		conn.Close()
		<-f.done
		f.timers.Wait()
	})
	return f
}

// addr is the fake's address as -target takes it.
func (f *fakeApp) addr() string { return f.conn.LocalAddr().String() }

// serve reassembles requests until the socket is closed.
func (f *fakeApp) serve() {
	defer close(f.done)
	buf := make([]byte, 65536)
	for {
		n, from, err := f.conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var h wire.Header
		if err := wire.Decode(buf[:n], &h); err != nil || h.Kind != wire.KindRequest {
			f.t.Errorf("fake: bad datagram from the client: %v", err)
			continue
		}
		if _, err := wire.FragSize(&h); err != nil {
			f.t.Errorf("fake: request fragment geometry: %v (%+v)", err, h)
			continue
		}
		k := reqKey{from, h.Flow, h.Request}
		r := f.partial[k]
		if r == nil {
			r = &fakeReq{h: h, got: make([]bool, h.FragCount), data: make([]byte, h.TotalLen)}
			f.partial[k] = r
		}
		if r.got[h.FragIndex] {
			f.t.Errorf("fake: fragment %d of request %d sent twice", h.FragIndex, h.Request)
			continue
		}
		r.got[h.FragIndex] = true
		r.n++
		copy(r.data[h.Offset:], buf[wire.HeaderLen:n])
		if r.n == len(r.got) {
			delete(f.partial, k)
			f.complete(from, r)
		}
	}
}

// output derives a model's output from a frame: outLen float32 values.
func (f *fakeApp) output(model uint16, frame []byte, n int) []byte {
	hs := fnv.New64a()
	hs.Write([]byte{byte(model), byte(model >> 8)})
	hs.Write(frame)
	h := hs.Sum64()
	out := make([]byte, 4*n)
	for i := range n {
		v := float32(i) + float32((h>>(8*(i%8)))&0xff)/256
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(v))
	}
	return out
}

// complete decides what to do with a whole request and does it.
func (f *fakeApp) complete(from netip.AddrPort, r *fakeReq) {
	h := r.h
	f.mu.Lock()
	f.received[h.Flow]++
	if f.sizes[h.Flow] == nil {
		f.sizes[h.Flow] = map[int]bool{}
	}
	f.sizes[h.Flow][len(r.data)] = true
	if f.did[h.Flow] == nil {
		f.did[h.Flow] = &[numActions]int{}
	}
	a := f.policy(h.Flow, h.Request)
	hs := fnv.New64a()
	hs.Write(r.data)
	ck := cleanKey{h.Flow, hs.Sum64()}
	if a == actCorrupt && !f.clean[ck] {
		a = actAnswer // nothing to differ from yet
	}
	if a == actAnswer || a == actDup || a == actUnknown {
		f.clean[ck] = true
	}
	f.did[h.Flow][a]++
	f.mu.Unlock()

	out := f.output(h.Model, r.data, f.outLen)
	resp := wire.Header{Kind: wire.KindResponse, Flags: h.Flags &^ wire.FlagDeadline, Model: h.Model, Flow: h.Flow, Request: h.Request}
	var msgs [][]byte // each sent whole
	switch a {
	case actDrop:
	case actDup:
		msgs = [][]byte{out, out}
	case actCorrupt:
		v := math.Float32frombits(binary.LittleEndian.Uint32(out)) + 1 // off by 1 in ~16
		binary.LittleEndian.PutUint32(out, math.Float32bits(v))
		msgs = [][]byte{out}
	case actError:
		resp.Status = wire.StatusOverloaded
		msgs = [][]byte{nil}
	case actWrongModel:
		resp.Model++
		msgs = [][]byte{out}
	case actWrongSize:
		msgs = [][]byte{f.output(h.Model, r.data, f.outLen+1)}
	default:
		msgs = [][]byte{out}
	}
	delay := f.delay
	if a == actLate {
		delay = f.lateBy
	}
	send := func() {
		// Done before the answer leaves: the client may send its next
		// request as soon as the answer arrives.
		f.mu.Lock()
		f.outstanding[h.Flow]--
		f.mu.Unlock()
		for _, m := range msgs {
			f.send(from, resp, m)
		}
		if a == actUnknown {
			u := resp
			u.Request = 1<<40 + h.Request
			f.send(from, u, out)
		}
	}
	f.mu.Lock()
	f.outstanding[h.Flow]++
	f.maxOut[h.Flow] = max(f.maxOut[h.Flow], f.outstanding[h.Flow])
	f.mu.Unlock()
	if delay == 0 {
		send()
		return
	}
	f.timers.Add(1)
	time.AfterFunc(delay, func() {
		defer f.timers.Done()
		send()
	})
}

// send sends one response message, fragmented.
func (f *fakeApp) send(to netip.AddrPort, h wire.Header, payload []byte) {
	ds, err := wire.Datagrams(h, payload, f.respFrag)
	if err != nil {
		f.t.Errorf("fake: %v", err)
		return
	}
	for _, d := range ds {
		if _, err := f.conn.WriteToUDPAddrPort(d, to); err != nil && !errors.Is(err, net.ErrClosed) {
			f.t.Errorf("fake: send: %v", err)
		}
	}
}

// counts returns what the fake did on a flow, and how many requests it got.
func (f *fakeApp) counts(flow uint32) ([numActions]int, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var d [numActions]int
	if p := f.did[flow]; p != nil {
		d = *p
	}
	return d, f.received[flow]
}

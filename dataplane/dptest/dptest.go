// Package dptest holds helpers for dataplane tests: a sink that answers
// every request with a result derived from its payload (so a test can check
// each response against its request), and a client that sends requests over
// a UDP socket and reassembles the responses.
package dptest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"sluice/dataplane/ioloop"
	"sluice/dataplane/pace"
	"sluice/dataplane/wire"
)

// Result is what DigestSink answers for a payload: its SHA-256 followed by
// the payload reversed (so responses are as large as requests and get
// fragmented too).
func Result(payload []byte) []byte {
	sum := sha256.Sum256(payload)
	out := make([]byte, 32+len(payload))
	copy(out, sum[:])
	for i, b := range payload {
		out[len(out)-1-i] = b
	}
	return out
}

// DigestSink is an ioloop.Sink that gathers each request on its own
// goroutine, as an inference function would, and answers it with Result.
// Requests for models other than Model are answered unknown_model; when
// the queue is full they are answered overloaded.
type DigestSink struct {
	Model uint16
	queue chan *ioloop.Request
	wg    sync.WaitGroup
}

// NewDigestSink makes a sink with a queue of queueLen requests.
func NewDigestSink(model uint16, queueLen int) *DigestSink {
	return &DigestSink{Model: model, queue: make(chan *ioloop.Request, queueLen)}
}

// Deliver implements ioloop.Sink.
func (s *DigestSink) Deliver(r *ioloop.Request) {
	if r.Model != s.Model {
		r.Reply(wire.StatusUnknownModel, nil, nil)
		return
	}
	select {
	case s.queue <- r:
	default:
		r.Reply(wire.StatusOverloaded, nil, nil)
	}
}

// Start runs workers goroutines until ctx ends; Wait waits for them.
func (s *DigestSink) Start(ctx context.Context, workers int) {
	for i := 0; i < workers; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for {
				select {
				case <-ctx.Done():
					// answer what is queued so nothing is lost
					for {
						select {
						case r := <-s.queue:
							s.serve(r)
						default:
							return
						}
					}
				case r := <-s.queue:
					s.serve(r)
				}
			}
		}()
	}
}

// Wait waits for the workers to stop.
func (s *DigestSink) Wait() { s.wg.Wait() }

func (s *DigestSink) serve(r *ioloop.Request) {
	buf := make([]byte, r.TotalLen)
	if err := r.CopyPayload(buf); err != nil {
		r.Reply(wire.StatusInternal, nil, nil)
		return
	}
	r.Reply(wire.StatusOK, Result(buf), nil)
}

// Response is a reassembled response.
type Response struct {
	Status wire.Status
	Output []byte
	At     time.Time
}

// Client sends requests from one UDP socket and reassembles responses.
type Client struct {
	Conn     *net.UDPConn
	Flow     uint32
	FragSize int
	// Pacer, when set, spaces the datagrams Send sends (large requests).
	Pacer *pace.Pacer

	mu      sync.Mutex
	partial map[uint64]*partial
	done    map[uint64]Response
	dupes   int
	stray   int
}

type partial struct {
	h    wire.Header
	got  map[uint16]bool
	data []byte
}

// NewClient wraps a UDP socket (already bound; use Dial-less sockets so
// ICMP errors do not close it) and starts reading responses until the
// socket is closed.
func NewClient(conn *net.UDPConn, flow uint32, fragSize int) *Client {
	c := &Client{Conn: conn, Flow: flow, FragSize: fragSize, partial: map[uint64]*partial{}, done: map[uint64]Response{}}
	go c.read()
	return c
}

func (c *Client) read() {
	buf := make([]byte, 65536)
	for {
		n, _, err := c.Conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var h wire.Header
		if wire.Decode(buf[:n], &h) != nil || h.Kind != wire.KindResponse || h.Flow != c.Flow {
			c.mu.Lock()
			c.stray++
			c.mu.Unlock()
			continue
		}
		c.mu.Lock()
		if _, ok := c.done[h.Request]; ok {
			c.dupes++
			c.mu.Unlock()
			continue
		}
		p := c.partial[h.Request]
		if p == nil {
			p = &partial{h: h, got: map[uint16]bool{}, data: make([]byte, h.TotalLen)}
			c.partial[h.Request] = p
		}
		if !p.got[h.FragIndex] && int(h.Offset)+n-wire.HeaderLen <= len(p.data) {
			p.got[h.FragIndex] = true
			copy(p.data[h.Offset:], buf[wire.HeaderLen:n])
		}
		if len(p.got) == int(h.FragCount) {
			c.done[h.Request] = Response{Status: h.Status, Output: p.data, At: time.Now()}
			delete(c.partial, h.Request)
		}
		c.mu.Unlock()
	}
}

// Send sends request id for model with payload to dst.
func (c *Client) Send(dst netip.AddrPort, model uint16, id uint64, flags uint8, payload []byte) error {
	ds, err := wire.Datagrams(wire.Header{Kind: wire.KindRequest, Flags: flags, Model: model, Flow: c.Flow, Request: id}, payload, c.FragSize)
	if err != nil {
		return err
	}
	for _, d := range ds {
		c.Pacer.Wait(len(d))
		if _, err := c.Conn.WriteToUDPAddrPort(d, dst); err != nil {
			return fmt.Errorf("dptest: send: %w", err)
		}
	}
	return nil
}

// SendRaw sends one raw datagram.
func (c *Client) SendRaw(dst netip.AddrPort, d []byte) error {
	_, err := c.Conn.WriteToUDPAddrPort(d, dst)
	return err
}

// Get returns the response to id, if complete.
func (c *Client) Get(id uint64) (Response, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.done[id]
	return r, ok
}

// Wait waits until the response to id is complete or the timeout passes.
func (c *Client) Wait(id uint64, timeout time.Duration) (Response, bool) {
	deadline := time.Now().Add(timeout)
	for {
		if r, ok := c.Get(id); ok {
			return r, true
		}
		if time.Now().After(deadline) {
			return Response{}, false
		}
		time.Sleep(200 * time.Microsecond)
	}
}

// Completed is the number of complete responses.
func (c *Client) Completed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.done)
}

// Duplicates counts response fragments for requests already complete: a
// request answered twice shows up here.
func (c *Client) Duplicates() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dupes
}

package egress

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"sluice/dataplane"
	"sluice/dataplane/wire"
)

// flakyPort accepts at most accept datagrams per TxBurst and keeps copies.
type flakyPort struct {
	accept int
	fail   bool
	got    [][]byte
	calls  int
}

func (p *flakyPort) RxBurst([]dataplane.Packet) (int, error) { return 0, nil }
func (p *flakyPort) Release([]dataplane.BufRef)              {}
func (p *flakyPort) Stats() dataplane.PortStats              { return dataplane.PortStats{} }
func (p *flakyPort) Close() error                            { return nil }
func (p *flakyPort) TxBurst(dgs []dataplane.Datagram) (int, error) {
	p.calls++
	if p.fail {
		return 0, errors.New("link down")
	}
	n := min(p.accept, len(dgs))
	for _, d := range dgs[:n] {
		p.got = append(p.got, append(append([]byte(nil), d.Header[:]...), d.Payload...))
	}
	return n, nil
}

var to = dataplane.Endpoint{Addr: netip.MustParseAddrPort("10.99.0.2:1234")}

func TestFragmentsLargeResponse(t *testing.T) {
	e, _ := New(Config{FragSize: 1000, QueueLen: 8, Burst: 4, Retries: 3})
	out := bytes.Repeat([]byte("0123456789abcdef"), 1000) // 16000 bytes
	sentCalls := 0
	if err := e.Send(&Response{To: to, Model: 2, Flow: 3, ID: 4, Flags: wire.FlagRT | wire.FlagDeadline, Output: out,
		Sent: func(o []byte) { sentCalls++ }}); err != nil {
		t.Fatal(err)
	}
	p := &flakyPort{accept: 3}
	if n := e.Flush(p); n != 1 {
		t.Fatalf("flushed %d", n)
	}
	if len(p.got) != 16 || sentCalls != 1 {
		t.Fatalf("%d datagrams, %d Sent calls", len(p.got), sentCalls)
	}
	re := make([]byte, len(out))
	for _, d := range p.got {
		var h wire.Header
		if err := wire.Decode(d, &h); err != nil {
			t.Fatal(err)
		}
		if h.Kind != wire.KindResponse || h.Status != wire.StatusOK || h.Flags != wire.FlagRT || h.Request != 4 || h.TotalLen != 16000 {
			t.Fatalf("bad header %+v", h)
		}
		if _, err := wire.FragSize(&h); err != nil {
			t.Fatalf("fragment %d breaks the geometry rules: %v", h.FragIndex, err)
		}
		copy(re[h.Offset:], d[wire.HeaderLen:])
	}
	if !bytes.Equal(re, out) {
		t.Fatal("reassembled response differs")
	}
}

func TestErrorResponseHasNoOutput(t *testing.T) {
	e, _ := New(DefaultConfig())
	_ = e.Send(&Response{To: to, ID: 9, Status: wire.StatusUnknownModel, Output: []byte("ignored")})
	p := &flakyPort{accept: 32}
	e.Flush(p)
	var h wire.Header
	if len(p.got) != 1 || wire.Decode(p.got[0], &h) != nil || h.Status != wire.StatusUnknownModel || h.TotalLen != 0 || h.PayloadLen != 0 {
		t.Fatalf("error response wrong: %d datagrams, %+v", len(p.got), h)
	}
	if _, err := wire.FragSize(&h); err != nil {
		t.Fatalf("empty error response rejected by geometry: %v", err)
	}
	if e.C.ByStatus[wire.StatusUnknownModel].Load() != 1 {
		t.Fatal("status not counted")
	}
}

func TestQueueFullAndSendWait(t *testing.T) {
	e, _ := New(Config{FragSize: 1000, QueueLen: 2, Burst: 4, Retries: 0})
	r := &Response{To: to}
	if e.Send(r) != nil || e.Send(r) != nil {
		t.Fatal("queue refused within capacity")
	}
	if err := e.Send(r); !errors.Is(err, ErrFull) {
		t.Fatalf("third send: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := e.SendWait(ctx, r); err == nil {
		t.Fatal("SendWait returned without room")
	}
	done := make(chan error)
	go func() { done <- e.SendWait(context.Background(), r) }()
	time.Sleep(5 * time.Millisecond)
	e.Flush(&flakyPort{accept: 10})
	if err := <-done; err != nil {
		t.Fatalf("SendWait after flush: %v", err)
	}
	if e.C.QueueFull.Load() != 2 {
		t.Fatalf("queue_full = %d", e.C.QueueFull.Load())
	}
}

func TestTxFailuresCounted(t *testing.T) {
	e, _ := New(Config{FragSize: 1000, QueueLen: 4, Burst: 8, Retries: 2})
	sent := 0
	_ = e.Send(&Response{To: to, Output: make([]byte, 5000), Sent: func([]byte) { sent++ }})
	p := &flakyPort{fail: true}
	e.Flush(p)
	if e.C.TxFailed.Load() != 5 || sent != 1 || p.calls != 1 {
		t.Fatalf("tx_failed %d, sent callbacks %d, calls %d", e.C.TxFailed.Load(), sent, p.calls)
	}
}

// OnSent sees every response handed to the driver, before the burst that
// carries its last datagram (so a client holding the response finds it
// counted), with its arrival time and a sent time no earlier than that.
func TestOnSentTimestamps(t *testing.T) {
	type seen struct {
		id              uint64
		arrived, sentNS int64
		datagrams       int
	}
	var got []seen
	p := &flakyPort{accept: 64}
	cfg := Config{FragSize: 1000, QueueLen: 8, Burst: 32, Retries: 0}
	cfg.OnSent = func(r *Response, sentNS int64) {
		got = append(got, seen{r.ID, r.ArrivedNS, sentNS, len(p.got)})
	}
	e, _ := New(cfg)
	arrived := dataplane.Now()
	if err := e.Send(&Response{To: to, ID: 1, Output: make([]byte, 2500), ArrivedNS: arrived}); err != nil {
		t.Fatal(err)
	}
	if err := e.Send(&Response{To: to, ID: 2, Status: wire.StatusOverloaded}); err != nil {
		t.Fatal(err)
	}
	if n := e.Flush(p); n != 2 {
		t.Fatalf("flushed %d", n)
	}
	if len(got) != 2 || got[0].id != 1 || got[1].id != 2 {
		t.Fatalf("OnSent calls %+v", got)
	}
	// both responses (3 datagrams + 1) go out in one burst: none had
	// left when they were observed
	if got[0].arrived != arrived || got[0].sentNS < arrived || got[0].datagrams != 0 || got[1].datagrams != 0 {
		t.Fatalf("response 1: %+v (arrived %d, observed before its datagrams)", got[0], arrived)
	}
	if got[1].arrived != 0 {
		t.Fatalf("response 2 arrived at %d, want 0 (unknown)", got[1].arrived)
	}
}

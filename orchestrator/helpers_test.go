package orchestrator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	zmq "github.com/pebbe/zmq4"

	"sluice/orchestrator"
)

// testLogger logs into the test's output.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ipcEndpoint returns an ipc endpoint in the test's temporary directory.
func ipcEndpoint(t *testing.T) string {
	return "ipc://" + filepath.Join(t.TempDir(), "control.sock")
}

// startServer runs a server for h until the test ends and returns it.
// An empty cfg.Endpoint gets an ipc endpoint in t.TempDir().
func startServer(t *testing.T, cfg orchestrator.ServerConfig, h orchestrator.Handler) *orchestrator.Server {
	t.Helper()
	if cfg.Endpoint == "" {
		cfg.Endpoint = ipcEndpoint(t)
	}
	s, err := orchestrator.NewServer(cfg, h, testLogger(t))
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	if err := s.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return s
}

// dial connects a client that is closed when the test ends.
func dial(t *testing.T, endpoint string, cfg orchestrator.ClientConfig) *orchestrator.Client {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := orchestrator.Dial(endpoint, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawPeer is a bare DEALER socket for sending arbitrary frames.
type rawPeer struct {
	t    *testing.T
	ctx  *zmq.Context
	sock *zmq.Socket
}

func newRawPeer(t *testing.T, endpoint string, typ zmq.Type, identity string) *rawPeer {
	t.Helper()
	zctx, err := zmq.NewContext()
	if err != nil {
		t.Fatal(err)
	}
	sock, err := zctx.NewSocket(typ)
	if err != nil {
		t.Fatal(err)
	}
	sock.SetLinger(0)
	if identity != "" {
		if err := sock.SetIdentity(identity); err != nil {
			t.Fatal(err)
		}
	}
	if err := sock.Connect(endpoint); err != nil {
		t.Fatal(err)
	}
	p := &rawPeer{t: t, ctx: zctx, sock: sock}
	t.Cleanup(func() { sock.Close(); zctx.Term() })
	return p
}

func (p *rawPeer) send(frames ...[]byte) {
	p.t.Helper()
	if _, err := p.sock.SendMessage(frames); err != nil {
		p.t.Fatalf("send: %v", err)
	}
}

// recv waits for one reply; ok is false after the timeout.
func (p *rawPeer) recv(timeout time.Duration) (orchestrator.Reply, []byte, bool) {
	p.t.Helper()
	poller := zmq.NewPoller()
	poller.Add(p.sock, zmq.POLLIN)
	polled, err := poller.Poll(timeout)
	if err != nil {
		p.t.Fatalf("poll: %v", err)
	}
	if len(polled) == 0 {
		return orchestrator.Reply{}, nil, false
	}
	frames, err := p.sock.RecvMessageBytes(0)
	if err != nil {
		p.t.Fatalf("recv: %v", err)
	}
	raw := frames[len(frames)-1]
	var rep orchestrator.Reply
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil {
		p.t.Fatalf("reply %q: %v", raw, err)
	}
	return rep, raw, true
}

// call sends one body frame and waits for its reply.
func (p *rawPeer) call(body string) (orchestrator.Reply, []byte) {
	p.t.Helper()
	p.send([]byte(body))
	rep, raw, ok := p.recv(5 * time.Second)
	if !ok {
		p.t.Fatalf("no reply to %.200q", body)
	}
	return rep, raw
}

const (
	zmqDEALER = zmq.DEALER
	zmqREQ    = zmq.REQ
)

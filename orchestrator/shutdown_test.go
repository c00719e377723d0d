package orchestrator_test

import (
	"context"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

// TestShutdown cancels Run while one command runs and another waits:
// Run returns promptly, the running command sees its context canceled,
// the waiting one is answered without running, the socket file is gone,
// and no goroutine is left behind.
func TestShutdown(t *testing.T) {
	baseline := runtime.NumGoroutine()
	fake := orchtest.New(seedIF)
	ep := ipcEndpoint(t)
	srv, err := orchestrator.NewServer(orchestrator.ServerConfig{Endpoint: ep}, fake, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()

	p := newRawPeer(t, ep, zmqDEALER, "")
	started := make(chan struct{})
	sawCancel := make(chan error, 1)
	fake.SetHook(orchestrator.CmdDrain, func(ctx context.Context) error {
		close(started)
		<-ctx.Done()
		sawCancel <- ctx.Err()
		return ctx.Err()
	})
	p.send([]byte(`{"id":"d","cmd":"drain","args":{"timeout_ms":60000}}`))
	<-started
	p.send([]byte(`{"id":"r","cmd":"remove","args":{"name":"cls"}}`))
	time.Sleep(50 * time.Millisecond) // let the remove reach the queue

	t0 := time.Now()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return")
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("Run took %v to stop", d)
	}
	if err := <-sawCancel; err != context.Canceled {
		t.Errorf("running command saw %v", err)
	}
	replies := map[string]*orchestrator.Error{}
	for range 2 {
		rep, raw, ok := p.recv(2 * time.Second)
		if !ok {
			break
		}
		if rep.OK {
			t.Errorf("reply %s: want an error", raw)
			continue
		}
		replies[rep.ID] = rep.Error
	}
	for _, id := range []string{"d", "r"} {
		if e := replies[id]; e == nil || e.Code != orchestrator.CodeUnavailable || !strings.Contains(e.Message, "shutting down") {
			t.Errorf("reply to %s: %v", id, e)
		}
	}
	if n := len(fake.IFs()); n != 1 {
		t.Errorf("the queued remove ran: %d IFs", n)
	}
	if _, err := os.Stat(strings.TrimPrefix(ep, "ipc://")); !os.IsNotExist(err) {
		t.Errorf("socket file after stop: %v", err)
	}
	if err := srv.Run(context.Background()); err == nil {
		t.Error("second Run succeeded")
	}
	waitGoroutines(t, baseline)
}

// TestShutdownIdle: an idle server stops at once and leaks nothing, with
// clients connected over ipc and CURVE tcp.
func TestShutdownIdle(t *testing.T) {
	baseline := runtime.NumGoroutine()
	server, client := keyPair(t), keyPair(t)
	for _, cfg := range []orchestrator.ServerConfig{
		{Endpoint: ipcEndpoint(t)},
		{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: server.Secret, AllowedClientKeys: []string{client.Public}},
	} {
		srv, err := orchestrator.NewServer(cfg, orchtest.New(), testLogger(t))
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Listen(); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Run(ctx) }()
		ccfg := orchestrator.ClientConfig{}
		if cfg.CurveServerSecretKey != "" {
			ccfg = orchestrator.ClientConfig{CurveServerKey: srv.PublicKey(), CurvePublicKey: client.Public, CurveSecretKey: client.Secret}
		}
		c, err := orchestrator.Dial(srv.Endpoint(), ccfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Status(context.Background(), orchestrator.StatusArgs{}); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 500*time.Millisecond {
			t.Errorf("%s: stop took %v", cfg.Endpoint, d)
		}
		c.Close()
	}
	// A server that only listened is released by Close.
	srv, err := orchestrator.NewServer(orchestrator.ServerConfig{Endpoint: ipcEndpoint(t)}, orchtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	waitGoroutines(t, baseline)
}

// waitGoroutines waits for the goroutine count to fall to n.
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, want <= %d:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

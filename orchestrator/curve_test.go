package orchestrator_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

func keyPair(t *testing.T) orchestrator.KeyPair {
	t.Helper()
	k, err := orchestrator.NewKeyPair()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestCurveTCP runs a CURVE server on 127.0.0.1 and checks that an
// allowed client key gets in and that others are refused before any
// command reaches the handler.
func TestCurveTCP(t *testing.T) {
	server, allowed, stranger := keyPair(t), keyPair(t), keyPair(t)
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{
		Endpoint:             "tcp://127.0.0.1:0",
		CurveServerSecretKey: server.Secret,
		CurvePublicKey:       server.Public,
		AllowedClientKeys:    []string{allowed.Public},
	}, fake)
	if srv.PublicKey() != server.Public {
		t.Fatalf("PublicKey = %q", srv.PublicKey())
	}
	ep := srv.Endpoint()
	if !strings.HasPrefix(ep, "tcp://127.0.0.1:") || strings.HasSuffix(ep, ":0") {
		t.Fatalf("Endpoint = %q", ep)
	}
	ctx := context.Background()

	good := dial(t, ep, orchestrator.ClientConfig{CurveServerKey: server.Public,
		CurvePublicKey: allowed.Public, CurveSecretKey: allowed.Secret})
	if _, err := good.Status(ctx, orchestrator.StatusArgs{}); err != nil {
		t.Fatalf("allowed client: %v", err)
	}

	bad := dial(t, ep, orchestrator.ClientConfig{CurveServerKey: server.Public,
		CurvePublicKey: stranger.Public, CurveSecretKey: stranger.Secret, Timeout: 3 * time.Second})
	_, err := bad.Drain(ctx, orchestrator.DrainArgs{})
	var he *orchestrator.HandshakeError
	if !errors.As(err, &he) || !he.Auth {
		t.Fatalf("unallowed client: err = %v, want an auth HandshakeError", err)
	}

	// Without CURVE, or with the wrong server key, nothing gets through.
	plain := dial(t, ep, orchestrator.ClientConfig{Insecure: true, Timeout: 500 * time.Millisecond})
	if _, err := plain.Drain(ctx, orchestrator.DrainArgs{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("client without CURVE: err = %v", err)
	}
	wrong := dial(t, ep, orchestrator.ClientConfig{CurveServerKey: stranger.Public, Timeout: 500 * time.Millisecond})
	if _, err := wrong.Drain(ctx, orchestrator.DrainArgs{}); err == nil {
		t.Errorf("client with the wrong server key got through")
	} else {
		t.Logf("wrong server key: %v", err)
	}

	if n := fake.CallCount(); n != 1 {
		t.Errorf("handler called %d times, want 1 (the allowed status)", n)
	}
	if fake.Draining() {
		t.Errorf("a refused client drained the appliance")
	}
}

// TestCurveAllowAny: "*" admits any client that knows the server key,
// including one with a generated key pair.
func TestCurveAllowAny(t *testing.T) {
	server := keyPair(t)
	srv := startServer(t, orchestrator.ServerConfig{
		Endpoint:             "tcp://127.0.0.1:0",
		CurveServerSecretKey: server.Secret,
		AllowedClientKeys:    []string{"*"},
	}, orchtest.New())
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{CurveServerKey: server.Public})
	if c.PublicKey() == "" {
		t.Fatal("no generated client key")
	}
	if _, err := c.Status(context.Background(), orchestrator.StatusArgs{}); err != nil {
		t.Fatal(err)
	}
}

// TestTwoCurveServers: each server has its own ZAP handler, so two in one
// process keep their own allowed keys.
func TestTwoCurveServers(t *testing.T) {
	k1, k2, c1, c2 := keyPair(t), keyPair(t), keyPair(t), keyPair(t)
	s1 := startServer(t, orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: k1.Secret, AllowedClientKeys: []string{c1.Public}}, orchtest.New())
	s2 := startServer(t, orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: k2.Secret, AllowedClientKeys: []string{c2.Public}}, orchtest.New())
	ctx := context.Background()
	for i, tc := range []struct {
		srv    *orchestrator.Server
		client orchestrator.KeyPair
		ok     bool
	}{{s1, c1, true}, {s1, c2, false}, {s2, c2, true}, {s2, c1, false}} {
		c := dial(t, tc.srv.Endpoint(), orchestrator.ClientConfig{CurveServerKey: tc.srv.PublicKey(),
			CurvePublicKey: tc.client.Public, CurveSecretKey: tc.client.Secret, Timeout: 3 * time.Second})
		_, err := c.Status(ctx, orchestrator.StatusArgs{})
		if (err == nil) != tc.ok {
			t.Errorf("case %d: err = %v, want ok %v", i, err, tc.ok)
		}
	}
}

// TestInsecureTCP: plain tcp only when asked for.
func TestInsecureTCP(t *testing.T) {
	srv := startServer(t, orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", Insecure: true}, orchtest.New())
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{Insecure: true})
	if _, err := c.Status(context.Background(), orchestrator.StatusArgs{}); err != nil {
		t.Fatal(err)
	}
}

// TestConfigErrors checks what NewServer and Dial refuse.
func TestConfigErrors(t *testing.T) {
	k, other := keyPair(t), keyPair(t)
	h := orchtest.New()
	cases := []struct {
		cfg orchestrator.ServerConfig
		msg string
	}{
		{orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0"}, "tcp needs CURVE"},
		{orchestrator.ServerConfig{Endpoint: "udp://x"}, "want ipc://PATH or tcp://HOST:PORT"},
		{orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: k.Secret}, "needs AllowedClientKeys"},
		{orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: "short", AllowedClientKeys: []string{"*"}}, "want 40 Z85 characters"},
		{orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: k.Secret, CurvePublicKey: other.Public, AllowedClientKeys: []string{"*"}}, "does not belong"},
		{orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: k.Secret, AllowedClientKeys: []string{strings.Repeat(" ", 40)}}, "not a Z85 character"},
		{orchestrator.ServerConfig{AllowedClientKeys: []string{k.Public}}, "need CurveServerSecretKey"},
	}
	for i, tc := range cases {
		if _, err := orchestrator.NewServer(tc.cfg, h, nil); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("case %d: err = %v, want %q", i, err, tc.msg)
		}
	}
	if _, err := orchestrator.NewServer(orchestrator.ServerConfig{}, nil, nil); err == nil {
		t.Error("nil handler accepted")
	}
	clientCases := []struct {
		ep  string
		cfg orchestrator.ClientConfig
		msg string
	}{
		{"tcp://127.0.0.1:1", orchestrator.ClientConfig{}, "tcp needs CURVE"},
		{"inproc://x", orchestrator.ClientConfig{}, "want ipc://PATH"},
		{"tcp://127.0.0.1:1", orchestrator.ClientConfig{CurveServerKey: k.Public, CurvePublicKey: k.Public}, "both"},
		{"tcp://127.0.0.1:1", orchestrator.ClientConfig{CurveServerKey: k.Public, CurvePublicKey: other.Public, CurveSecretKey: k.Secret}, "does not belong"},
		{"ipc:///x", orchestrator.ClientConfig{CurvePublicKey: k.Public}, "need CurveServerKey"},
	}
	for i, tc := range clientCases {
		if c, err := orchestrator.Dial(tc.ep, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("client case %d: err = %v, want %q", i, err, tc.msg)
			if c != nil {
				c.Close()
			}
		}
	}
}

// TestBindErrors: a busy tcp port and a live ipc socket are refused; a
// stale ipc socket file is replaced.
func TestBindErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := orchestrator.NewServer(orchestrator.ServerConfig{Endpoint: "tcp://" + l.Addr().String(), Insecure: true}, orchtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err == nil || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Errorf("busy port: %v", err)
	}

	first := startServer(t, orchestrator.ServerConfig{}, orchtest.New())
	s, err = orchestrator.NewServer(orchestrator.ServerConfig{Endpoint: first.Endpoint()}, orchtest.New(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err == nil || !strings.Contains(err.Error(), "another server is listening") {
		t.Errorf("live ipc socket: %v", err)
	}

	stale := ipcEndpoint(t)
	ul, err := net.Listen("unix", strings.TrimPrefix(stale, "ipc://"))
	if err != nil {
		t.Fatal(err)
	}
	ul.(*net.UnixListener).SetUnlinkOnClose(false)
	ul.Close()
	srv := startServer(t, orchestrator.ServerConfig{Endpoint: stale}, orchtest.New())
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{})
	if _, err := c.Status(context.Background(), orchestrator.StatusArgs{}); err != nil {
		t.Errorf("after a stale socket: %v", err)
	}
}

package orchestrator_test

import (
	"context"
	"testing"

	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

// BenchmarkRoundTrip measures one status command through the client
// library, the server and the fake handler: ipc, plain tcp and CURVE tcp.
// Run: make bench-orchestrator (docs/commands.md has the numbers).
func BenchmarkRoundTrip(b *testing.B) {
	server, client := benchKeys(b), benchKeys(b)
	for _, bc := range []struct {
		name string
		cfg  orchestrator.ServerConfig
		ccfg orchestrator.ClientConfig
	}{
		{"ipc", orchestrator.ServerConfig{}, orchestrator.ClientConfig{}},
		{"tcp", orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", Insecure: true}, orchestrator.ClientConfig{Insecure: true}},
		{"tcp-curve", orchestrator.ServerConfig{Endpoint: "tcp://127.0.0.1:0", CurveServerSecretKey: server.Secret, AllowedClientKeys: []string{client.Public}},
			orchestrator.ClientConfig{CurveServerKey: server.Public, CurvePublicKey: client.Public, CurveSecretKey: client.Secret}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.cfg.Endpoint == "" {
				bc.cfg.Endpoint = "ipc://" + b.TempDir() + "/c.sock"
			}
			srv, err := orchestrator.NewServer(bc.cfg, orchtest.New(seedIF), nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Listen(); err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- srv.Run(ctx) }()
			defer func() { cancel(); <-done }()
			c, err := orchestrator.Dial(srv.Endpoint(), bc.ccfg)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			bg := context.Background()
			args := orchestrator.StatusArgs{Name: "cls"}
			if _, err := c.Status(bg, args); err != nil { // connect and handshake
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Status(bg, args); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func benchKeys(b *testing.B) orchestrator.KeyPair {
	k, err := orchestrator.NewKeyPair()
	if err != nil {
		b.Fatal(err)
	}
	return k
}

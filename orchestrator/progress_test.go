package orchestrator_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

// TestProgressNotices: while a command runs, and while another waits
// behind it, their clients get progress notices (running, unavailable,
// the same id), then the final reply; a retry with the same id while it
// runs gets the notices and the same final reply, and runs nothing.
func TestProgressNotices(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{ProgressInterval: 20 * time.Millisecond}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqDEALER, "progress")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	fake.SetHook(orchestrator.CmdSetBatch, func(context.Context) error {
		started <- struct{}{}
		<-release
		return nil
	})
	sb := `{"id":"s1","cmd":"set-batch","args":{"name":"cls","max_batch":4}}`
	p.send([]byte(sb))
	<-started
	p.send([]byte(`{"id":"s2","cmd":"remove","args":{"name":"cls"}}`)) // queued behind s1
	p.send([]byte(sb))                                                 // a retry of s1
	seen := map[string]int{}
	for seen["s1"] < 3 || seen["s2"] < 3 {
		rep, raw, ok := p.recv(time.Minute) // a hang guard
		if !ok {
			t.Fatalf("no progress notice; seen %v", seen)
		}
		if !rep.Running || rep.OK || rep.Error == nil || rep.Error.Code != orchestrator.CodeUnavailable {
			t.Fatalf("a reply before the command finished: %s", raw)
		}
		want := map[string]string{"s1": "set-batch still running after ", "s2": "remove queued for "}[rep.ID]
		if want == "" || !strings.HasPrefix(rep.Error.Message, want) || !strings.HasSuffix(rep.Error.Message, "; its reply follows") {
			t.Fatalf("progress notice %s", raw)
		}
		seen[rep.ID]++
	}
	close(release)
	final := map[string][]string{}
	for len(final["s1"]) < 2 || len(final["s2"]) < 1 {
		rep, raw, ok := p.recv(time.Minute)
		if !ok {
			t.Fatalf("final replies: got %v", final)
		}
		if rep.Running {
			continue // a notice sent before the command finished
		}
		if !rep.OK {
			t.Fatalf("final reply %s", raw)
		}
		final[rep.ID] = append(final[rep.ID], string(raw))
	}
	if final["s1"][0] != final["s1"][1] {
		t.Errorf("the retry got another reply: %s / %s", final["s1"][0], final["s1"][1])
	}
	if n := fake.CallCount(); n != 2 {
		t.Errorf("handler called %d times, want 2 (set-batch once, remove once)", n)
	}
}

// TestClientWaitsWhileServerWorks: a client waits for a command that takes
// longer than its timeout, as long as progress notices come; the notices
// come 50 times per client timeout, so only a stall of the whole server
// for a second could fail this.
func TestClientWaitsWhileServerWorks(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{ProgressInterval: 20 * time.Millisecond}, fake)
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{Timeout: time.Second})
	fake.SetHook(orchestrator.CmdSwap, func(context.Context) error {
		time.Sleep(2500 * time.Millisecond) // 2.5 client timeouts
		return nil
	})
	start := time.Now()
	if _, err := c.Swap(context.Background(), orchestrator.SwapArgs{Name: "cls"}); err != nil {
		t.Fatalf("swap after %v: %v", time.Since(start), err)
	}
	// With a deadline in the context, the deadline bounds the wait: the
	// last progress notice is the reply.
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	rep, _, err := c.Do(ctx, orchestrator.Request{Cmd: orchestrator.CmdSwap, Args: []byte(`{"name":"cls"}`)})
	if err != nil || rep.OK || !rep.Running || rep.Error == nil || rep.Error.Code != orchestrator.CodeUnavailable {
		t.Errorf("swap with a 300ms deadline: %+v, %v; want the last progress notice", rep, err)
	}
}

// TestShutdownAbandonsStuckCommand: a handler that ignores its context
// does not hold Run past ShutdownTimeout: its client is answered
// unavailable and Run returns.
func TestShutdownAbandonsStuckCommand(t *testing.T) {
	fake := orchtest.New(seedIF)
	ep := ipcEndpoint(t)
	srv, err := orchestrator.NewServer(orchestrator.ServerConfig{Endpoint: ep, ShutdownTimeout: 50 * time.Millisecond}, fake, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	p := newRawPeer(t, ep, zmqDEALER, "")
	stuck := make(chan struct{})
	defer close(stuck)
	started := make(chan struct{})
	fake.SetHook(orchestrator.CmdDeploy, func(context.Context) error {
		close(started)
		<-stuck // ignores its context
		return nil
	})
	p.send([]byte(`{"id":"d","cmd":"deploy","args":{"name":"det","model_id":3,"model":"zoo:resnet18"}}`))
	<-started
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Run did not return with a handler stuck")
	}
	for {
		rep, raw, ok := p.recv(time.Minute)
		if !ok {
			t.Fatal("no reply to the abandoned command")
		}
		if rep.Running {
			continue
		}
		if rep.ID != "d" || rep.OK || rep.Error.Code != orchestrator.CodeUnavailable || !strings.Contains(rep.Error.Message, "abandoned") {
			t.Fatalf("reply %s", raw)
		}
		break
	}
}

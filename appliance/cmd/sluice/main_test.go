package main

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"sluice/appliance"
)

// syncBuffer is a log sink safe for the supervisor's goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// watched runs a supervisor with drain timeout d over a signal channel
// the test feeds; exits receives the exit codes it asks for.
func watched(t *testing.T, d time.Duration) (sigs chan os.Signal, ctx context.Context, exits chan int, finished chan struct{}, logs *syncBuffer, done chan struct{}) {
	t.Helper()
	sigs = make(chan os.Signal, 2)
	exits = make(chan int, 2)
	finished = make(chan struct{})
	done = make(chan struct{})
	logs = &syncBuffer{}
	sup := &supervisor{exit: func(code int) { exits <- code }}
	sup.timeout.Store(int64(d))
	sup.log.Store(slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		defer close(done)
		sup.watch(sigs, cancel, finished)
	}()
	return sigs, ctx, exits, finished, logs, done
}

// hangGuard fails the test if ch yields nothing in a minute.
func hangGuard[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(time.Minute):
		t.Fatalf("%s: nothing after a minute", what)
		var zero T
		return zero
	}
}

// TestSecondSignalExitsAtOnce: the first SIGTERM starts the drain (the
// context ends); while the drain has not finished (it never does here,
// and the drain timeout is an hour away), a second SIGTERM exits with
// status 1.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	sigs, ctx, exits, _, logs, done := watched(t, time.Hour)
	sigs <- syscall.SIGTERM
	hangGuard(t, ctx.Done(), "context after the first SIGTERM")
	select {
	case code := <-exits:
		t.Fatalf("exit(%d) after one signal", code)
	default:
	}
	sigs <- syscall.SIGTERM
	if code := hangGuard(t, exits, "exit after the second SIGTERM"); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	hangGuard(t, done, "supervisor return")
	if l := logs.String(); !strings.Contains(l, "second signal: exiting at once") {
		t.Errorf("log: %s", l)
	}
}

// TestDrainTimeoutExits: a drain that does not finish within the drain
// timeout ends the process with status 1.
func TestDrainTimeoutExits(t *testing.T) {
	sigs, ctx, exits, _, logs, done := watched(t, 10*time.Millisecond)
	sigs <- syscall.SIGINT
	hangGuard(t, ctx.Done(), "context after SIGINT")
	if code := hangGuard(t, exits, "exit after the drain timeout"); code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	hangGuard(t, done, "supervisor return")
	if l := logs.String(); !strings.Contains(l, "drain did not finish within the drain timeout") {
		t.Errorf("log: %s", l)
	}
}

// TestFinishedDrainDoesNotExit: a drain that finishes leaves the exit to
// main (status 0), and a process that ends without a signal too.
func TestFinishedDrainDoesNotExit(t *testing.T) {
	sigs, ctx, exits, finished, _, done := watched(t, time.Hour)
	sigs <- syscall.SIGTERM
	hangGuard(t, ctx.Done(), "context after SIGTERM")
	close(finished)
	hangGuard(t, done, "supervisor return")
	select {
	case code := <-exits:
		t.Fatalf("exit(%d) after a finished drain", code)
	default:
	}

	_, _, exits, finished, _, done = watched(t, time.Hour)
	close(finished)
	hangGuard(t, done, "supervisor return without a signal")
	if len(exits) != 0 {
		t.Fatal("exit without a signal")
	}
}

// The counters' lines: one per port and IF, drops as flat keys (the
// router's unknown_model too); the periodic lines only when a counter
// moved.
func TestLogStats(t *testing.T) {
	st := appliance.Stats{
		Ports: []appliance.PortStats{{Name: "udp0", Completed: 5, Responses: 6, Drops: map[string]uint64{"unknown_model": 1, "malformed": 2}}},
		IFs:   []appliance.IFStats{{Name: "cls", Served: 5}},
	}
	var b bytes.Buffer
	logStats(slog.New(slog.NewTextHandler(&b, nil)), "counters", st)
	out := b.String()
	for _, want := range []string{"msg=counters port=udp0", "requests=5 responses=6", "drops_malformed=2 drops_unknown_model=1", "msg=counters if=cls served=5"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "map[") || strings.Contains(out, "{") {
		t.Errorf("log holds a Go map or a JSON blob:\n%s", out)
	}
	k := statsKey(st)
	if statsKey(st) != k {
		t.Fatal("the same counters give two keys")
	}
	st.IFs[0].Served++
	if statsKey(st) == k {
		t.Fatal("a served request does not change the key: the line would not be logged")
	}
}

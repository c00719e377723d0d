package appliance

import (
	"context"
	"net/netip"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/dptest"
	"sluice/dataplane/wire"
	"sluice/libml/ort"
)

// running is an appliance started by a test.
type running struct {
	*Appliance
	stop   context.CancelFunc
	runErr chan error
}

// startAppliance parses profile text, makes the appliance and runs it until
// the returned stop is called (stop waits for Run and checks its error).
// testReassemblyTimeoutMS is the reassembly timeout of test profiles that
// do not set one.
const testReassemblyTimeoutMS = 30000

func startAppliance(t *testing.T, name, text string) (*running, func()) {
	t.Helper()
	prof, err := ParseProfile(name, text)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "reassembly_timeout_ms") {
		// A loaded test machine can take longer than the default 100 ms
		// to read a request's datagrams; a test that is about the
		// timeout sets it.
		prof.Appliance.ReassemblyTimeoutMS = testReassemblyTimeoutMS
	}
	ctx := context.Background()
	a, err := New(ctx, prof, nil)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	r := &running{Appliance: a, stop: cancel, runErr: make(chan error, 1)}
	go func() { r.runErr <- a.Run(runCtx) }()
	stopped := false
	stop := func() {
		t.Helper()
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-r.runErr; err != nil {
			t.Errorf("run: %v", err)
		}
	}
	t.Cleanup(func() {
		stop()
		a.Close()
	})
	return r, stop
}

// metricValue is the value of the sample name (metric name and labels,
// as the exposition writes them) in a /metrics body; the test fails
// without one.
func metricValue(t *testing.T, body, name string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("metrics lack %s", name)
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// okOutput waits for request id's response (a hang guard, not a timing)
// and returns its output; the test fails unless the status is ok.
func okOutput(t *testing.T, cl *dptest.Client, id uint64) []byte {
	t.Helper()
	r, ok := cl.Wait(id, 2*time.Minute)
	if !ok {
		t.Fatalf("request %d: no response", id)
	}
	if r.Status != wire.StatusOK {
		t.Fatalf("request %d: status %v", id, r.Status)
	}
	return r.Output
}

// sendBEThenRT sends a best-effort request (model 1, id be) and then a
// real-time one (model 2, id rt). With holds set, a hold the caller armed
// scripts a preemption: the real-time request goes only once holds has
// counted the best-effort request's work held on the device, so its
// arrival certainly preempts that work. Without, they go back to back.
func sendBEThenRT(t *testing.T, cl *dptest.Client, to netip.AddrPort, be, rt uint64, bePayload, rtPayload []byte, holds func() int64) {
	t.Helper()
	var h int64
	if holds != nil {
		h = holds()
	}
	if err := cl.Send(to, 1, be, 0, bePayload); err != nil {
		t.Fatal(err)
	}
	if holds != nil {
		deadline := time.Now().Add(2 * time.Minute) // a hang guard
		for holds() == h {
			if time.Now().After(deadline) {
				t.Fatalf("request %d: the best-effort work was never held", be)
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	if err := cl.Send(to, 2, rt, wire.FlagRT, rtPayload); err != nil {
		t.Fatal(err)
	}
}

// requireORT skips the test when ONNX Runtime is not installed, or fails
// it under SLUICE_REQUIRE_DEPS=1.
func requireORT(t *testing.T) {
	t.Helper()
	if p, err := ort.LibraryPath(); err != nil || !fileExists(p) {
		if os.Getenv("SLUICE_REQUIRE_DEPS") == "1" {
			t.Fatalf("ONNX Runtime is required (SLUICE_REQUIRE_DEPS=1): %v", err)
		}
		t.Skipf("ONNX Runtime not available (run `make deps`): %v", err)
	}
}

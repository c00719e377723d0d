package appliance

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
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

package appliance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/dataplane/wire"
	"sluice/orchestrator"
)

const controlProfile = `
[appliance]
log_level = "warn"
threads = 2
metrics = "127.0.0.1:0"
control = "ipc://%s"

[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"

[[if]]
name = "cls"
model_id = 7
model = "onnx:%s"
backend = "cpu"
class = "rt"
slo_ms = 50
max_batch = 4
queue_len = 1024
input = "f32"
input_shape = [3, 48, 192]
`

// startControlled writes a profile (tmpl with %s where the control
// socket's path goes) into a temporary directory, starts the appliance
// from it and waits for its control endpoint.
func startControlled(t *testing.T, tmpl string) (a *running, stop func(), path, text string) {
	t.Helper()
	dir := t.TempDir()
	text = fmt.Sprintf(tmpl, filepath.Join(dir, "ctl.sock"))
	path = filepath.Join(dir, "p.toml")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	a, stop = startAppliance(t, path, text)
	a.SetProfilePath(path)
	for a.ControlEndpoint() == "" {
		time.Sleep(time.Millisecond)
	}
	return a, stop, path, text
}

// TestControlUnderLoad drives the control plane while requests flow:
// swaps, a resize, batch changes, an invalid reload, bad commands, a deploy
// and a remove, and a drain. No request may be lost or answered twice.
func TestControlUnderLoad(t *testing.T) {
	model := classifierPath(t)
	a, stop, path, text := startControlled(t, fmt.Sprintf(controlProfile, "%s", model))
	ctx := context.Background()
	addr, _ := a.PortAddr("udp0")
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	client := newClient(t, 3)
	payload := f32bytes(make([]float32, 3*48*192))

	// load: 400 requests over about 4 s while commands run
	const n = 400
	var sendWG sync.WaitGroup
	sendWG.Add(1)
	go func() {
		defer sendWG.Done()
		for id := uint64(1); id <= n; id++ {
			_ = client.Send(addr, 7, id, wire.FlagRT, payload)
			time.Sleep(10 * time.Millisecond)
		}
	}()

	var st orchestrator.StatusReply
	if st, err = cl.Status(ctx, orchestrator.StatusArgs{}); err != nil || len(st.IFs) != 1 || st.IFs[0].Name != "cls" || st.Version != buildinfo.Version() {
		t.Fatalf("status: %+v, %v", st, err)
	}
	sw, err := cl.Swap(ctx, orchestrator.SwapArgs{Name: "cls"})
	if err != nil {
		t.Fatalf("swap: %v", err)
	}
	// the only IF asks for half the units and gets them all (max-min
	// fairness leaves nothing idle); the reply says both
	if st, err := cl.Resize(ctx, orchestrator.ResizeArgs{Name: "cls", Share: 0.5}); err != nil || st.Demand != 0.5 || st.Share != 1 {
		t.Fatalf("resize: demand %v share %v, %v; want 0.5 asked, 1 given", st.Demand, st.Share, err)
	}
	if _, err := cl.Resize(ctx, orchestrator.ResizeArgs{Name: "cls", Share: 0.5}); err != nil {
		t.Fatalf("resize: %v", err)
	}
	if s, err := cl.SetBatch(ctx, orchestrator.SetBatchArgs{Name: "cls", MaxBatch: 8}); err != nil || s.MaxBatch != 8 {
		t.Fatalf("set-batch: %+v, %v", s, err)
	}
	// an invalid profile is refused and changes nothing
	bad := filepath.Join(filepath.Dir(path), "bad.toml")
	_ = os.WriteFile(bad, []byte("[appliance]\nthreads = \"many\"\n"), 0o644)
	var oe *orchestrator.Error
	if _, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{Path: bad}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeInvalidProfile {
		t.Fatalf("invalid reload: %v", err)
	}
	// bad commands
	if _, err := cl.SetBatch(ctx, orchestrator.SetBatchArgs{Name: "nope", MaxBatch: 4}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeNotFound {
		t.Fatalf("set-batch on a missing IF: %v", err)
	}
	if _, err := cl.Resize(ctx, orchestrator.ResizeArgs{Name: "cls", Share: 3}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeBadRequest {
		t.Fatalf("resize to 300%%: %v", err)
	}
	if _, err := cl.Deploy(ctx, orchestrator.DeployArgs{Name: "dup", ModelID: 7, Model: "onnx:" + model}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeConflict {
		t.Fatalf("deploy on a taken model id: %v", err)
	}
	sendWG.Wait()

	// Every request is answered exactly once. On a loaded machine the
	// queue may overflow while the IF runs on half the units, and a
	// request may be predicted to miss its 50 ms SLO: overloaded and
	// deadline_exceeded are answers, counted; anything else is a failure.
	lost, failed, over := 0, 0, 0
	for id := uint64(1); id <= n; id++ {
		r, ok := client.Wait(id, 10*time.Second)
		switch {
		case !ok:
			lost++
		case r.Status == wire.StatusOverloaded || r.Status == wire.StatusDeadline:
			over++
		case r.Status != wire.StatusOK:
			failed++
			t.Errorf("request %d: %v", id, r.Status)
		}
	}
	t.Logf("%d requests across swaps and a resize: %d lost, %d failed, %d overloaded or deadline_exceeded", n, lost, failed, over)
	if lost != 0 || failed != 0 {
		t.Fatalf("%d lost and %d failed of %d requests across swaps and resizes", lost, failed, n)
	}
	t.Logf("swap: prepare %.1f ms, gap %.1f µs", sw.PrepareMS, sw.GapUS)
	if sw.GapUS <= 0 || math.IsNaN(sw.GapUS) {
		t.Fatalf("swap gap %v µs not measured", sw.GapUS)
	}

	// a reload that adds an IF, then one that removes it
	text2 := text + fmt.Sprintf(`
[[if]]
name = "cls2"
model_id = 8
model = "onnx:%s"
input = "f32"
input_shape = [3, 48, 192]
max_batch = 2
`, model)
	_ = os.WriteFile(path, []byte(text2), 0o644)
	res, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{})
	if err != nil || len(res.Added) != 1 || res.Added[0] != "cls2" {
		t.Fatalf("reload adding cls2: %+v, %v", res, err)
	}
	_ = client.Send(addr, 8, 5000, 0, payload)
	if r, ok := client.Wait(5000, 10*time.Second); !ok || r.Status != wire.StatusOK {
		t.Fatalf("request to the reloaded IF: %v %v", ok, r.Status)
	}
	if err := cl.Remove(ctx, orchestrator.RemoveArgs{Name: "cls2"}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	_ = client.Send(addr, 8, 5001, 0, payload)
	if r, ok := client.Wait(5001, 5*time.Second); !ok || r.Status != wire.StatusUnknownModel {
		t.Fatalf("request after remove: %v %v", ok, r.Status)
	}

	// drain: new requests are refused, nothing is pending
	dr, err := cl.Drain(ctx, orchestrator.DrainArgs{TimeoutMS: 5000})
	if err != nil || !dr.Drained {
		t.Fatalf("drain: %+v, %v", dr, err)
	}
	_ = client.Send(addr, 7, 6000, 0, payload)
	if r, ok := client.Wait(6000, 5*time.Second); !ok || r.Status != wire.StatusShuttingDown {
		t.Fatalf("request after drain: %v %v", ok, r.Status)
	}
	readyz := "http://" + a.MetricsAddr() + "/readyz"
	if code, body := httpGet(t, readyz); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz while drained: %d %q, want 503", code, body)
	}
	// resume undoes the drain: admitted and ready again; a second resume
	// changes nothing
	if res, err := cl.Resume(ctx, orchestrator.ResumeArgs{}); err != nil || !res.WasDraining {
		t.Fatalf("resume: %+v, %v", res, err)
	}
	if code, body := httpGet(t, readyz); code != http.StatusOK {
		t.Fatalf("/readyz after resume: %d %q, want 200", code, body)
	}
	_ = client.Send(addr, 7, 6001, 0, payload)
	if r, ok := client.Wait(6001, 5*time.Second); !ok || r.Status != wire.StatusOK {
		t.Fatalf("request after resume: %v %v", ok, r.Status)
	}
	if res, err := cl.Resume(ctx, orchestrator.ResumeArgs{}); err != nil || res.WasDraining {
		t.Fatalf("second resume: %+v, %v", res, err)
	}
	stop()
	// the process's own drain (Run's context ended) cannot be undone
	if _, err := (&controlHandler{a: a.Appliance}).Resume(ctx, orchestrator.ResumeArgs{}); !errors.As(err, &oe) || oe.Code != orchestrator.CodeConflict {
		t.Fatalf("resume during shutdown: %v, want conflict", err)
	}
	if d := client.Duplicates(); d != 0 {
		t.Fatalf("%d duplicate response fragments", d)
	}
	if s := a.Stats(); s.Ports[0].Port.BufInUse != 0 {
		t.Fatalf("%d buffers in use after the run", s.Ports[0].Port.BufInUse)
	}
}

// A reload that changes what a swap cannot (class, queue length) replaces
// the IF make before break: requests sent throughout are all answered
// once by a live IF (ok, or deadline / overloaded where the machine is
// too slow for the SLO while the replacement loads), none unknown_model
// and none lost (the replacement loads while the old IF serves, and the
// model id moves to it in one step); a request sent while the
// replacement is loaded, before the switch, is answered ok; and the new
// spec is in effect.
func TestReloadReplacesWithoutGap(t *testing.T) {
	model := classifierPath(t)
	// the timeout written out: startAppliance would set one the file does
	// not have, and a reload would report it as a change
	a, stop, path, text := startControlled(t, strings.Replace(fmt.Sprintf(controlProfile, "%s", model),
		"[appliance]\n", "[appliance]\nreassembly_timeout_ms = 30000\n", 1))
	ctx := context.Background()
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	addr, _ := a.PortAddr("udp0")
	client := newClient(t, 71)
	payload := f32bytes(make([]float32, 3*48*192))

	changed := strings.Replace(strings.Replace(text, `class = "rt"`, `class = "be"`, 1), "queue_len = 1024", "queue_len = 512", 1)
	if changed == text {
		t.Fatal("the profile's class and queue_len were not found")
	}
	var sent atomic.Int64
	stopSend := make(chan struct{})
	sending := make(chan struct{})
	go func() {
		defer close(sending)
		for id := uint64(1); ; id++ {
			select {
			case <-stopSend:
				return
			default:
			}
			_ = client.Send(addr, 7, id, 0, payload)
			sent.Store(int64(id))
			time.Sleep(2 * time.Millisecond)
		}
	}()
	for sent.Load() < 20 {
		time.Sleep(time.Millisecond)
	}
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	// once the replacement has loaded, and before the routes move, the
	// old IF still serves: a request sent then is answered by it (ok, or,
	// on a machine too slow for the 50 ms SLO while two IFs load and
	// serve, deadline or overloaded: a live IF's answers), never
	// unknown_model and never lost
	held := newClient(t, 72)
	hook := func() {
		_ = held.Send(addr, 7, 1, 0, payload)
		r, got := held.Wait(1, 10*time.Second)
		if !got || (r.Status != wire.StatusOK && r.Status != wire.StatusDeadline && r.Status != wire.StatusOverloaded) {
			t.Errorf("request while the replacement was loaded, before the switch: answered %v, %v", got, r.Status)
		}
	}
	a.replaceLoaded.Store(&hook)
	res, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{})
	if err != nil || len(res.Changed) != 1 || res.Changed[0] != "cls" {
		t.Fatalf("reload: %+v, %v", res, err)
	}
	at := sent.Load()
	for sent.Load() < at+20 {
		time.Sleep(time.Millisecond)
	}
	close(stopSend)
	<-sending
	n := uint64(sent.Load())
	// every request is answered exactly once by a live IF: ok, or, where
	// the machine is too slow for the 50 ms SLO while the replacement
	// loads beside the old IF, deadline or overloaded (answers, not
	// losses); none unknown_model, none lost, none with another status
	ok, late, unknown, lost, other := 0, 0, 0, 0, 0
	for id := uint64(1); id <= n; id++ {
		r, got := client.Wait(id, 10*time.Second)
		switch {
		case !got:
			lost++
		case r.Status == wire.StatusOK:
			ok++
		case r.Status == wire.StatusDeadline || r.Status == wire.StatusOverloaded:
			late++
		case r.Status == wire.StatusUnknownModel:
			unknown++
		default:
			other++
			t.Errorf("request %d answered %v", id, r.Status)
		}
	}
	t.Logf("%d requests across a replacing reload: %d ok, %d deadline or overloaded, %d unknown_model, %d unanswered, %d other",
		n, ok, late, unknown, lost, other)
	if unknown != 0 {
		t.Fatalf("%d of %d requests answered unknown_model across the reload", unknown, n)
	}
	if lost != 0 || other != 0 || client.Duplicates() != 0 {
		t.Fatalf("%d of %d requests unanswered, %d answered with an error, %d duplicates", lost, n, other, client.Duplicates())
	}
	st, err := cl.Status(ctx, orchestrator.StatusArgs{Name: "cls"})
	if err != nil || len(st.IFs) != 1 || st.IFs[0].Class != "be" || st.IFs[0].QueueLen != 512 {
		t.Fatalf("status after the reload: %+v, %v", st, err)
	}
	// the profile file is the truth: an IF deployed by command and not
	// written into it goes at the next reload, and the reply says so
	if _, err := cl.Deploy(ctx, orchestrator.DeployArgs{Name: "a-extra", ModelID: 11, Model: "onnx:" + model,
		Input: "f32", InputShape: []int64{3, 48, 192}}); err != nil {
		t.Fatal(err)
	}
	// status lists IFs by name (the deployed one first), with the p99 and
	// the bottleneck of an IF that served
	st, err = cl.Status(ctx, orchestrator.StatusArgs{})
	if err != nil || len(st.IFs) != 2 || st.IFs[0].Name != "a-extra" || st.IFs[1].Name != "cls" {
		t.Fatalf("status: %+v, %v; want a-extra, cls", st, err)
	}
	if c := st.IFs[1]; c.P99MS <= 0 || (c.Bottleneck != "cpu" && c.Bottleneck != "compute") {
		t.Fatalf("status of an IF that served: p99 %v ms, bottleneck %q", c.P99MS, c.Bottleneck)
	}
	if res, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{}); err != nil || len(res.Removed) != 1 || res.Removed[0] != "a-extra" || len(res.RestartNeeded) != 0 {
		t.Fatalf("reload after a deploy: %+v, %v; want a-extra removed", res, err)
	}
	// [appliance] and [[port]] changes are not applied, and the reply
	// names them
	restart := strings.Replace(strings.Replace(changed, "threads = 2", "threads = 1", 1), `listen = "127.0.0.1:0"`, `listen = "127.0.0.1:9"`, 1)
	if err := os.WriteFile(path, []byte(restart), 0o644); err != nil {
		t.Fatal(err)
	}
	if res, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{}); err != nil || !slices.Equal(res.RestartNeeded, []string{"appliance.threads", "port[0].listen"}) {
		t.Fatalf("reload with [appliance] and [[port]] changes: %+v, %v", res, err)
	}
	stop()
}

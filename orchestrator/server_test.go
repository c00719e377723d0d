package orchestrator_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/orchestrator"
	"sluice/orchestrator/orchtest"
)

var seedIF = orchestrator.IFStatus{Name: "cls", ModelID: 1, Model: "zoo:mlp", Backend: "cpu", Class: "be",
	SLOMS: 20, MaxBatch: 8, QueueLen: 256, Share: 0.3, State: "active"}

// TestRoundTripEveryCommand calls each command through the client and
// checks that the handler got exactly the typed arguments sent and the
// client got the handler's result.
func TestRoundTripEveryCommand(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{}, fake)
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{})
	ctx := context.Background()

	deploy := orchestrator.DeployArgs{Name: "det", ModelID: 3, Model: "zoo:resnet18", Backend: "ort",
		Class: "rt", SLOMS: 25, MaxBatch: 16, QueueLen: 64, Input: "u8-hwc",
		Mean: []float32{0.5, 0.5, 0.5}, Std: []float32{0.2, 0.2, 0.2}, InputShape: []int64{3, 224, 224}, Share: 0.4}
	st, err := c.Deploy(ctx, deploy)
	if err != nil {
		t.Fatalf("deploy: %v", err)
	}
	if st.Name != "det" || st.ModelID != 3 || st.Class != "rt" || st.Share != 0.4 || st.MaxBatch != 16 {
		t.Errorf("deploy reply = %+v", st)
	}
	resize := orchestrator.ResizeArgs{Name: "det", Share: 0.6}
	if st, err = c.Resize(ctx, resize); err != nil || st.Share != 0.6 {
		t.Fatalf("resize = %+v, %v", st, err)
	}
	resizeUnits := orchestrator.ResizeArgs{Name: "det", Units: 12}
	if st, err = c.Resize(ctx, resizeUnits); err != nil || st.Units != 12 {
		t.Fatalf("resize units = %+v, %v", st, err)
	}
	swap := orchestrator.SwapArgs{Name: "det", Model: "onnx:/m.onnx", Share: 0.5, MaxBatch: 4}
	sw, err := c.Swap(ctx, swap)
	if err != nil || sw.IF.Model != "onnx:/m.onnx" || sw.GapUS != 42 || sw.PrepareMS != 1.5 {
		t.Fatalf("swap = %+v, %v", sw, err)
	}
	setBatch := orchestrator.SetBatchArgs{Name: "det", MaxBatch: 32, MinBatch: 2}
	if st, err = c.SetBatch(ctx, setBatch); err != nil || st.MaxBatch != 32 || st.MinBatch != 2 {
		t.Fatalf("set-batch = %+v, %v", st, err)
	}
	reload := orchestrator.ReloadArgs{Path: "/etc/sluice/p.toml"}
	rr, err := c.ReloadProfile(ctx, reload)
	if err != nil || rr.Path != "/etc/sluice/p.toml" || !reflect.DeepEqual(rr.Unchanged, []string{"cls", "det"}) {
		t.Fatalf("reload-profile = %+v, %v", rr, err)
	}
	status := orchestrator.StatusArgs{}
	sr, err := c.Status(ctx, status)
	if err != nil || len(sr.IFs) != 2 || sr.IFs[0].Name != "cls" || sr.IFs[1].Name != "det" || sr.Version != "fake" {
		t.Fatalf("status = %+v, %v", sr, err)
	}
	statusOne := orchestrator.StatusArgs{Name: "cls"}
	if sr, err = c.Status(ctx, statusOne); err != nil || len(sr.IFs) != 1 || !reflect.DeepEqual(sr.IFs[0], seedIF) {
		t.Fatalf("status cls = %+v, %v", sr, err)
	}
	remove := orchestrator.RemoveArgs{Name: "det"}
	var rm orchestrator.RemoveResult
	if err := c.Call(ctx, orchestrator.CmdRemove, remove, &rm); err != nil || rm.Name != "det" {
		t.Fatalf("remove = %+v, %v", rm, err)
	}
	drain := orchestrator.DrainArgs{TimeoutMS: 1500}
	dr, err := c.Drain(ctx, drain)
	if err != nil || !dr.Drained || !fake.Draining() {
		t.Fatalf("drain = %+v, %v", dr, err)
	}

	want := []orchtest.Call{
		{Cmd: orchestrator.CmdDeploy, Args: deploy},
		{Cmd: orchestrator.CmdResize, Args: resize},
		{Cmd: orchestrator.CmdResize, Args: resizeUnits},
		{Cmd: orchestrator.CmdSwap, Args: swap},
		{Cmd: orchestrator.CmdSetBatch, Args: setBatch},
		{Cmd: orchestrator.CmdReloadProfile, Args: reload},
		{Cmd: orchestrator.CmdStatus, Args: status},
		{Cmd: orchestrator.CmdStatus, Args: statusOne},
		{Cmd: orchestrator.CmdRemove, Args: remove},
		{Cmd: orchestrator.CmdDrain, Args: drain},
	}
	if got := fake.Calls(); !reflect.DeepEqual(got, want) {
		t.Errorf("handler calls:\n got %+v\nwant %+v", got, want)
	}
	if ifs := fake.IFs(); len(ifs) != 1 || ifs[0].Name != "cls" {
		t.Errorf("IFs after remove = %+v", ifs)
	}
}

// TestWireFormat checks the exact JSON of replies, as documented.
func TestWireFormat(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqDEALER, "")

	_, raw := p.call(`{"id":"r1","cmd":"remove","args":{"name":"cls"}}`)
	if want := `{"id":"r1","ok":true,"data":{"name":"cls"}}`; string(raw) != want {
		t.Errorf("ok reply = %s, want %s", raw, want)
	}
	_, raw = p.call(`{"id":"r2","cmd":"remove","args":{"name":"cls"}}`)
	if want := `{"id":"r2","ok":false,"error":{"code":"not_found","message":"no IF named \"cls\""}}`; string(raw) != want {
		t.Errorf("error reply = %s, want %s", raw, want)
	}
	// Absent, null and empty args are the same.
	for i, body := range []string{`{"id":"s%d","cmd":"status"}`, `{"id":"s%d","cmd":"status","args":null}`, `{"id":"s%d","cmd":"status","args":{}}`} {
		rep, _ := p.call(fmt.Sprintf(body, i))
		if !rep.OK || rep.ID != fmt.Sprintf("s%d", i) {
			t.Errorf("%s: reply %+v", body, rep)
		}
	}
}

// TestRejectsBadRequests sends malformed and invalid requests and checks
// the error code, that the message names the problem, and that the
// handler was never called.
func TestRejectsBadRequests(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqDEALER, "")
	before := fake.IFs()

	huge := `{"id":"big","cmd":"status","args":{"name":"` + strings.Repeat("x", orchestrator.DefaultMaxRequestBytes) + `"}}`
	cases := []struct {
		name, body string
		code       orchestrator.Code
		id, msg    string
	}{
		{"not json", `hello`, "bad_request", "", "not a JSON object"},
		{"empty", ``, "bad_request", "", "not a JSON object"},
		{"array", `[1,2]`, "bad_request", "", "not a JSON object"},
		{"truncated", `{"id":"t1","cmd":"status"`, "bad_request", "", "not valid JSON"},
		{"syntax", `{"id":"t2","cmd":"status",}`, "bad_request", "", "not valid JSON"},
		{"trailing", `{"id":"t3","cmd":"status"} {}`, "bad_request", "", "trailing data"},
		{"bad utf8", "{\"id\":\"t4\",\"cmd\":\"status\xff\"}", "bad_request", "", "UTF-8"},
		{"unknown top field", `{"id":"t5","cmd":"status","extra":1}`, "bad_request", "t5", `unknown field "extra"`},
		{"empty id", `{"id":"","cmd":"status"}`, "bad_request", "", "id: required"},
		{"missing id", `{"cmd":"status"}`, "bad_request", "", "id: required"},
		{"id number", `{"id":7,"cmd":"status"}`, "bad_request", "", "id: want a string"},
		{"id too long", `{"id":"` + strings.Repeat("i", 200) + `","cmd":"status"}`, "bad_request", "", "longer than 128"},
		{"missing cmd", `{"id":"t6"}`, "bad_request", "t6", "cmd: required"},
		{"unknown command", `{"id":"t7","cmd":"explode"}`, "unknown_command", "t7", `unknown command "explode"`},
		{"args not object", `{"id":"t8","cmd":"status","args":[1]}`, "bad_request", "t8", "args: want a JSON object"},
		{"unknown arg", `{"id":"t9","cmd":"remove","args":{"name":"cls","force":true}}`, "bad_request", "t9", `args: unknown field "force"`},
		{"wrong type string", `{"id":"t10","cmd":"deploy","args":{"name":"x","model_id":3,"model":"zoo:m","slo_ms":"fast"}}`, "bad_request", "t10", "args.slo_ms: want a number, got string"},
		{"wrong type number", `{"id":"t11","cmd":"remove","args":{"name":5}}`, "bad_request", "t11", "args.name: want a string, got number"},
		{"model_id range", `{"id":"t12","cmd":"deploy","args":{"name":"x","model_id":70000,"model":"zoo:m"}}`, "bad_request", "t12", "args.model_id: want an integer in 0..65535"},
		{"model_id negative", `{"id":"t13","cmd":"deploy","args":{"name":"x","model_id":-1,"model":"zoo:m"}}`, "bad_request", "t13", "args.model_id"},
		{"fractional int", `{"id":"t14","cmd":"set-batch","args":{"name":"cls","max_batch":2.5}}`, "bad_request", "t14", "args.max_batch: want an integer"},
		{"missing required", `{"id":"t15","cmd":"deploy","args":{"name":"x","model_id":3}}`, "bad_request", "t15", "args.model: required"},
		{"null required", `{"id":"t16","cmd":"remove","args":{"name":null}}`, "bad_request", "t16", "args.name: required"},
		{"misspelt required", `{"id":"t16b","cmd":"set-batch","args":{"name":"cls","max_bacth":4}}`, "bad_request", "t16b", `args: unknown field "max_bacth"`},
		{"missing model_id", `{"id":"t17","cmd":"deploy","args":{"name":"x","model":"zoo:m"}}`, "bad_request", "t17", "args.model_id: required"},
		{"empty name", `{"id":"t18","cmd":"remove","args":{"name":""}}`, "bad_request", "t18", "args.name: must not be empty"},
		{"bad name", `{"id":"t19","cmd":"remove","args":{"name":"a b"}}`, "bad_request", "t19", "only letters"},
		{"bad class", `{"id":"t20","cmd":"deploy","args":{"name":"x","model_id":3,"model":"zoo:m","class":"vip"}}`, "bad_request", "t20", `args.class "vip"`},
		{"share range", `{"id":"t21","cmd":"resize","args":{"name":"cls","share":1.5}}`, "bad_request", "t21", "0 < share <= 1"},
		{"share and units", `{"id":"t22","cmd":"resize","args":{"name":"cls","share":0.5,"units":4}}`, "bad_request", "t22", "not both"},
		{"neither share nor units", `{"id":"t23","cmd":"resize","args":{"name":"cls"}}`, "bad_request", "t23", "share or units is required"},
		{"min above max", `{"id":"t24","cmd":"set-batch","args":{"name":"cls","max_batch":4,"min_batch":8}}`, "bad_request", "t24", "above max_batch"},
		{"batch range", `{"id":"t25","cmd":"set-batch","args":{"name":"cls","max_batch":0}}`, "bad_request", "t25", "out of range 1..1024"},
		{"drain range", `{"id":"t26","cmd":"drain","args":{"timeout_ms":-5}}`, "bad_request", "t26", "out of range"},
		{"swap share", `{"id":"t27","cmd":"swap","args":{"name":"cls","share":-0.1}}`, "bad_request", "t27", "0 < share <= 1"},
		{"oversized", huge, "bad_request", "", "the limit is 1048576"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p.t = t
			rep, raw := p.call(tc.body)
			if rep.OK || rep.Error == nil {
				t.Fatalf("reply %s: want an error", raw)
			}
			if rep.Error.Code != tc.code || !strings.Contains(rep.Error.Message, tc.msg) {
				t.Errorf("error = %s: %q; want %s containing %q", rep.Error.Code, rep.Error.Message, tc.code, tc.msg)
			}
			if rep.ID != tc.id {
				t.Errorf("reply id = %q, want %q", rep.ID, tc.id)
			}
		})
	}
	p.t = t
	// Two body frames from one DEALER.
	p.send([]byte(`{"id":"m1","cmd":"status"}`), []byte(`{"id":"m2","cmd":"status"}`))
	if rep, raw, ok := p.recv(5 * time.Second); !ok || rep.Error == nil || !strings.Contains(rep.Error.Message, "one JSON frame") {
		t.Errorf("multi-frame reply = %s (ok %v)", raw, ok)
	}
	if n := fake.CallCount(); n != 0 {
		t.Errorf("handler called %d times: %+v", n, fake.Calls())
	}
	if after := fake.IFs(); !reflect.DeepEqual(before, after) {
		t.Errorf("state changed: %+v -> %+v", before, after)
	}
	// A message far over the cap drops that connection; the server goes on.
	p.send([]byte(strings.Repeat("y", 5*orchestrator.DefaultMaxRequestBytes)))
	if _, raw, ok := p.recv(300 * time.Millisecond); ok {
		t.Errorf("reply to a message over the hard cap: %.100s", raw)
	}
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{})
	if _, err := c.Status(context.Background(), orchestrator.StatusArgs{}); err != nil {
		t.Errorf("status after a dropped connection: %v", err)
	}
}

// TestHandlerErrorCodes checks how handler errors become reply codes.
func TestHandlerErrorCodes(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{CommandTimeout: 200 * time.Millisecond}, fake)
	c := dial(t, srv.Endpoint(), orchestrator.ClientConfig{})
	ctx := context.Background()
	cases := []struct {
		name string
		hook func(context.Context) error
		code orchestrator.Code
		msg  string
	}{
		{"typed", func(context.Context) error { return orchestrator.Errorf(orchestrator.CodeConflict, "busy swapping") }, "conflict", "busy swapping"},
		{"wrapped typed", func(context.Context) error {
			return fmt.Errorf("loading: %w", orchestrator.Errorf(orchestrator.CodeInvalidProfile, "line 3"))
		}, "invalid_profile", "line 3"},
		{"plain", func(context.Context) error { return errors.New("disk on fire") }, "internal", "disk on fire"},
		{"unknown code", func(context.Context) error { return &orchestrator.Error{Code: "weird", Message: "m"} }, "internal", `unknown code "weird"`},
		{"panic", func(context.Context) error { panic("boom") }, "internal", "panicked: boom"},
		{"timeout", func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, "unavailable", "timed out after 200ms"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fake.SetHook(orchestrator.CmdSwap, tc.hook)
			_, err := c.Swap(ctx, orchestrator.SwapArgs{Name: "cls"})
			var e *orchestrator.Error
			if !errors.As(err, &e) {
				t.Fatalf("err = %v, want *orchestrator.Error", err)
			}
			if e.Code != tc.code || !strings.Contains(e.Message, tc.msg) {
				t.Errorf("error = %v; want %s containing %q", e, tc.code, tc.msg)
			}
			if got := orchestrator.ErrorCode(err); got != tc.code {
				t.Errorf("ErrorCode = %s", got)
			}
		})
	}
	fake.SetHook(orchestrator.CmdSwap, nil)
	if err := c.Remove(ctx, orchestrator.RemoveArgs{Name: "nope"}); orchestrator.ErrorCode(err) != orchestrator.CodeNotFound {
		t.Errorf("remove nope: %v", err)
	}
	// The server still works after a panic.
	if _, err := c.Status(ctx, orchestrator.StatusArgs{}); err != nil {
		t.Errorf("status: %v", err)
	}
}

// TestDuplicateRequestID checks idempotent retries.
func TestDuplicateRequestID(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{}, fake)
	a := newRawPeer(t, srv.Endpoint(), zmqDEALER, "client-a")

	deploy := `{"id":"d1","cmd":"deploy","args":{"name":"det","model_id":3,"model":"zoo:resnet18"}}`
	rep1, raw1 := a.call(deploy)
	rep2, raw2 := a.call(deploy)
	if !rep1.OK || string(raw1) != string(raw2) || !rep2.OK {
		t.Fatalf("replies differ or failed:\n%s\n%s", raw1, raw2)
	}
	if n := fake.CallCount(); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
	// The same id for another request is a conflict, and runs nothing.
	rep, _ := a.call(`{"id":"d1","cmd":"remove","args":{"name":"det"}}`)
	if rep.OK || rep.Error.Code != orchestrator.CodeConflict {
		t.Errorf("reused id: %+v", rep)
	}
	// Another client's id space is its own: its deploy runs (and fails,
	// the IF exists).
	b := newRawPeer(t, srv.Endpoint(), zmqDEALER, "client-b")
	rep, _ = b.call(deploy)
	if rep.OK || rep.Error.Code != orchestrator.CodeConflict || fake.CallCount() != 2 {
		t.Errorf("other client: %+v, calls %d", rep, fake.CallCount())
	}
	// A retry while the first is running is answered when it finishes.
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	fake.SetHook(orchestrator.CmdSetBatch, func(ctx context.Context) error {
		started <- struct{}{}
		<-release
		return nil
	})
	sb := `{"id":"b1","cmd":"set-batch","args":{"name":"det","max_batch":4}}`
	a.send([]byte(sb))
	<-started
	a.send([]byte(sb))
	if _, raw, ok := a.recv(200 * time.Millisecond); ok {
		t.Fatalf("reply before the command finished: %s", raw)
	}
	close(release)
	r1, x1, ok1 := a.recv(5 * time.Second)
	r2, x2, ok2 := a.recv(5 * time.Second)
	if !ok1 || !ok2 || !r1.OK || !r2.OK || string(x1) != string(x2) {
		t.Errorf("replies to a running duplicate: %s / %s", x1, x2)
	}
	if n := fake.CallCount(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
}

// TestTimeoutOverrun: a handler that ignores its context is reported as
// still running; a retry after it finishes gets its real reply.
func TestTimeoutOverrun(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{CommandTimeout: 100 * time.Millisecond}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqDEALER, "slow-client")
	done := make(chan struct{})
	fake.SetHook(orchestrator.CmdResize, func(context.Context) error {
		time.Sleep(900 * time.Millisecond) // ignores ctx
		close(done)
		return nil
	})
	body := `{"id":"z1","cmd":"resize","args":{"name":"cls","share":0.5}}`
	rep, _ := p.call(body)
	if rep.OK || rep.Error.Code != orchestrator.CodeUnavailable || !strings.Contains(rep.Error.Message, "still running") {
		t.Fatalf("first reply = %+v", rep.Error)
	}
	<-done
	time.Sleep(50 * time.Millisecond)
	rep, raw := p.call(body)
	if !rep.OK {
		t.Fatalf("retry reply = %s", raw)
	}
	if n := fake.CallCount(); n != 1 {
		t.Errorf("handler called %d times", n)
	}
}

// TestSerialAndConcurrent: mutating commands run one at a time, status
// runs beside them, and a full queue is refused.
func TestSerialAndConcurrent(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{QueueLen: 1}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqDEALER, "")
	var mu sync.Mutex
	running, maxRunning := 0, 0
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	fake.SetHook(orchestrator.CmdSetBatch, func(ctx context.Context) error {
		mu.Lock()
		running++
		maxRunning = max(maxRunning, running)
		mu.Unlock()
		started <- struct{}{}
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	})
	p.send([]byte(`{"id":"q1","cmd":"set-batch","args":{"name":"cls","max_batch":4}}`))
	<-started
	p.send([]byte(`{"id":"q2","cmd":"set-batch","args":{"name":"cls","max_batch":5}}`)) // queued
	time.Sleep(50 * time.Millisecond)
	rep, _ := p.call(`{"id":"q3","cmd":"set-batch","args":{"name":"cls","max_batch":6}}`) // refused
	if rep.OK || rep.Error.Code != orchestrator.CodeUnavailable || rep.ID != "q3" {
		t.Errorf("third command: %+v", rep)
	}
	rep, _ = p.call(`{"id":"s1","cmd":"status"}`) // runs while set-batch blocks
	if !rep.OK || rep.ID != "s1" {
		t.Errorf("status during a mutation: %+v", rep)
	}
	close(release)
	got := map[string]bool{}
	for range 2 {
		rep, raw, ok := p.recv(5 * time.Second)
		if !ok || !rep.OK {
			t.Fatalf("reply %s", raw)
		}
		got[rep.ID] = true
	}
	if !got["q1"] || !got["q2"] || maxRunning != 1 {
		t.Errorf("replies %v, max concurrent mutations %d", got, maxRunning)
	}
}

// TestREQClient: a REQ socket (with its empty delimiter) works too.
func TestREQClient(t *testing.T) {
	fake := orchtest.New(seedIF)
	srv := startServer(t, orchestrator.ServerConfig{}, fake)
	p := newRawPeer(t, srv.Endpoint(), zmqREQ, "")
	rep, raw := p.call(`{"id":"r","cmd":"status","args":{"name":"cls"}}`)
	if !rep.OK || rep.ID != "r" {
		t.Fatalf("reply %s", raw)
	}
}

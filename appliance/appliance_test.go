package appliance

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/appliance/buildinfo"
	"sluice/dataplane/wire"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/onnx"
)

// classifierPath returns the PaddleOCR text-angle classifier that make deps
// fetches (a real trained model: 3x48x192 -> 2).
func classifierPath(t *testing.T) string {
	dir, err := onnx.ModelsDir()
	if err == nil {
		p := filepath.Join(dir, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
		if _, err = os.Stat(p); err == nil {
			return p
		}
	}
	if os.Getenv("SLUICE_REQUIRE_DEPS") == "1" {
		t.Fatalf("PaddleOCR classifier missing (run make deps): %v", err)
	}
	t.Skipf("PaddleOCR classifier missing (run make deps): %v", err)
	return ""
}

func f32bytes(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

func TestApplianceServesOverUDP(t *testing.T) {
	model := classifierPath(t)
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 2
metrics = "127.0.0.1:0"
control = "off"

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
max_batch = 4
queue_len = 64
input = "f32"
input_shape = [3, 48, 192]
`, model)
	a, stop := startAppliance(t, "test.toml", text)
	addr, ok := a.PortAddr("udp0")
	if !ok {
		t.Fatal("no udp port address")
	}
	ctx := context.Background()

	// reference: the same model on its own backend instance
	ref := cpu.New()
	if err := ref.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		t.Fatal(err)
	}
	g, err := onnx.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	if err := fixInputShape(g, []int64{3, 48, 192}, nil); err != nil {
		t.Fatal(err)
	}
	inst, err := ref.LoadModel(ctx, "ref", g)
	if err != nil {
		t.Fatal(err)
	}
	if err := ref.ConfigureBatch(inst, 1); err != nil {
		t.Fatal(err)
	}

	cl := newClient(t, 11)
	const n = 40
	want := map[uint64][]float32{}
	for id := uint64(1); id <= n; id++ {
		in := make([]float32, inst.InputSize())
		for i := range in {
			in[i] = float32(math.Sin(float64(id)*0.37+float64(i)*0.01)) * 0.8
		}
		out := make([]float32, inst.OutputSize())
		if err := ref.InferBatch(ctx, inst, 1, in, out); err != nil {
			t.Fatal(err)
		}
		want[id] = out
		if err := cl.Send(addr, 7, id, wire.FlagRT, f32bytes(in)); err != nil {
			t.Fatal(err)
		}
		// paced: a burst larger than the socket buffer would be lost
		// whenever a loaded machine holds the receive loop off the CPU
		time.Sleep(time.Millisecond)
	}
	_ = cl.Send(addr, 8, 1000, 0, []byte("nobody serves model 8"))
	_ = cl.Send(addr, 7, 1001, 0, []byte("wrong size for model 7"))
	for id := uint64(1); id <= n; id++ {
		r, ok := cl.Wait(id, 20*time.Second)
		if !ok {
			t.Fatalf("request %d: no response", id)
		}
		if r.Status != wire.StatusOK || len(r.Output) != 4*len(want[id]) {
			t.Fatalf("request %d: status %v, %d output bytes", id, r.Status, len(r.Output))
		}
		for i, w := range want[id] {
			got := math.Float32frombits(binary.LittleEndian.Uint32(r.Output[4*i:]))
			if math.Abs(float64(got-w)) > 1e-4 {
				t.Fatalf("request %d output %d: got %v want %v", id, i, got, w)
			}
		}
	}
	if r, ok := cl.Wait(1000, 5*time.Second); !ok || r.Status != wire.StatusUnknownModel {
		t.Fatalf("unknown model: %v %v", ok, r.Status)
	}
	if r, ok := cl.Wait(1001, 5*time.Second); !ok || r.Status != wire.StatusBadInput {
		t.Fatalf("bad input: %v %v", ok, r.Status)
	}

	// metrics
	wantMetrics := []string{`sluice_requests_total{port="udp0"} 42`, `sluice_if_responses_total{class="rt",if="cls",status="ok"} 40`,
		`sluice_drops_total{port="udp0",reason="unknown_model"} 1`, `sluice_pool_buffers_in_use{port="udp0"} 0`,
		fmt.Sprintf(`sluice_build_info{goversion=%q,version=%q} 1`, buildinfo.GoVersion(), buildinfo.Version())}
	body := scrapeUntil(t, a.Appliance, wantMetrics...)
	for _, m := range wantMetrics {
		if !strings.Contains(body, m) {
			t.Errorf("metrics lack %q", m)
		}
	}

	// drain: requests sent right before the stop are all answered
	for id := uint64(2001); id <= 2010; id++ {
		_ = cl.Send(addr, 7, id, 0, f32bytes(make([]float32, inst.InputSize())))
	}
	time.Sleep(20 * time.Millisecond)
	stop()
	for id := uint64(2001); id <= 2010; id++ {
		if r, ok := cl.Wait(id, 5*time.Second); !ok || (r.Status != wire.StatusOK && r.Status != wire.StatusShuttingDown) {
			t.Fatalf("request %d during drain: answered=%v status=%v", id, ok, r.Status)
		}
	}
	if s := a.Stats(); s.Ports[0].Port.BufInUse != 0 {
		t.Fatalf("%d buffers in use after drain", s.Ports[0].Port.BufInUse)
	}
	if d := cl.Duplicates(); d != 0 {
		t.Fatalf("%d duplicate response fragments", d)
	}
}

// scrapeUntil scrapes the metrics until every line of want is in them and
// returns the last scrape. An IF counts a response after handing it to the
// I/O loop, so a client can hold its answer before the counter moves: the
// test waits for the counters rather than for the clock. The deadline
// only turns a counter that never arrives into a failure with a message
// (the caller's checks name what is missing).
func scrapeUntil(t *testing.T, a *Appliance, want ...string) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		body := scrape(t, a)
		missing := false
		for _, w := range want {
			missing = missing || !strings.Contains(body, w)
		}
		if !missing || time.Now().After(deadline) {
			return body
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func scrape(t *testing.T, a *Appliance) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for a.MetricsAddr() == "" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get("http://" + a.MetricsAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestProfileErrors(t *testing.T) {
	for _, tc := range []struct{ text, want string }{
		{"[appliance]\nmodel_memory_mb = -1\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:resnet18\"\n", "appliance.model_memory_mb -1: want a positive size in MiB"},
		{"[appliance]\nbogus = 1\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:resnet18\"\n", "test.toml:2: unknown keys: appliance.bogus"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n[[if]]\nname=\"b\"\nmodel_id=2\nmodel=\"zoo:y\"\nmax_batch = -3\n", "test.toml:11: if[1].max_batch -3"},
		{"[appliance]\nlog_level = \"loud\"\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", "test.toml:2: appliance.log_level"},
		{"[appliance\n", "test.toml:2"},
		{"[[port]]\ndriver=\"carrier-pigeon\"\n", `test.toml:2: port[0].driver "carrier-pigeon"`},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nmodel_id=1\n[[if]]\nname=\"b\"\nmodel=\"zoo:y\"\nmodel_id=1\n", "already served"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nclass=\"urgent\"\n", `if[0].class "urgent"`},
		{"[appliance]\nlate_window_ms = -1\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", "test.toml:2: appliance.late_window_ms -1"},
		{"[appliance]\nmax_late = 99999999\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", "test.toml:2: appliance.max_late 99999999"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\nrecv_buffer_bytes = 100\n", "test.toml:4: port[0].recv_buffer_bytes 100: out of range"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\nsend_buffer_bytes = 2147483648\n", "port[0].send_buffer_bytes 2147483648: out of range"},
		{"[appliance]\ncuda = \"gpu\"\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", `test.toml:2: appliance.cuda "gpu"`},
		{"[appliance]\nlog_format = \"xml\"\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", `test.toml:2: appliance.log_format "xml": want text or json`},
		{"[appliance]\nthreads = -1\n[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n", "test.toml:2: appliance.threads -1: want 0 (one unit per core)"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\n[[if]]\nname=\"b\"\nmodel_id=2\nmodel=\"zoo:y\"\nmax_batch = 0\n", "test.toml:11: if[1].max_batch 0: out of range 1..1024 (leave the key out for the default)"},
		{"[[port]]\ndriver=\"udp\"\nlisten=\"127.0.0.1:1\"\n[[if]]\nname=\"a\"\nmodel=\"zoo:x\"\nqueue_len = 0\n", "test.toml:7: if[0].queue_len 0"},
	} {
		_, err := ParseProfile("test.toml", tc.text)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("profile %q: error %v, want it to contain %q", tc.text, err, tc.want)
		}
	}
}

func TestShippedProfilesParse(t *testing.T) {
	for _, p := range []string{"../profiles/default.toml", "../profiles/demo.toml"} {
		if _, err := LoadProfile(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
}

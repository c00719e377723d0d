package appliance

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/wire"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/orchestrator"
)

// isolationProfile serves the classifier as "cls" (model id 7) and two IFs
// whose models cannot be served: "garbage" (model id 8, a file that is not
// ONNX) and "twoout" (model id 9, a model with two outputs).
const isolationProfile = `
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
input = "f32"
input_shape = [3, 48, 192]
max_batch = 2

[[if]]
name = "garbage"
model_id = 8
model = "onnx:%s"

[[if]]
name = "twoout"
model_id = 9
model = "onnx:%s"
`

// writeTwoOutputModel writes an ONNX model with one input and two outputs.
func writeTwoOutputModel(t *testing.T, path string) {
	t.Helper()
	g := &graph.Graph{
		Name:    "twoout",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y1", DType: graph.Float32, Dims: []int64{1, 4}}, {Name: "y2", DType: graph.Float32, Dims: []int64{1, 4}}},
		Nodes: []graph.Node{
			{Name: "r", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"y1"}},
			{Name: "s", Op: "Sigmoid", Inputs: []string{"x"}, Outputs: []string{"y2"}},
		},
		Opset: 13,
	}
	writeModel(t, path, g)
}

// writeModel encodes g as ONNX into path.
func writeModel(t *testing.T, path string, g *graph.Graph) {
	t.Helper()
	b, err := onnx.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// lineOf is the 1-based line of the first line of text containing s.
func lineOf(t *testing.T, text, s string) int {
	t.Helper()
	for i, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			return i + 1
		}
	}
	t.Fatalf("%q not in the profile", s)
	return 0
}

// isolationSetup writes the isolation profile into a temporary directory
// and returns its path, its text and the bad models' paths.
func isolationSetup(t *testing.T) (dir, path, text, garbage, twoout string) {
	t.Helper()
	model := classifierPath(t)
	dir = t.TempDir()
	garbage = filepath.Join(dir, "garbage.onnx")
	if err := os.WriteFile(garbage, []byte("this is not an ONNX model\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	twoout = filepath.Join(dir, "twoout.onnx")
	writeTwoOutputModel(t, twoout)
	path = filepath.Join(dir, "p.toml")
	text = fmt.Sprintf(isolationProfile, filepath.Join(dir, "ctl.sock"), model, garbage, twoout)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, path, text, garbage, twoout
}

// controlClient waits for the appliance's control endpoint and dials it.
// The client's timeout is a hang guard only.
func controlClient(t *testing.T, a *running) *orchestrator.Client {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for a.ControlEndpoint() == "" {
		if time.Now().After(deadline) {
			t.Fatal("the control server did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 60 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// TestBadIFsAreIsolated starts a profile with one good IF and two whose
// models the appliance cannot serve (not ONNX; two outputs): the good IF
// serves, status and /readyz name the failed IFs with the profile's file,
// line and key, and a reload after the file is fixed brings the IF up.
func TestBadIFsAreIsolated(t *testing.T) {
	_, path, text, garbage, _ := isolationSetup(t)
	a, stop := startAppliance(t, path, text)
	a.SetProfilePath(path)
	cl := controlClient(t, a)
	ctx := context.Background()

	addr, _ := a.PortAddr("udp0")
	client := newClient(t, 41)
	payload := f32bytes(make([]float32, 3*48*192))
	_ = client.Send(addr, 7, 1, 0, payload)
	if r, ok := client.Wait(1, 30*time.Second); !ok || r.Status != wire.StatusOK {
		t.Fatalf("request to the good IF: answered %v, status %v", ok, r.Status)
	}
	_ = client.Send(addr, 8, 2, 0, payload)
	if r, ok := client.Wait(2, 30*time.Second); !ok || r.Status != wire.StatusUnknownModel {
		t.Fatalf("request to the failed IF: answered %v, status %v; want unknown_model", ok, r.Status)
	}

	st, err := cl.Status(ctx, orchestrator.StatusArgs{})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string]orchestrator.IFStatus{}
	for _, s := range st.IFs {
		states[s.Name] = s
	}
	wantGarbage := fmt.Sprintf("profile %s:%d: if[1].model %q: ", path, lineOf(t, text, garbage), "onnx:"+garbage)
	if s := states["cls"]; s.State != "serving" || s.Error != "" {
		t.Errorf("cls: %+v", s)
	}
	if s := states["garbage"]; s.State != "failed" || !strings.HasPrefix(s.Error, wantGarbage) || s.ModelID != 8 {
		t.Errorf("garbage: %+v; want state failed, error starting %q", s, wantGarbage)
	}
	if s := states["twoout"]; s.State != "failed" || !strings.Contains(s.Error, "if[2].model") ||
		!strings.Contains(s.Error, "2 outputs (y1, y2)") {
		t.Errorf("twoout: %+v; want state failed, an error naming if[2].model and its 2 outputs", s)
	}
	if one, err := cl.Status(ctx, orchestrator.StatusArgs{Name: "twoout"}); err != nil || len(one.IFs) != 1 || one.IFs[0].State != "failed" {
		t.Errorf("status -name twoout: %+v, %v", one, err)
	}

	// /readyz: ready (the good IF serves), and it names the failed IFs.
	readyz := waitServing(t, a)
	code, body := httpGet(t, readyz)
	if code != http.StatusOK || !strings.HasPrefix(body, "ready\n") ||
		!strings.Contains(body, "failed IF garbage: "+wantGarbage) || !strings.Contains(body, "failed IF twoout: ") {
		t.Errorf("/readyz: %d %q", code, body)
	}

	// Fix the file and reload: the IF that had failed loads; the other
	// one still fails and is reported as such.
	data, err := os.ReadFile(classifierPath(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(garbage, data, 0o644); err != nil {
		t.Fatal(err)
	}
	text2 := strings.Replace(text, "model_id = 8\n", "model_id = 8\ninput = \"f32\"\ninput_shape = [3, 48, 192]\n", 1)
	if err := os.WriteFile(path, []byte(text2), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := cl.ReloadProfile(ctx, orchestrator.ReloadArgs{})
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	if len(res.Added) != 1 || res.Added[0] != "garbage" || len(res.Failed) != 1 || res.Failed[0].Name != "twoout" ||
		!strings.Contains(res.Failed[0].Error, fmt.Sprintf("%s:%d: if[2].model", path, lineOf(t, text2, "twoout.onnx"))) {
		t.Fatalf("reload: %+v", res)
	}
	_ = client.Send(addr, 8, 3, 0, payload)
	if r, ok := client.Wait(3, 30*time.Second); !ok || r.Status != wire.StatusOK {
		t.Fatalf("request to the reloaded IF: answered %v, status %v", ok, r.Status)
	}
	// Removing the failed IF forgets it: /readyz lists no failure.
	if err := cl.Remove(ctx, orchestrator.RemoveArgs{Name: "twoout"}); err != nil {
		t.Fatalf("remove the failed IF: %v", err)
	}
	if code, body := httpGet(t, readyz); code != http.StatusOK || body != "ready\n" {
		t.Errorf("/readyz after the fix: %d %q", code, body)
	}
	stop()
}

// TestStrictRefusesBadIF: with Options.Strict the start fails, naming the
// file, line and key of the IF that failed.
func TestStrictRefusesBadIF(t *testing.T) {
	_, path, text, garbage, _ := isolationSetup(t)
	prof, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	a, err := NewWithOptions(context.Background(), prof, nil, Options{Strict: true})
	if err == nil {
		a.Close()
		t.Fatal("strict start with a bad IF succeeded")
	}
	want := fmt.Sprintf("profile %s:%d: if[1].model %q: ", path, lineOf(t, text, garbage), "onnx:"+garbage)
	if !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("strict start: %v; want an error starting %q", err, want)
	}
}

// TestNoIFLoaded: when every IF fails, the appliance still starts (a
// reload can bring a fixed profile) but /readyz is 503.
func TestNoIFLoaded(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.onnx")
	if err := os.WriteFile(garbage, []byte("not ONNX"), 0o644); err != nil {
		t.Fatal(err)
	}
	text := fmt.Sprintf(`
[appliance]
log_level = "error"
threads = 1
metrics = "127.0.0.1:0"
control = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "garbage"
model = "onnx:%s"
`, garbage)
	a, stop := startAppliance(t, "none.toml", text)
	code, body := httpGet(t, waitServing(t, a))
	if code != http.StatusServiceUnavailable || !strings.HasPrefix(body, "not ready: no IF is serving\n") ||
		!strings.Contains(body, "failed IF garbage: profile none.toml:") {
		t.Errorf("/readyz: %d %q", code, body)
	}
	stop()
}

// httpGet returns a GET's status code and body.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitServing waits until the appliance's /readyz no longer answers the
// "not ready" of an appliance that has not started serving, and returns
// its URL.
func waitServing(t *testing.T, a *running) string {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		if addr := a.MetricsAddr(); addr != "" {
			url := "http://" + addr + "/readyz"
			if _, body := httpGet(t, url); !strings.HasPrefix(body, "not ready\n") {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the appliance did not start serving")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Check (sluice -check) loads the isolation profile without serving: the
// good IF loads, the two bad ones are reported with the profile's file,
// line and key, and nothing is left running (no port bound, the
// backends' units stopped).
func TestCheckFindsBadIFs(t *testing.T) {
	_, path, text, garbage, twoout := isolationSetup(t)
	prof, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	goroutines := runtime.NumGoroutine()
	res, err := Check(context.Background(), prof, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Loaded) != 1 || res.Loaded[0] != "cls" || len(res.Failed) != 2 {
		t.Fatalf("loaded %v, failed %v; want cls loaded and two failures", res.Loaded, res.Failed)
	}
	for k, want := range []string{
		fmt.Sprintf("profile %s:%d: if[1].model %q: ", path, lineOf(t, text, garbage), "onnx:"+garbage),
		fmt.Sprintf("profile %s:%d: if[2].model %q: the model has 2 outputs", path, lineOf(t, text, twoout), "onnx:"+twoout),
	} {
		if !strings.HasPrefix(res.Failed[k].Error(), want) {
			t.Errorf("failure %d: %q, want it to start with %q", k, res.Failed[k], want)
		}
	}
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > goroutines+2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines after Check, %d before", runtime.NumGoroutine(), goroutines)
		}
	}
}

// Check names the key of each semantic error, not only the model's: an
// unknown zoo model and a missing file at `model`, a mean list that does
// not fit the model's channels at `mean`.
func TestCheckNamesKeys(t *testing.T) {
	text := `[appliance]
threads = 1
control = "off"
metrics = "off"
[[port]]
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "a"
model = "zoo:nosuchmodel"
[[if]]
name = "b"
model_id = 2
model = "onnx:/nonexistent/m.onnx"
[[if]]
name = "c"
model_id = 3
model = "zoo:squeezenet11"
input = "u8-hwc"
mean = [0.5, 0.5]
std = [0.5, 0.5]
`
	prof, err := ParseProfile("p.toml", text)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Check(context.Background(), prof, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Loaded) != 0 || len(res.Failed) != 3 {
		t.Fatalf("loaded %v, failed %v", res.Loaded, res.Failed)
	}
	for k, want := range []string{
		`profile p.toml:10: if[0].model "zoo:nosuchmodel": zoo: unknown model "nosuchmodel"`,
		`profile p.toml:14: if[1].model "onnx:/nonexistent/m.onnx": `,
		`profile p.toml:20: if[2].mean: input "u8-hwc": mean and std do not match the channels: 3 values each for 3 channels, have 2 and 2`,
	} {
		if !strings.HasPrefix(res.Failed[k].Error(), want) {
			t.Errorf("failure %d: %q, want it to start with %q", k, res.Failed[k], want)
		}
	}
}

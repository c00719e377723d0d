package appliance

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/wire"
	"sluice/libml/graph"
	"sluice/orchestrator"
)

// An onnx: model with an operator the engine lacks (Hardmax) loads into ONNX
// Runtime instead, serves, and says so in its status; with fallback =
// "none" it fails to load, naming the operator.
func TestFallbackToORT(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "hardmax.onnx")
	writeModel(t, model, &graph.Graph{
		Name:    "hardmax",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 8}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 8}}},
		Nodes:   []graph.Node{{Name: "h", Op: "Hardmax", Inputs: []string{"x"}, Outputs: []string{"y"}}},
		Opset:   13,
	})
	text := fmt.Sprintf(`
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "ipc://%%s"
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "hardmax"
model_id = 1
model = "onnx:%[1]s"
[[if]]
name = "strict"
model_id = 2
model = "onnx:%[1]s"
fallback = "none"
`, model)
	a, stop, _, _ := startControlled(t, text)
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(context.Background(), orchestrator.StatusArgs{})
	if err != nil || len(st.IFs) != 2 {
		t.Fatalf("status: %+v, %v", st, err)
	}
	if s := st.IFs[0]; s.Name != "hardmax" || s.State != "serving" || s.Backend != "ort (fallback from cpu)" {
		t.Fatalf("the fallen-back IF: %+v", s)
	}
	if s := st.IFs[1]; s.Name != "strict" || s.State != "failed" || !strings.Contains(s.Error, "Hardmax") {
		t.Fatalf("the IF with fallback = none: %+v", s)
	}

	addr, _ := a.PortAddr("udp0")
	client := newClient(t, 81)
	x := []float32{-3, -1, -0.5, 0, 0.5, 1, 2, 10}
	_ = client.Send(addr, 1, 1, 0, f32bytes(x))
	r, ok := client.Wait(1, 20*time.Second)
	if !ok || r.Status != wire.StatusOK || len(r.Output) != 32 {
		t.Fatalf("request: answered %v, %v, %d bytes", ok, r.Status, len(r.Output))
	}
	// Hardmax: 1 at the first maximum of the last axis, 0 elsewhere
	for i := range x {
		got := math.Float32frombits(binary.LittleEndian.Uint32(r.Output[4*i:]))
		want := float32(0)
		if i == len(x)-1 {
			want = 1
		}
		if got != want {
			t.Errorf("Hardmax(x)[%d] = %g, want %g", i, got, want)
		}
	}
	stop()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

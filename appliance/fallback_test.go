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

// An onnx: model with an operator the engine lacks (Det) loads into ONNX
// Runtime instead, serves, and says so in its status; with fallback =
// "none" it fails to load, naming the operator.
func TestFallbackToORT(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "det.onnx")
	writeModel(t, model, &graph.Graph{
		Name:    "det",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 2, 2}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1}}},
		Nodes:   []graph.Node{{Name: "d", Op: "Det", Inputs: []string{"x"}, Outputs: []string{"y"}}},
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
name = "det"
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
	if s := st.IFs[0]; s.Name != "det" || s.State != "serving" || s.Backend != "ort (fallback from cpu)" {
		t.Fatalf("the fallen-back IF: %+v", s)
	}
	if s := st.IFs[1]; s.Name != "strict" || s.State != "failed" || !strings.Contains(s.Error, "Det") {
		t.Fatalf("the IF with fallback = none: %+v", s)
	}

	addr, _ := a.PortAddr("udp0")
	client := newClient(t, 81)
	x := []float32{3, 1, 2, 4}
	_ = client.Send(addr, 1, 1, 0, f32bytes(x))
	r, ok := client.Wait(1, 20*time.Second)
	if !ok || r.Status != wire.StatusOK || len(r.Output) != 4 {
		t.Fatalf("request: answered %v, %v, %d bytes", ok, r.Status, len(r.Output))
	}
	// the determinant of [[3 1] [2 4]]
	if got := math.Float32frombits(binary.LittleEndian.Uint32(r.Output)); got != 10 {
		t.Errorf("Det(x) = %g, want 10", got)
	}
	stop()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

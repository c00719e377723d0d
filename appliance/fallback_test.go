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

// An onnx: model with operators the engine lacks (SequenceConstruct and
// ConcatFromSequence: the engine has no sequences) loads into ONNX
// Runtime instead, serves, and says so in its status; with fallback =
// "none" it fails to load, naming the operator.
func TestFallbackToORT(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "seq.onnx")
	writeModel(t, model, &graph.Graph{
		Name:    "seq",
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 8}}},
		Nodes: []graph.Node{
			{Name: "s", Op: "SequenceConstruct", Inputs: []string{"x", "x"}, Outputs: []string{"xs"}},
			{Name: "c", Op: "ConcatFromSequence", Inputs: []string{"xs"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}},
		},
		Opset: 13,
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
name = "seq"
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
	if s := st.IFs[0]; s.Name != "seq" || s.State != "serving" || s.Backend != "ort (fallback from cpu)" {
		t.Fatalf("the fallen-back IF: %+v", s)
	}
	if s := st.IFs[1]; s.Name != "strict" || s.State != "failed" || !strings.Contains(s.Error, "SequenceConstruct") {
		t.Fatalf("the IF with fallback = none: %+v", s)
	}

	addr, _ := a.PortAddr("udp0")
	client := newClient(t, 81)
	x := []float32{3, 1, 2, 4}
	_ = client.Send(addr, 1, 1, 0, f32bytes(x))
	r, ok := client.Wait(1, 20*time.Second)
	if !ok || r.Status != wire.StatusOK || len(r.Output) != 32 {
		t.Fatalf("request: answered %v, %v, %d bytes", ok, r.Status, len(r.Output))
	}
	// x twice, concatenated
	for i := 0; i < 8; i++ {
		if got := math.Float32frombits(binary.LittleEndian.Uint32(r.Output[4*i:])); got != x[i%4] {
			t.Errorf("y[%d] = %g, want %g", i, got, x[i%4])
		}
	}
	stop()
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

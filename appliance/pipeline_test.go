package appliance

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sluice/dataplane/dptest"
	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/zoo"
	"sluice/orchestrator"
)

// pipelineProfile chains three IFs: an audio front end (an MLP, 64
// features of a frame → 40), the streaming keyword spotter keeping its
// LSTM state per flow, under reef (40 → 12), and a classifier on the
// emulated cuda device (12 → 3). Each batches on its own.
const pipelineProfile = `
[appliance]
log_level = "warn"
threads = 1
metrics = "off"
control = "ipc://%%s"
cuda = "emu"
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "front"
model_id = 1
model = "onnx:%[1]s"
max_batch = 4
next = "kws"
[[if]]
name = "kws"
model_id = 2
model = "zoo:kws"
policy = "reef"
state = [{input = "h", output = "h_out"}, {input = "c", output = "c_out"}]
next = "cls"
[[if]]
name = "cls"
model_id = 3
model = "onnx:%[2]s"
backend = "cuda"
max_batch = 2
`

// A pipeline over UDP: two clients stream five frames each into the
// first stage; each answer is the three models run one after the other at
// batch 1 (the middle one from its flow's carried state), within 1e-5
// (the last stage runs on the emulated cuda device); the first two stages
// forward everything and answer nothing. A profile whose next names a
// missing IF, or loops, is refused; a stage whose next takes another
// payload size fails to load and says why.
func TestPipelineStreams(t *testing.T) {
	dir := t.TempDir()
	frontPath, clsPath := filepath.Join(dir, "front.onnx"), filepath.Join(dir, "cls.onnx")
	frontG := func() *graph.Graph {
		return zoo.MLP(zoo.Options{Seed: 5, Features: 64, Layers: 1, Hidden: 32, Classes: 40})
	}
	clsG := func() *graph.Graph {
		return zoo.MLP(zoo.Options{Seed: 6, Features: 12, Layers: 1, Hidden: 16, Classes: 3})
	}
	writeModel(t, frontPath, frontG())
	writeModel(t, clsPath, clsG())
	a, stop, _, _ := startControlled(t, fmt.Sprintf(pipelineProfile, frontPath, clsPath))
	defer stop()

	ctx := context.Background()
	kws := newKWSRef(t)
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 1}); err != nil {
		t.Fatal(err)
	}
	defer be.Deinit()
	load := func(g *graph.Graph) libml.Instance {
		inst, err := be.LoadModel(ctx, g.Name, g)
		if err == nil {
			err = be.ConfigureBatch(inst, 1)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = inst.Close() })
		return inst
	}
	front, cls := load(frontG()), load(clsG())
	run := func(inst libml.Instance, x []float32) []float32 {
		y := make([]float32, inst.OutputSize())
		if err := be.InferBatch(ctx, inst, 1, x, y); err != nil {
			t.Fatal(err)
		}
		return y
	}

	addr, _ := a.PortAddr("udp0")
	clients := []*dptest.Client{newClient(t, 31), newClient(t, 32)}
	want := map[uint64][]float32{}
	for ci, cl := range clients {
		state := make([]float32, kws.l.StateElems)
		for s := range 5 {
			id := uint64(ci*100 + s)
			x := zoo.Input(id, 64)
			want[id] = run(cls, kws.step(run(front, x), state))
			if err := cl.Send(addr, 1, id, 0, f32bytes(x)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for id, w := range want {
		got := okOutput(t, clients[id/100], id)
		if err := closeBytes(got, w); err != nil {
			t.Fatalf("request %d: %v", id, err)
		}
	}
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(ctx, orchestrator.StatusArgs{})
	if err != nil {
		t.Fatal(err)
	}
	served := map[string][2]uint64{}
	for _, s := range st.IFs {
		served[s.Name] = [2]uint64{s.Served, s.Forwarded}
	}
	if served["front"] != [2]uint64{0, 10} || served["kws"] != [2]uint64{0, 10} || served["cls"] != [2]uint64{10, 0} {
		t.Fatalf("served, forwarded per stage: %v", served)
	}

	// profiles with broken pipelines
	base := fmt.Sprintf(pipelineProfile, frontPath, clsPath)
	for _, tc := range []struct{ old, new, want string }{
		{`next = "cls"`, `next = "clss"`, `if[1].next "clss": no IF of that name in the profile`},
		{`max_batch = 2`, "max_batch = 2\nnext = \"front\"", `if[0].next "kws": the pipeline loops back to "front"`},
	} {
		text := strings.Replace(base, tc.old, tc.new, 1)
		if _, err := ParseProfile("p.toml", text); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// A stage whose next stage takes another payload size fails to load,
// saying why; the others serve.
func TestPipelineMismatch(t *testing.T) {
	dir := t.TempDir()
	frontPath, clsPath := filepath.Join(dir, "front.onnx"), filepath.Join(dir, "cls.onnx")
	writeModel(t, frontPath, zoo.MLP(zoo.Options{Seed: 5, Features: 64, Layers: 1, Hidden: 32, Classes: 40}))
	writeModel(t, clsPath, zoo.MLP(zoo.Options{Seed: 6, Features: 12, Layers: 1, Hidden: 16, Classes: 3}))
	text := strings.Replace(fmt.Sprintf(pipelineProfile, frontPath, clsPath), "next = \"kws\"", "next = \"cls\"", 1)
	a, stop, _, _ := startControlled(t, text)
	defer stop()
	cl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	st, err := cl.Status(context.Background(), orchestrator.StatusArgs{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st.IFs {
		want := "serving"
		if s.Name == "front" {
			want = "failed"
			if !strings.Contains(s.Error, `if[0].next: the next stage "cls" takes 48-byte payloads, this IF's result is 160 bytes`) {
				t.Errorf("front: error %q", s.Error)
			}
		}
		if s.State != want {
			t.Errorf("IF %s: %s, want %s", s.Name, s.State, want)
		}
	}
}

// closeBytes compares little-endian float32 output bytes with want, within
// 1e-5 relative.
func closeBytes(got []byte, want []float32) error {
	if len(got) != 4*len(want) {
		return fmt.Errorf("%d bytes, want %d", len(got), 4*len(want))
	}
	for i, w := range want {
		g := math.Float32frombits(binary.LittleEndian.Uint32(got[4*i:]))
		if math.Abs(float64(g-w)) > 1e-5*(1+math.Abs(float64(w))) {
			return fmt.Errorf("value %d is %v, want %v", i, g, w)
		}
	}
	return nil
}

// A model of two data inputs (one int64) and two outputs, served by
// naming them (inputs, outputs): the payload holds x then ids as float32,
// the answer total then y. The engine keeps no int64 values at run time,
// so ONNX Runtime serves the packed model (the fallback), and status says
// so; every answer is the model's.
func TestSeveralInputsAndOutputs(t *testing.T) {
	requireORT(t)
	model := filepath.Join(t.TempDir(), "two.onnx")
	writeModel(t, model, &graph.Graph{Name: "two", Opset: 13,
		Inputs: []graph.ValueInfo{{Name: "ids", DType: graph.Int64, Dims: []int64{-1, 4}, DimParams: []string{"batch", ""}},
			{Name: "x", DType: graph.Float32, Dims: []int64{-1, 2}, DimParams: []string{"batch", ""}}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 2}}, {Name: "total", DType: graph.Int64, Dims: []int64{-1, 1}}},
		Initializers: []*graph.Tensor{{Name: "axes", DType: graph.Int64, Dims: []int64{1}, I64: []int64{1}}},
		Nodes: []graph.Node{
			{Name: "sum", Op: "ReduceSum", Inputs: []string{"ids", "axes"}, Outputs: []string{"total"}},
			{Name: "f", Op: "Cast", Inputs: []string{"total"}, Outputs: []string{"ft"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}},
			{Name: "mul", Op: "Mul", Inputs: []string{"x", "ft"}, Outputs: []string{"y"}},
		}})
	a, stop, _, _ := startControlled(t, fmt.Sprintf(`
[appliance]
log_level = "error"
threads = 1
metrics = "off"
control = "ipc://%%s"
[[port]]
name = "udp0"
driver = "udp"
listen = "127.0.0.1:0"
[[if]]
name = "two"
model_id = 4
model = "onnx:%s"
inputs = ["x", "ids"]
outputs = ["total", "y"]
`, model))
	defer stop()
	addr, _ := a.PortAddr("udp0")
	cl := newClient(t, 41)
	for id := uint64(1); id <= 3; id++ {
		x0, x1 := float32(id)*0.5, -float32(id)
		ids := []float32{float32(id), 2, 7, 100}
		if err := cl.Send(addr, 4, id, 0, f32bytes(append([]float32{x0, x1}, ids...))); err != nil {
			t.Fatal(err)
		}
		total := float32(id) + 109
		if err := closeBytes(okOutput(t, cl, id), []float32{total, x0 * total, x1 * total}); err != nil {
			t.Fatalf("request %d: %v", id, err)
		}
	}
	ctl, err := orchestrator.Dial(a.ControlEndpoint(), orchestrator.ClientConfig{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer ctl.Close()
	st, err := ctl.Status(context.Background(), orchestrator.StatusArgs{})
	if err != nil || len(st.IFs) != 1 || st.IFs[0].Backend != "ort (fallback from cpu)" || st.IFs[0].Served != 3 {
		t.Fatalf("status %+v, %v", st, err)
	}
}

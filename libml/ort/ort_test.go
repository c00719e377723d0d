package ort

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// needLib returns the ONNX Runtime library path, skipping the test when it
// is missing (failing instead under SLUICE_REQUIRE_DEPS=1, as `make test`
// sets).
func needLib(t testing.TB) string {
	t.Helper()
	p, err := LibraryPath()
	if err == nil {
		_, err = os.Stat(p)
	}
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_DEPS") == "1" {
			t.Fatalf("ONNX Runtime is required (SLUICE_REQUIRE_DEPS=1): %v", err)
		}
		t.Skipf("ONNX Runtime not available (run `make deps`): %v", err)
	}
	return p
}

func newBackend(t *testing.T, opts Options) *Backend {
	t.Helper()
	needLib(t)
	b := New(opts)
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 1}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// gemmGraph is y = relu(x·W + c) for x of shape [lead, 4] and W of shape
// [4, 3].
func gemmGraph(lead int64) *graph.Graph {
	return &graph.Graph{
		Opset:   13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{lead, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{lead, 3}}},
		Initializers: []*graph.Tensor{
			{Name: "W", DType: graph.Float32, Dims: []int64{4, 3}, F32: []float32{1, 0, -1, 2, 1, 0, 0, 3, 1, -1, 0, 2}},
			{Name: "c", DType: graph.Float32, Dims: []int64{3}, F32: []float32{0.5, -0.5, 0}},
		},
		Nodes: []graph.Node{
			{Op: "Gemm", Inputs: []string{"x", "W", "c"}, Outputs: []string{"g"}},
			{Op: "Relu", Inputs: []string{"g"}, Outputs: []string{"y"}},
		},
	}
}

func gemmRef(x []float32) []float32 {
	w := []float32{1, 0, -1, 2, 1, 0, 0, 3, 1, -1, 0, 2}
	c := []float32{0.5, -0.5, 0}
	rows := len(x) / 4
	y := make([]float32, rows*3)
	for r := 0; r < rows; r++ {
		for j := 0; j < 3; j++ {
			s := c[j]
			for k := 0; k < 4; k++ {
				s += x[r*4+k] * w[k*3+j]
			}
			y[r*3+j] = float32(math.Max(0, float64(s)))
		}
	}
	return y
}

func TestInferBatch(t *testing.T) {
	b := newBackend(t, Options{IntraOpThreads: 1, NoSpin: true})
	ctx := context.Background()
	x := []float32{1, 2, 3, 4, -1, -2, 0.5, 0, 0, 1, 0, -3, 2, 2, 2, 2, 0, 0, 0, 0}
	want := gemmRef(x)
	for _, lead := range []int64{-1, 1} {
		inst, err := b.LoadModel(ctx, "gemm", gemmGraph(lead))
		if err != nil {
			t.Fatal(err)
		}
		oi := inst.(*Instance)
		if oi.Batched() != (lead < 0) || inst.InputSize() != 4 || inst.OutputSize() != 3 ||
			len(inst.InputShape()) != 1 || inst.OutputShape()[0] != 3 {
			t.Fatalf("lead %d: batched %v shapes %v -> %v", lead, oi.Batched(), inst.InputShape(), inst.OutputShape())
		}
		if err := b.ConfigureBatch(inst, 5); err != nil {
			t.Fatal(err)
		}
		out := make([]float32, 15)
		if err := b.InferBatch(ctx, inst, 5, x, out); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if math.Abs(float64(out[i]-want[i])) > 1e-5 {
				t.Fatalf("lead %d: out %v, want %v", lead, out, want)
			}
		}
		// A linked instance shares the session and gives the same result.
		inst2, err := b.LinkModel(ctx, inst)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ConfigureBatch(inst2, 2); err != nil {
			t.Fatal(err)
		}
		out2 := make([]float32, 6)
		if err := b.InferBatch(ctx, inst2, 2, x[8:], out2); err != nil {
			t.Fatal(err)
		}
		for i := range out2 {
			if out2[i] != want[6+i] {
				t.Fatalf("linked: out %v, want %v", out2, want[6:12])
			}
		}
		if err := b.InferBatch(ctx, inst2, 3, x, out); err == nil || !strings.Contains(err.Error(), "outside 1..2") {
			t.Errorf("batch above the limit: %v", err)
		}
		if err := b.InferBatch(ctx, inst2, 2, x[:7], out); err == nil || !strings.Contains(err.Error(), "needs 8 inputs") {
			t.Errorf("short input: %v", err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := b.InferBatch(cctx, inst2, 1, x, out); err == nil || !strings.Contains(err.Error(), "canceled") {
			t.Errorf("cancelled context: %v", err)
		}
		if err := b.Deinit(); err == nil || !strings.Contains(err.Error(), "still open") {
			t.Errorf("Deinit with open instances: %v", err)
		}
		if err := inst.Close(); err != nil {
			t.Fatal(err)
		}
		// The session lives on with the linked instance.
		if err := b.InferBatch(ctx, inst2, 1, x, out); err != nil {
			t.Fatal(err)
		}
		if err := inst2.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.InferBatch(ctx, inst2, 1, x, out); err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("closed instance: %v", err)
		}
	}
}

func TestLoadErrors(t *testing.T) {
	b := newBackend(t, Options{IntraOpThreads: 1})
	ctx := context.Background()
	dyn := gemmGraph(-1)
	dyn.Inputs[0].Dims = []int64{-1, -1}
	if _, err := b.LoadModel(ctx, "dyn", dyn); err == nil || !strings.Contains(err.Error(), "InputShape") {
		t.Errorf("dynamic input dims: %v", err)
	}
	two := gemmGraph(-1)
	two.Inputs = append(two.Inputs, graph.ValueInfo{Name: "z", DType: graph.Float32, Dims: []int64{1}})
	if _, err := b.LoadModel(ctx, "two", two); err == nil || !strings.Contains(err.Error(), "exactly one") {
		t.Errorf("two inputs: %v", err)
	}
	if _, err := b.LoadONNX(ctx, "junk", []byte("not onnx"), ModelOptions{}); err == nil {
		t.Error("junk bytes loaded")
	}
	bad := gemmGraph(-1)
	bad.Nodes[0].Op = "NoSuchOp"
	if _, err := b.LoadModel(ctx, "bad", bad); err == nil || !strings.Contains(err.Error(), `model "bad"`) {
		t.Errorf("unknown op: %v", err)
	}
	// With the shape given, a dynamic model loads.
	data, err := onnx.Encode(dyn)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := b.LoadONNX(ctx, "dyn", data, ModelOptions{InputShape: []int64{4}})
	if err != nil {
		t.Fatal(err)
	}
	if inst.OutputSize() != 3 {
		t.Errorf("probed output shape %v", inst.OutputShape())
	}
	inst.Close()
}

func TestSession(t *testing.T) {
	b := newBackend(t, Options{IntraOpThreads: 1})
	g := &graph.Graph{
		Opset: 13,
		Inputs: []graph.ValueInfo{
			{Name: "a", DType: graph.Float32, Dims: []int64{2, 2}},
			{Name: "k", DType: graph.Int64, Dims: []int64{1}},
		},
		Outputs: []graph.ValueInfo{
			{Name: "s", DType: graph.Float32, Dims: []int64{}},
			{Name: "top", DType: graph.Int64, Dims: []int64{-1, -1}},
			{Name: "h", DType: graph.Float16, Dims: []int64{2, 2}},
		},
		Nodes: []graph.Node{
			{Op: "ReduceSum", Inputs: []string{"a"}, Outputs: []string{"s"}, Attrs: []graph.Attr{{Name: "keepdims", Kind: graph.AttrInt, I: 0}}},
			{Op: "TopK", Inputs: []string{"a", "k"}, Outputs: []string{"v", "top"}},
			{Op: "Cast", Inputs: []string{"a"}, Outputs: []string{"h"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float16)}}},
		},
	}
	data, err := onnx.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.NewSession(data)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.Run(context.Background(), []*graph.Tensor{
		{Name: "k", DType: graph.Int64, Dims: []int64{1}, I64: []int64{1}},
		{Name: "a", DType: graph.Float32, Dims: []int64{2, 2}, F32: []float32{1, 5, 3, 2}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out[0].F32[0] != 11 || len(out[0].Dims) != 0 {
		t.Errorf("sum: %+v", out[0])
	}
	if out[1].I64[0] != 1 || out[1].I64[1] != 0 || out[1].Dims[0] != 2 {
		t.Errorf("topk indices: %+v", out[1])
	}
	if out[2].DType != graph.Float16 || out[2].F32[1] != 5 {
		t.Errorf("cast to float16: %+v", out[2])
	}
	if _, err := s.Run(context.Background(), nil); err == nil || !strings.Contains(err.Error(), `input "a"`) {
		t.Errorf("missing input: %v", err)
	}
}

// TestOCRClassifier loads a real trained model straight from its bytes.
func TestOCRClassifier(t *testing.T) {
	b := newBackend(t, Options{IntraOpThreads: 1})
	dir, err := onnx.ModelsDir()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
	data, err := os.ReadFile(path)
	if err != nil {
		if os.Getenv("SLUICE_REQUIRE_DEPS") == "1" {
			t.Fatalf("model required (SLUICE_REQUIRE_DEPS=1): %v", err)
		}
		t.Skipf("model not available (run `make deps`): %v", err)
	}
	inst, err := b.LoadONNX(context.Background(), "cls", data, ModelOptions{InputShape: []int64{3, 48, 192}})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if got := inst.OutputShape(); len(got) != 1 || got[0] != 2 {
		t.Fatalf("output shape %v, want [2]", got)
	}
	if err := b.ConfigureBatch(inst, 2); err != nil {
		t.Fatal(err)
	}
	in := make([]float32, 2*inst.InputSize())
	for i := range in {
		in[i] = float32(math.Sin(float64(i) * 0.01))
	}
	out := make([]float32, 4)
	if err := b.InferBatch(context.Background(), inst, 2, in, out); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 2; r++ {
		if s := out[2*r] + out[2*r+1]; math.Abs(float64(s)-1) > 1e-4 {
			t.Errorf("request %d: softmax outputs %v do not sum to 1", r, out[2*r:2*r+2])
		}
	}
}

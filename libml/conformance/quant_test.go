package conformance

import (
	"context"
	"os"
	"strings"
	"testing"

	"sluice/libml/graph"
)

// quantNodeTests are ONNX's node tests of the quantisation operators. The
// folder runs them in TestNodeTestsCPU (their inputs are integers); here
// they run through the QUANT and QGEMM kernels as well.
var quantNodeTests = []string{
	"test_quantizelinear", "test_quantizelinear_axis",
	"test_dequantizelinear", "test_dequantizelinear_axis",
	"test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
	"test_dynamicquantizelinear_min_adjusted",
	"test_matmulinteger", "test_basic_convinteger", "test_convinteger_with_padding",
	"test_convinteger_without_padding", "test_qlinearmatmul_2D", "test_qlinearmatmul_3D",
	"test_qlinearconv",
}

// TestQuantNodeTestsKernels feeds each quantisation node test's first
// input at run time (uint8 and int8 inputs as their values in float32, as
// the engine stores them), bakes the others in as initializers, and checks
// every output, integer outputs included, through the cpu backend's
// production path (LoadModel, ConfigureBatch, InferBatch).
func TestQuantNodeTestsKernels(t *testing.T) {
	if len(NodeTestNames()) == 0 {
		RequireDeps(t, "libonnx-testdata", os.ErrNotExist)
	}
	be := cpuBackend(t)
	ctx := context.Background()
	for _, name := range quantNodeTests {
		t.Run(strings.TrimPrefix(name, "test_"), func(t *testing.T) {
			nt, err := LoadNodeTest(name)
			if err != nil {
				t.Fatal(err)
			}
			for s, ds := range nt.Sets {
				in := runtimeFeed(ds.Inputs[0])
				for o, want := range ds.Outputs {
					g := singleIO(nt, ds, 0, o)
					got, err := runOnBackend(ctx, be, name, g, in, want)
					if err == nil {
						err = Compare(got, want)
					}
					if err != nil {
						t.Errorf("data set %d, output %q: %v", s, want.Name, err)
					}
				}
			}
		})
	}
}

// runtimeFeed is t as the float32 request data an instance is fed.
func runtimeFeed(t *graph.Tensor) *graph.Tensor {
	if t.F32 != nil {
		return t
	}
	f := &graph.Tensor{Name: t.Name, DType: graph.Float32, Dims: t.Dims, F32: make([]float32, len(t.I64))}
	for i, v := range t.I64 {
		f.F32[i] = float32(v)
	}
	return f
}

// TestQuantRuntimeIntegerRefused: a float operator fed a runtime integer
// tensor is refused with a clear error (ONNX's Add on uint8 wraps; the
// engine's float values would not).
func TestQuantRuntimeIntegerRefused(t *testing.T) {
	be := cpuBackend(t)
	g := &graph.Graph{
		Opset:  17,
		Inputs: []graph.ValueInfo{{Name: "x", DType: graph.Uint8, Dims: []int64{1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Uint8, Dims: []int64{1, 4}}},
		Nodes:  []graph.Node{{Name: "add", Op: "Add", Inputs: []string{"x", "x"}, Outputs: []string{"y"}}},
	}
	_, err := be.LoadModel(context.Background(), "u8add", g)
	if err == nil || !strings.Contains(err.Error(), "runtime uint8 tensor") {
		t.Fatalf("Add on a runtime uint8 input: err = %v, want a refusal naming the runtime uint8 tensor", err)
	}
}

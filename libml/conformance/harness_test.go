package conformance

import (
	"context"
	"fmt"
	"slices"

	"sluice/libml"
	"sluice/libml/graph"
)

// singleIO rewrites a node test's graph for libml's one-input, one-output
// instances: input feed stays a graph input, every other input becomes an
// initializer holding the data set's value, and output out is the only
// graph output. The node test's own graph is not modified.
func singleIO(nt *NodeTest, ds DataSet, feed, out int) *graph.Graph {
	src := nt.Model.Graph
	g := &graph.Graph{
		Name:         src.Name,
		Opset:        src.Opset,
		Nodes:        src.Nodes,
		Initializers: slices.Clone(src.Initializers),
		Inputs:       []graph.ValueInfo{src.Inputs[feed]},
		Outputs:      []graph.ValueInfo{src.Outputs[out]},
	}
	for i, t := range ds.Inputs {
		if i != feed {
			g.Initializers = append(g.Initializers, t)
		}
	}
	return g
}

// feedInput picks the input a node test feeds at run time: the first
// float32 input. ok is false when there is none.
func feedInput(nt *NodeTest, ds DataSet) (int, bool) {
	for i, t := range ds.Inputs {
		if t.DType == graph.Float32 && i < len(nt.Model.Graph.Inputs) {
			return i, true
		}
	}
	return 0, false
}

// runOnBackend loads g into be and runs in through it. The batch is read
// off the instance: when its per-request input shape is the whole input
// shape the input is one request, when it drops the leading dimension
// that dimension is the batch. It returns the output with want's shape
// (the backend's flat output checked against it).
func runOnBackend(ctx context.Context, be libml.Backend, name string, g *graph.Graph, in *graph.Tensor, want *graph.Tensor) (*graph.Tensor, error) {
	inst, err := be.LoadModel(ctx, name, g)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	defer inst.Close()
	batch := 1
	shape := inst.InputShape()
	switch {
	case slices.Equal(shape, in.Dims):
	case len(in.Dims) > 0 && slices.Equal(shape, in.Dims[1:]):
		batch = int(in.Dims[0])
	default:
		return nil, fmt.Errorf("instance input shape %v does not fit the test input %v", shape, in.Dims)
	}
	if batch < 1 {
		return nil, fmt.Errorf("empty batch (input %v)", in.Dims)
	}
	n := int(want.NumElements())
	if batch*inst.OutputSize() != n {
		return nil, fmt.Errorf("output: %d requests of shape %v, want %v", batch, inst.OutputShape(), want.Dims)
	}
	if err := be.ConfigureBatch(inst, batch); err != nil {
		return nil, fmt.Errorf("configure batch %d: %w", batch, err)
	}
	out := make([]float32, n)
	if err := be.InferBatch(ctx, inst, batch, in.F32, out); err != nil {
		return nil, fmt.Errorf("infer: %w", err)
	}
	got := &graph.Tensor{Name: want.Name, DType: graph.Float32, Dims: want.Dims, F32: out}
	if want.F32 == nil && want.DType != graph.Float32 {
		// Integer outputs come back as float32 request data.
		got.DType, got.F32, got.I64 = want.DType, nil, make([]int64, n)
		for i, v := range out {
			got.I64[i] = int64(v)
		}
	}
	return got, nil
}

// runAndCompare runs g on be (runOnBackend) and compares its output with
// want (node test name's reference: rounded for those in roundedRefs).
func runAndCompare(ctx context.Context, be libml.Backend, name string, g *graph.Graph, in, want *graph.Tensor) error {
	got, err := runOnBackend(ctx, be, name, g, in, want)
	if err != nil {
		return err
	}
	if roundedRefs[name] != "" {
		return compareRounded(got, want)
	}
	return Compare(got, want)
}

// againstORT runs g through ONNX Runtime (ob) and be, and compares be's
// output with ONNX Runtime's; want gives the output's name and shape. It
// returns be's output.
func againstORT(ctx context.Context, ob, be libml.Backend, name string, g *graph.Graph, in, want *graph.Tensor) (*graph.Tensor, error) {
	ref, err := runOnBackend(ctx, ob, name, g, in, want)
	if err != nil {
		return nil, fmt.Errorf("ONNX Runtime: %w", err)
	}
	got, err := runOnBackend(ctx, be, name, g, in, want)
	if err != nil {
		return nil, fmt.Errorf("the engine: %w", err)
	}
	return got, Compare(got, ref)
}

// runNodeTest runs every data set and output of nt through be's
// production path (LoadModel, ConfigureBatch, InferBatch), each output not
// skipped by nodeSkips as its own one-output graph, and compares with the
// expected values.
func runNodeTest(ctx context.Context, be libml.Backend, nt *NodeTest) error {
	for s, ds := range nt.Sets {
		feed, ok := feedInput(nt, ds)
		if !ok {
			return fmt.Errorf("no float32 input to feed")
		}
		for o, want := range ds.Outputs {
			if nodeSkip(nt.Name, want.Name) != "" {
				continue
			}
			g := pruneOutputs(singleIO(nt, ds, feed, o))
			if err := runAndCompare(ctx, be, nt.Name, g, ds.Inputs[feed], want); err != nil {
				return fmt.Errorf("data set %d, output %q: %w", s, want.Name, err)
			}
		}
	}
	return nil
}

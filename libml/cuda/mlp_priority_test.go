//go:build linux && cgo

package cuda

import (
	"fmt"
	"testing"

	"sluice/libml"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// mlpGraph is layers fully connected layers of width inputs and outputs,
// each followed by Tanh, with seeded weights scaled to keep the values
// in range.
func mlpGraph(layers, width int, seed uint64) *graph.Graph {
	g := &graph.Graph{Name: "mlp", Opset: 13}
	x := "x"
	for l := 0; l < layers; l++ {
		w := zoo.Input(seed*1000+uint64(l), width*width)
		for k := range w {
			w[k] /= float32(width)
		}
		wn, bn, y, z := fmt.Sprint("w", l), fmt.Sprint("b", l), fmt.Sprint("y", l), fmt.Sprint("z", l)
		g.Initializers = append(g.Initializers,
			&graph.Tensor{Name: wn, DType: graph.Float32, Dims: []int64{int64(width), int64(width)}, F32: w},
			&graph.Tensor{Name: bn, DType: graph.Float32, Dims: []int64{int64(width)}, F32: w[:width]})
		g.Nodes = append(g.Nodes,
			graph.Node{Name: y, Op: "Gemm", Inputs: []string{x, wn, bn}, Outputs: []string{y},
				Attrs: []graph.Attr{{Name: "transB", Kind: graph.AttrInt, I: 1}}},
			graph.Node{Name: z, Op: "Tanh", Inputs: []string{y}, Outputs: []string{z}})
		x = z
	}
	g.Inputs = []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, int64(width)}}}
	g.Outputs = []graph.ValueInfo{{Name: x, DType: graph.Float32, Dims: []int64{-1, int64(width)}}}
	return g
}

// SetPriority moves an instance to a stream of that priority, keeps its
// outputs and survives SetSMs.
func TestBackendSetPriority(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g, err := zoo.Build("squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	inst := load(t, b, "sq", g, 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(1, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	if err := inst.SetPriority(RTPriority); err != nil {
		t.Fatal(err)
	}
	if p := inst.ln.s.(*emuStream).prio; p != RTPriority || inst.Priority() != RTPriority {
		t.Fatalf("stream priority %d, Priority() %d, want %d", p, inst.Priority(), RTPriority)
	}
	closeTo(t, "after SetPriority", infer(t, b, inst, 1, in), want, 0)
	if err := inst.SetSMs(4); err != nil {
		t.Fatal(err)
	}
	if p := inst.ln.s.(*emuStream).prio; p != RTPriority {
		t.Fatalf("after SetSMs the stream has priority %d", p)
	}
	if err := inst.SetPriority(0); err != nil {
		t.Fatal(err)
	}
	if inst.SMs() != 4 {
		t.Errorf("SetPriority left the partition: %d SMs", inst.SMs())
	}
	closeTo(t, "after SetSMs and SetPriority(0)", infer(t, b, inst, 1, in), want, 0)
}

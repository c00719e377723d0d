package conformance

import (
	"context"
	"math"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
	ncpu "sluice/native/cpu"
)

// TestGemmPanelWeights runs fully connected layers whose constant weights
// the engine stores in panels (a MatMul's K x N B; a Gemm's N x K B with
// transB, transposed into panels) through the cpu backend on both units:
// the GEMM kernel reads the panels, the row-major copy is not kept, and
// every output has the bits of the row-major product on the GEMM core.
// A weight another node also reads keeps its row-major copy beside.
func TestGemmPanelWeights(t *testing.T) {
	be := cpuBackend(t)
	// N: 18 full panels and a part; enough work for column tiles on
	// both units (tiles start at panel boundaries)
	const rows, K, N = 3, 1280, 600
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{rows, K}, F32: make([]float32, rows*K)}
	for i := range x.F32 {
		x.F32[i] = float32(math.Sin(float64(i)*0.37)) * 0.8
	}
	w := make([]float32, K*N)
	for i := range w {
		w[i] = float32(math.Cos(float64(i)*0.11)) * 0.05
	}
	for _, c := range []struct {
		name   string
		trans  bool // Gemm with transB (w stored N x K)
		shared bool // w is a graph output too: its row-major copy stays
	}{{"matmul", false, false}, {"gemm-transB", true, false}, {"matmul-shared", false, true}} {
		t.Run(c.name, func(t *testing.T) {
			wd := []int64{K, N}
			node := graph.Node{Name: "fc", Op: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"y"}}
			if c.trans {
				wd = []int64{N, K}
				node = graph.Node{Name: "fc", Op: "Gemm", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
					Attrs: []graph.Attr{{Name: "transB", Kind: graph.AttrInt, I: 1}}}
			}
			g := &graph.Graph{Name: c.name, Opset: 13,
				Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{rows, K}}},
				Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{rows, N}}},
				Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: wd, F32: w}},
				Nodes:        []graph.Node{node}}
			if c.shared {
				g.Outputs = append(g.Outputs, graph.ValueInfo{Name: "w", DType: graph.Float32, Dims: wd})
			}
			m, err := engine.Load(g, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			panelBytes := int64((N+engine.GemmPanel-1)/engine.GemmPanel) * engine.GemmPanel * K * 4
			want := panelBytes
			if c.shared {
				want += K * N * 4
			}
			if got := m.WeightBytes(); got != want {
				t.Errorf("weight arena %d bytes, want %d (panels %d, row-major copy kept: %v)", got, want, panelBytes, c.shared)
			}
			p, err := m.Compile(map[string][]int64{"x": x.Dims})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, k := range p.Kernels {
				if k.Op == engine.OpGemm && k.P[engine.PGemmPanels] == 1 {
					found = true
				}
			}
			if !found {
				t.Fatalf("no GEMM kernel reads panels:\n%s", p)
			}
			got, err := be.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": x})
			if err != nil {
				t.Fatal(err)
			}
			ref := make([]float32, rows*N)
			ldb := N
			if c.trans {
				ldb = K
			}
			if err := ncpu.Gemm(false, c.trans, rows, N, K, x.F32, K, w, ldb, ref, N, false); err != nil {
				t.Fatal(err)
			}
			y := got["y"]
			if y == nil || len(y.F32) != len(ref) {
				t.Fatalf("output %v, want %d floats", y, len(ref))
			}
			for i := range ref {
				if math.Float32bits(y.F32[i]) != math.Float32bits(ref[i]) {
					t.Fatalf("y[%d] = %v, want %v (the row-major product's bits)", i, y.F32[i], ref[i])
				}
			}
			if c.shared {
				if wo := got["w"]; wo == nil || len(wo.F32) != len(w) || wo.F32[K*N-1] != w[K*N-1] || wo.F32[1] != w[1] {
					t.Errorf("the shared weight as an output is not the weight")
				}
			}
		})
	}
}

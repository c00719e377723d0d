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

// TestConvPanelWeights runs ungrouped convolutions whose weights the
// engine stores transposed in panels through the cpu backend on both units,
// one case per path that reads them: a pointwise GEMM computed transposed
// (few output positions, a long reduction) and as it is, an im2col GEMM
// computed transposed, and the direct kernel. Every kernel reads the panels
// (the row-major copy is gone) and every output has the bits of the
// row-major product of the weights and the im2col of the input on the GEMM
// core.
func TestConvPanelWeights(t *testing.T) {
	be := cpuBackend(t)
	for _, c := range []struct {
		name                       string
		batch, cin, hw, cout, k, s int64
		op                         engine.Op
		tprod                      bool
	}{
		{"pointwise-transposed", 2, 256, 7, 64, 1, 1, engine.OpGemm, true},
		{"pointwise-transposed-ragged", 1, 160, 7, 64, 1, 1, engine.OpGemm, true}, // 49 positions fill 77% of the lanes
		{"pointwise", 1, 64, 7, 96, 1, 1, engine.OpGemm, false},
		{"im2col-transposed", 2, 32, 16, 64, 3, 2, engine.OpGemm, true},
		// a reduction of 1024 or more: one panel a block
		{"im2col-transposed-long", 1, 128, 14, 96, 3, 2, engine.OpGemm, true},
		{"pointwise-transposed-long", 2, 1024, 7, 96, 1, 1, engine.OpGemm, true},
		{"direct", 1, 16, 48, 192, 3, 2, engine.OpConv, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			pad := c.k / 2
			oh := (c.hw+2*pad-c.k)/c.s + 1
			ohw, kd := oh*oh, c.cin*c.k*c.k
			x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{c.batch, c.cin, c.hw, c.hw},
				F32: make([]float32, c.batch*c.cin*c.hw*c.hw)}
			for i := range x.F32 {
				x.F32[i] = float32(math.Sin(float64(i)*0.29)) * 0.7
			}
			w := make([]float32, c.cout*kd)
			for i := range w {
				w[i] = float32(math.Cos(float64(i)*0.13)) * 0.1
			}
			g := &graph.Graph{Name: c.name, Opset: 13,
				Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
				Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{c.batch, c.cout, oh, oh}}},
				Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: []int64{c.cout, c.cin, c.k, c.k}, F32: w}},
				Nodes: []graph.Node{{Name: "conv", Op: "Conv", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
					Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{pad, pad, pad, pad}},
						{Name: "strides", Kind: graph.AttrInts, Ints: []int64{c.s, c.s}}}}}}
			m, err := engine.Load(g, engine.Options{Units: 2})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := m.WeightBytes(), c.cout*kd*4; got != want {
				t.Errorf("weight arena %d bytes, want %d (the panels only)", got, want)
			}
			p, err := m.Compile(map[string][]int64{"x": x.Dims})
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, k := range p.Kernels {
				switch {
				case k.Op != c.op:
				case k.Op == engine.OpConv && k.P[engine.PConvWPanels] == 1,
					k.Op == engine.OpGemm && k.P[engine.PGemmAPanels] == 1 && (k.P[engine.PGemmTProd] == 1) == c.tprod:
					found = true
				}
			}
			if !found {
				t.Fatalf("no %v kernel reads the weights' panels (transposed product %v):\n%s", c.op, c.tprod, p)
			}
			got, err := be.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": x})
			if err != nil {
				t.Fatal(err)
			}
			y := got["y"]
			if y == nil || int64(len(y.F32)) != c.batch*c.cout*ohw {
				t.Fatalf("output %v", y)
			}
			col := make([]float32, kd*ohw)
			ref := make([]float32, c.cout*ohw)
			for n := int64(0); n < c.batch; n++ {
				for ci := int64(0); ci < c.cin; ci++ {
					for ky := int64(0); ky < c.k; ky++ {
						for kx := int64(0); kx < c.k; kx++ {
							row := (ci*c.k+ky)*c.k + kx
							for oy := int64(0); oy < oh; oy++ {
								for ox := int64(0); ox < oh; ox++ {
									iy, ix := oy*c.s-pad+ky, ox*c.s-pad+kx
									v := float32(0)
									if iy >= 0 && iy < c.hw && ix >= 0 && ix < c.hw {
										v = x.F32[((n*c.cin+ci)*c.hw+iy)*c.hw+ix]
									}
									col[row*ohw+oy*oh+ox] = v
								}
							}
						}
					}
				}
				if err := ncpu.Gemm(false, false, int(c.cout), int(ohw), int(kd), w, int(kd), col, int(ohw), ref, int(ohw), false); err != nil {
					t.Fatal(err)
				}
				for i, v := range ref {
					if g := y.F32[n*c.cout*ohw+int64(i)]; math.Float32bits(g) != math.Float32bits(v) {
						t.Fatalf("image %d: y[%d] = %v, want %v (the row-major product's bits)", n, i, g, v)
					}
				}
			}
		})
	}
}

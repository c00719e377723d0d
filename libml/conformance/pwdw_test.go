package conformance

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
	ncpu "sluice/native/cpu"
)

// TestPointwiseDepthwiseFused runs MobileNet-style pairs, a pointwise
// convolution (with or without bias and activation) whose output only a
// depthwise convolution reads, through the cpu backend on both units:
// at two images a unit or more the engine fuses each pair into one DWCONV
// kernel that computes the
// expanded tensor a band of rows at a time, and its output has the bits
// of the two kernels run apart (the same graph with the expanded tensor
// also a graph output, which keeps it stored and the kernels apart), for
// each depthwise plane routine (3x3 at stride 1 and 2 on wide and narrow
// planes, 5x5, dilated), weights in panels and row-major, images cut
// into several bands and into one.
func TestPointwiseDepthwiseFused(t *testing.T) {
	be := cpuBackend(t)
	type pwdw struct {
		batch, cin, ch, h, w, k, s, d int64
		pwAct                         string // "", "Relu", "Clip", "HardSwish", "LeakyRelu"
		pwBias, dwRes                 bool
	}
	for _, c := range []pwdw{
		{4, 16, 96, 112, 112, 3, 2, 1, "Clip", true, false}, // MobileNetV2's first expansion: many bands, panels
		{4, 24, 144, 56, 56, 3, 1, 1, "Clip", true, false},
		{4, 16, 96, 16, 16, 3, 2, 1, "Clip", true, false}, // one band
		{4, 24, 144, 8, 8, 3, 1, 1, "Clip", true, false},
		{4, 64, 384, 2, 2, 3, 1, 1, "Clip", true, false},
		{4, 96, 576, 4, 4, 3, 2, 1, "Clip", true, false},
		{4, 32, 48, 15, 15, 3, 2, 1, "Relu", false, false},     // narrow planes (the AVX-512 3x3 routine), odd size
		{4, 160, 96, 14, 14, 3, 1, 1, "", true, false},         // long reduction, no activation
		{4, 16, 40, 40, 40, 5, 1, 1, "Clip", true, false},      // 5x5 (the general AVX-512 routine)
		{4, 16, 40, 70, 70, 5, 1, 1, "Clip", true, false},      // 5x5 on a wide plane (the portable routine)
		{4, 8, 24, 33, 29, 3, 1, 2, "Relu", true, false},       // dilated
		{4, 8, 24, 31, 31, 5, 2, 1, "Clip", false, false},      // 5x5 at stride 2
		{4, 16, 72, 28, 28, 3, 2, 1, "HardSwish", true, false}, // MobileNetV3's (the general epilogue)
		{4, 16, 32, 12, 12, 5, 1, 1, "LeakyRelu", true, false}, // an activation parameter
		{3, 16, 48, 20, 20, 3, 1, 1, "Clip", true, false},      // fewer than two images a unit: apart
	} {
		name := fmt.Sprintf("b%d-%dto%d-%dx%d-k%ds%dd%d-%s", c.batch, c.cin, c.ch, c.h, c.w, c.k, c.s, c.d, c.pwAct)
		t.Run(name, func(t *testing.T) {
			pad := (c.k - 1) * c.d / 2
			oh := (c.h+2*pad-(c.k-1)*c.d-1)/c.s + 1
			ow := (c.w+2*pad-(c.k-1)*c.d-1)/c.s + 1
			fill := func(n int64, f float64, a float32) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(math.Sin(float64(i)*f+0.3)) * a
				}
				return v
			}
			x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{c.batch, c.cin, c.h, c.w},
				F32: fill(c.batch*c.cin*c.h*c.w, 0.013, 2)}
			inits := []*graph.Tensor{
				{Name: "w1", DType: graph.Float32, Dims: []int64{c.ch, c.cin, 1, 1}, F32: fill(c.ch*c.cin, 0.71, 0.5)},
				{Name: "w2", DType: graph.Float32, Dims: []int64{c.ch, 1, c.k, c.k}, F32: fill(c.ch*c.k*c.k, 0.37, 0.4)},
				{Name: "b2", DType: graph.Float32, Dims: []int64{c.ch}, F32: fill(c.ch, 0.9, 0.2)},
				{Name: "lo", DType: graph.Float32, Dims: []int64{}, F32: []float32{0}},
				{Name: "hi", DType: graph.Float32, Dims: []int64{}, F32: []float32{6}},
			}
			pwIn := []string{"x", "w1"}
			if c.pwBias {
				inits = append(inits, &graph.Tensor{Name: "b1", DType: graph.Float32, Dims: []int64{c.ch}, F32: fill(c.ch, 0.5, 0.3)})
				pwIn = append(pwIn, "b1")
			}
			nodes := []graph.Node{{Name: "pw", Op: "Conv", Inputs: pwIn, Outputs: []string{"e0"}}}
			e := "e0"
			switch c.pwAct {
			case "Relu":
				nodes = append(nodes, graph.Node{Name: "pwact", Op: "Relu", Inputs: []string{"e0"}, Outputs: []string{"e"}})
				e = "e"
			case "Clip":
				nodes = append(nodes, graph.Node{Name: "pwact", Op: "Clip", Inputs: []string{"e0", "lo", "hi"}, Outputs: []string{"e"}})
				e = "e"
			case "HardSwish":
				nodes = append(nodes, graph.Node{Name: "pwact", Op: "HardSwish", Inputs: []string{"e0"}, Outputs: []string{"e"}})
				e = "e"
			case "LeakyRelu":
				nodes = append(nodes, graph.Node{Name: "pwact", Op: "LeakyRelu", Inputs: []string{"e0"}, Outputs: []string{"e"},
					Attrs: []graph.Attr{{Name: "alpha", Kind: graph.AttrFloat, F: 0.15}}})
				e = "e"
			}
			nodes = append(nodes,
				graph.Node{Name: "dw", Op: "Conv", Inputs: []string{e, "w2", "b2"}, Outputs: []string{"d"},
					Attrs: []graph.Attr{{Name: "group", Kind: graph.AttrInt, I: c.ch},
						{Name: "pads", Kind: graph.AttrInts, Ints: []int64{pad, pad, pad, pad}},
						{Name: "strides", Kind: graph.AttrInts, Ints: []int64{c.s, c.s}},
						{Name: "dilations", Kind: graph.AttrInts, Ints: []int64{c.d, c.d}}}},
				graph.Node{Name: "dwact", Op: "Clip", Inputs: []string{"d", "lo", "hi"}, Outputs: []string{"y"}})
			yInfo := graph.ValueInfo{Name: "y", DType: graph.Float32, Dims: []int64{c.batch, c.ch, oh, ow}}
			build := func(apart bool) *graph.Graph {
				g := &graph.Graph{Name: "pwdw", Opset: 14,
					Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
					Outputs:      []graph.ValueInfo{yInfo},
					Initializers: inits, Nodes: nodes}
				if apart {
					g.Outputs = append(g.Outputs, graph.ValueInfo{Name: e, DType: graph.Float32, Dims: []int64{c.batch, c.ch, c.h, c.w}})
				}
				return g
			}
			// the fused program has one DWCONV with the producer and
			// no GEMM; kept apart, a GEMM and a plain DWCONV. A
			// backend whose 3x3 depthwise kernel vectorises rows up
			// to 32 wide across channels keeps those pairs apart.
			vectorised := c.k == 3 && c.d == 1 && c.w <= 32
			for _, v := range []struct {
				apart bool
				width int
			}{{false, 0}, {true, 0}, {false, 32}} {
				apart := v.apart || (v.width > 0 && vectorised)
				m, err := engine.Load(build(v.apart), engine.Options{Units: 2, DepthwiseVectorWidth: v.width})
				if err != nil {
					t.Fatal(err)
				}
				p, err := m.Compile(map[string][]int64{"x": x.Dims})
				if err != nil {
					t.Fatal(err)
				}
				fused, gemms := 0, 0
				for _, k := range p.Kernels {
					if k.Op == engine.OpDWConv && k.P[engine.PDWPointwise] == 1 {
						fused++
					}
					if k.Op == engine.OpGemm {
						gemms++
					}
				}
				// fused where the batch has two images a unit (2 units)
				if want := !apart && c.batch >= 4; (fused == 1 && gemms == 0) != want || (!want && (fused != 0 || gemms != 1)) {
					t.Fatalf("apart %v: %d fused depthwise kernels, %d GEMMs:\n%s", apart, fused, gemms, p)
				}
				if !apart && c.batch >= 4 && !strings.Contains(p.String(), "pw>dw") {
					t.Errorf("the fused kernel is not named after both nodes:\n%s", p)
				}
			}
			// the backend as it loads on this machine, and, where
			// that keeps the small planes apart (AVX-512), with the
			// AVX2 kernels, which fuse them
			isas := []string{""}
			if ncpu.DepthwiseVectorWidth() > 0 && slices.Contains(ncpu.GemmISAs(), "avx2") {
				isas = append(isas, "avx2")
			}
			defer ncpu.SetGemmISA("")
			for _, isa := range isas {
				if err := ncpu.SetGemmISA(isa); err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				got, err := be.RunGraph(ctx, build(false), map[string]*graph.Tensor{"x": x})
				if err != nil {
					t.Fatal(err)
				}
				ref, err := be.RunGraph(ctx, build(true), map[string]*graph.Tensor{"x": x})
				if err != nil {
					t.Fatal(err)
				}
				y, r := got["y"], ref["y"]
				if y == nil || r == nil || len(y.F32) != len(r.F32) || int64(len(r.F32)) != c.batch*c.ch*oh*ow {
					t.Fatalf("outputs %v and %v", y, r)
				}
				for i := range r.F32 {
					if math.Float32bits(y.F32[i]) != math.Float32bits(r.F32[i]) {
						t.Fatalf("isa %q: y[%d] = %v fused, %v apart", isa, i, y.F32[i], r.F32[i])
					}
				}
			}
		})
	}
}

package conformance

import (
	"context"
	"fmt"
	"math"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
)

// TestQLinearAddFused runs quantised residual additions in the QDQ form
// (DequantizeLinear of two 8-bit tensors, their Add, a QuantizeLinear)
// through the cpu backend: the engine runs the four as one QUANT kernel
// (QLinearAdd) whose output has the bits of the four apart (the same graph
// with the float sum also a graph output, which keeps them apart): uint8
// and int8, with and without zero points, the Add's operands either way
// round, an output scale of zero, an activation after the Add (ResNet's
// Relu; a Clip). A broadcast Add and a per-channel DequantizeLinear stay
// apart.
func TestQLinearAddFused(t *testing.T) {
	be := cpuBackend(t)
	type qadd struct {
		name             string
		dt               graph.DType
		shapeA, shapeB   []int64
		zeroPoints       bool
		swap, perChannel bool
		act              string // after the Add: "", "Relu", "Clip" (-1.5, 2)
		outScale         float32
		fused            bool
	}
	for _, c := range []qadd{
		{name: "uint8", dt: graph.Uint8, shapeA: []int64{2, 24, 7, 9}, shapeB: []int64{2, 24, 7, 9}, zeroPoints: true, outScale: 0.07, fused: true},
		{name: "int8-swapped", dt: graph.Int8, shapeA: []int64{1, 40, 5, 5}, shapeB: []int64{1, 40, 5, 5}, zeroPoints: true, swap: true, outScale: 0.05, fused: true},
		{name: "no-zero-points", dt: graph.Int8, shapeA: []int64{3, 1000}, shapeB: []int64{3, 1000}, outScale: 0.11, fused: true},
		{name: "zero-scale", dt: graph.Uint8, shapeA: []int64{2, 33}, shapeB: []int64{2, 33}, zeroPoints: true, outScale: 0, fused: true},
		{name: "broadcast", dt: graph.Uint8, shapeA: []int64{2, 8, 4, 4}, shapeB: []int64{1, 8, 1, 1}, zeroPoints: true, outScale: 0.07},
		{name: "per-channel", dt: graph.Int8, shapeA: []int64{2, 8, 4, 4}, shapeB: []int64{2, 8, 4, 4}, zeroPoints: true, perChannel: true, outScale: 0.07},
		{name: "relu", dt: graph.Uint8, shapeA: []int64{2, 8, 4, 4}, shapeB: []int64{2, 8, 4, 4}, zeroPoints: true, act: "Relu", outScale: 0.07, fused: true},
		{name: "clip", dt: graph.Int8, shapeA: []int64{2, 16, 5, 5}, shapeB: []int64{2, 16, 5, 5}, zeroPoints: true, act: "Clip", outScale: 0.03, fused: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			numel := func(s []int64) int64 {
				n := int64(1)
				for _, d := range s {
					n *= d
				}
				return n
			}
			fill := func(n int64, f, a float64) []float32 {
				v := make([]float32, n)
				for i := range v {
					v[i] = float32(math.Sin(float64(i)*f+0.2) * a)
				}
				return v
			}
			scalar := func(name string, v float32) *graph.Tensor {
				return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: []float32{v}}
			}
			zp := func(name string, v int64) *graph.Tensor {
				return &graph.Tensor{Name: name, DType: c.dt, Dims: []int64{}, I64: []int64{v}}
			}
			z0 := int64(128)
			if c.dt == graph.Int8 {
				z0 = 0
			}
			inits := []*graph.Tensor{scalar("sa", 0.031), scalar("sb", 0.047), scalar("sy", c.outScale)}
			if c.zeroPoints {
				inits = append(inits, zp("za", z0+3), zp("zb", z0-5), zp("zy", z0+1))
			} else {
				inits = append(inits, zp("za", 0), zp("zb", 0), zp("zy", 0))
			}
			dqB := []string{"qb", "sb", "zb"}
			if c.perChannel {
				ch := c.shapeB[1]
				inits = append(inits,
					&graph.Tensor{Name: "sbc", DType: graph.Float32, Dims: []int64{ch}, F32: fill(ch, 0.7, 0.01)},
					&graph.Tensor{Name: "zbc", DType: c.dt, Dims: []int64{ch}, I64: make([]int64, ch)})
				for i := range inits[len(inits)-2].F32 {
					inits[len(inits)-2].F32[i] += 0.03
				}
				dqB = []string{"qb", "sbc", "zbc"}
			}
			add := []string{"da", "db"}
			if c.swap {
				add = []string{"db", "da"}
			}
			nodes := []graph.Node{
				{Name: "qa", Op: "QuantizeLinear", Inputs: []string{"xa", "sa", "za"}, Outputs: []string{"qa"}},
				{Name: "qb", Op: "QuantizeLinear", Inputs: []string{"xb", "sb", "zb"}, Outputs: []string{"qb"}},
				{Name: "dqa", Op: "DequantizeLinear", Inputs: []string{"qa", "sa", "za"}, Outputs: []string{"da"}},
				{Name: "dqb", Op: "DequantizeLinear", Inputs: dqB, Outputs: []string{"db"}},
				{Name: "add", Op: "Add", Inputs: add, Outputs: []string{"t"}},
			}
			sum := "t"
			switch c.act {
			case "Relu":
				nodes = append(nodes, graph.Node{Name: "relu", Op: "Relu", Inputs: []string{"t"}, Outputs: []string{"r"}})
				sum = "r"
			case "Clip":
				inits = append(inits, scalar("lo", -1.5), scalar("hi", 2))
				nodes = append(nodes, graph.Node{Name: "clip", Op: "Clip", Inputs: []string{"t", "lo", "hi"}, Outputs: []string{"r"}})
				sum = "r"
			}
			nodes = append(nodes,
				graph.Node{Name: "qy", Op: "QuantizeLinear", Inputs: []string{sum, "sy", "zy"}, Outputs: []string{"qy"}},
				graph.Node{Name: "dqy", Op: "DequantizeLinear", Inputs: []string{"qy", "sy", "zy"}, Outputs: []string{"y"}})
			outShape := c.shapeA
			xa := &graph.Tensor{Name: "xa", DType: graph.Float32, Dims: c.shapeA, F32: fill(numel(c.shapeA), 0.37, 3)}
			xb := &graph.Tensor{Name: "xb", DType: graph.Float32, Dims: c.shapeB, F32: fill(numel(c.shapeB), 0.23, 5)}
			build := func(apart bool) *graph.Graph {
				g := &graph.Graph{Name: "qadd", Opset: 13,
					Inputs: []graph.ValueInfo{{Name: "xa", DType: graph.Float32, Dims: c.shapeA},
						{Name: "xb", DType: graph.Float32, Dims: c.shapeB}},
					Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: outShape}},
					Initializers: inits, Nodes: nodes}
				if apart {
					g.Outputs = append(g.Outputs, graph.ValueInfo{Name: "t", DType: graph.Float32, Dims: outShape})
				}
				return g
			}
			for _, apart := range []bool{false, true} {
				m, err := engine.Load(build(apart), engine.Options{Units: 2})
				if err != nil {
					t.Fatal(err)
				}
				p, err := m.Compile(map[string][]int64{"xa": c.shapeA, "xb": c.shapeB})
				if err != nil {
					t.Fatal(err)
				}
				fused, binaries := 0, 0
				for _, k := range p.Kernels {
					if k.Op == engine.OpQuant && k.P[3] == 5 {
						fused++
						if k.Ops != "QLinearAdd" || k.Name != "dqa+dqb+add+qy" && k.Name != "dqb+dqa+add+qy" {
							t.Errorf("fused kernel %q (%s)", k.Name, k.Ops)
						}
					}
					if k.Op == engine.OpBinary {
						binaries++
					}
				}
				if want := c.fused && !apart; (fused == 1 && binaries == 0) != want || (!want && (fused != 0 || binaries != 1)) {
					t.Fatalf("apart %v: %d QLinearAdd kernels, %d binary:\n%s", apart, fused, binaries, p)
				}
			}
			ctx := context.Background()
			in := map[string]*graph.Tensor{"xa": xa, "xb": xb}
			got, err := be.RunGraph(ctx, build(false), in)
			if err != nil {
				t.Fatal(err)
			}
			ref, err := be.RunGraph(ctx, build(true), in)
			if err != nil {
				t.Fatal(err)
			}
			y, r := got["y"], ref["y"]
			if y == nil || r == nil || len(y.F32) != len(r.F32) || int64(len(r.F32)) != numel(outShape) {
				t.Fatalf("outputs %v and %v", y, r)
			}
			distinct := map[float32]bool{}
			for i := range r.F32 {
				if math.Float32bits(y.F32[i]) != math.Float32bits(r.F32[i]) {
					t.Fatalf("y[%d] = %v fused, %v apart", i, y.F32[i], r.F32[i])
				}
				distinct[r.F32[i]] = true
			}
			// the data spans many quantisation steps (the test would
			// not see a wrong scale otherwise)
			if c.outScale != 0 && len(distinct) < 20 {
				t.Fatalf("%s: only %d distinct outputs", fmt.Sprint(c.name), len(distinct))
			}
		})
	}
}

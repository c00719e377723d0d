package conformance

import (
	"context"
	"fmt"
	"math"
	"testing"

	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/zoo"
	ncpu "sluice/native/cpu"
)

// byteChain turns qconvGraph's QuantizeLinear, QLinearConv into
// QuantizeLinear, QLinearConv, DequantizeLinear, so that both integer
// tensors lie between kernels; signed makes them int8 (zero points -9 and
// 5) instead of uint8.
func byteChain(g *graph.Graph, signed bool) *graph.Graph {
	if signed {
		for _, t := range g.Initializers {
			switch t.Name {
			case "xz":
				t.DType, t.I64 = graph.Int8, []int64{-9}
			case "yz":
				t.DType, t.I64 = graph.Int8, []int64{5}
			}
		}
	}
	conv := &g.Nodes[len(g.Nodes)-1]
	conv.Outputs = []string{"yq"}
	g.Nodes = append(g.Nodes, graph.Node{Name: "dq", Op: "DequantizeLinear", Inputs: []string{"yq", "ys", "yz"}, Outputs: []string{"y"}})
	g.Outputs[0].DType = graph.Float32
	return g
}

// byteKernels compiles g for shapes and counts the kernels that read or
// write an operand stored as bytes, and the arena's size in floats.
func byteKernels(t *testing.T, g *graph.Graph, shapes map[string][]int64, noBytes bool) (n, pools int, arena int64) {
	t.Helper()
	m, err := engine.Load(g, engine.Options{Units: 2, NoByteIntegers: noBytes})
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Compile(shapes)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range p.Kernels {
		if k.P[engine.PStore] != 0 {
			n++
			if k.Op == engine.OpPool {
				pools++
			}
		}
	}
	return n, pools, p.ArenaFloats
}

// gemmISAs runs f under each GEMM instruction set this CPU has (the
// depthwise kernel's paths follow it) and restores the default.
func gemmISAs(t *testing.T, f func(isa string)) {
	t.Helper()
	defer ncpu.SetGemmISA("")
	for _, isa := range ncpu.GemmISAs() {
		if err := ncpu.SetGemmISA(isa); err != nil {
			t.Fatal(err)
		}
		f(isa)
	}
}

// TestByteIntegers: 8-bit integer tensors between kernels are stored as
// bytes on the cpu backend (engine's byteIntegers), uint8 and int8.
// QuantizeLinear, a QLinearConv down each of the engine's paths and
// DequantizeLinear, with both integer tensors stored as bytes, give the
// constant folder's bits with every QGEMM micro-kernel under every GEMM
// instruction set; quantised zoo models store most of their activations
// as bytes, need a smaller arena, and give the same bits on every
// instruction set and micro-kernel (TestQuantizedZooORT checks them
// against ONNX Runtime).
func TestByteIntegers(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	cases := []struct {
		name                               string
		C, M, G, H, W, K, stride, pad, dil int64
		symmetric                          bool
	}{
		{"3x3-pad", 8, 24, 1, 13, 11, 3, 1, 1, 0, false},
		{"3x3-stride2-groups2", 8, 12, 2, 15, 15, 3, 2, 1, 0, false},
		{"pointwise", 40, 70, 1, 9, 9, 1, 1, 0, 0, false},
		{"depthwise-3x3", 32, 32, 32, 14, 14, 3, 1, 1, 0, false},
		{"depthwise-wide", 20, 20, 20, 40, 45, 3, 1, 1, 0, false},
		{"depthwise-stride2-mult2", 16, 32, 16, 11, 11, 3, 2, 1, 0, false},
		{"depthwise-5x5", 8, 8, 8, 9, 9, 5, 1, 2, 0, false},
		{"3x3-stride3", 4, 11, 1, 22, 40, 3, 3, 1, 0, false},
		{"1x1-stride2", 12, 20, 1, 19, 37, 1, 2, 0, 0, false},
		// symmetric weights (per-tensor terms): whole micro-tiles are
		// requantised in registers, 8 x 32 (the last micro-tile of 49
		// and 196 columns masked; 70 and 40 rows leave a partial row
		// group) and 4 x 64 (512 channels at 20x20: tiles of 8 strips;
		// 1024 at 8x47: a tile of 120 columns, its second micro-tile
		// masked)
		{"pointwise-symmetric", 40, 70, 1, 9, 9, 1, 1, 0, 0, true},
		{"1x1-7x7-symmetric", 64, 40, 1, 7, 7, 1, 1, 0, 0, true},
		{"1x1-14x14-symmetric", 24, 48, 1, 14, 14, 1, 1, 0, 0, true},
		{"1x1-20x20-symmetric", 16, 512, 1, 20, 20, 1, 1, 0, 0, true},
		{"1x1-8x47-symmetric", 16, 1024, 1, 8, 47, 1, 1, 0, 0, true},
		// 3x3 depthwise in integers (dw3x3_int_512, where the
		// channel-vector path does not take the plane): stride 2 on
		// rows wider than 32, stride 1 wider than 128, a channel
		// multiplier, no padding; whole and partial vectors, rows
		// whose loads reach the plane's and the tensor's end. The
		// asymmetric weights (zero points to 20) leave some channels
		// outside [-128, 127]: those take the float path
		{"depthwise-stride2-wide", 16, 16, 16, 37, 71, 3, 2, 1, 0, false},
		{"depthwise-stride2-wide-symmetric", 16, 16, 16, 37, 71, 3, 2, 1, 0, true},
		{"depthwise-150-symmetric", 8, 8, 8, 6, 150, 3, 1, 1, 0, true},
		{"depthwise-stride2-mult2-symmetric", 16, 32, 16, 20, 66, 3, 2, 1, 0, true},
		{"depthwise-stride2-nopad-symmetric", 24, 24, 24, 33, 65, 3, 2, 0, 0, true},
	}
	for _, c := range cases {
		for _, signed := range []bool{false, true} {
			name := fmt.Sprintf("%s-signed=%v", c.name, signed)
			g, x := qconvGraph(c.C, c.M, c.G, c.H, c.W, c.K, c.stride, c.pad, c.dil, true, c.symmetric)
			g = byteChain(g, signed)
			if n, _, _ := byteKernels(t, g, map[string][]int64{"x": x.Dims}, false); n != 3 {
				t.Fatalf("%s: %d kernels with bytes, want 3 (quantise, convolution, dequantise)", name, n)
			}
			gemmISAs(t, func(isa string) {
				foldEveryQGemmKernel(t, ctx, be, name+"-"+isa, g, x)
			})
		}
	}

	for _, c := range []struct {
		name  string
		opt   zoo.Options
		batch int64
		// the arena shrinks (ResNet-18's at 32x32 is as large as its
		// float buffers alone need)
		smaller bool
		pools   int // max pooling layers on bytes
	}{
		{"mobilenetv2", zoo.Options{Height: 64, Width: 64, Classes: 10, Seed: 4}, 2, true, 0},
		{"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 6}, 1, false, 1},
	} {
		_, q, _, sets := quantizedZoo(t, be, c.name, c.opt, 2)
		in := q.Inputs[0].Name
		dims := append([]int64{c.batch}, sets[0][in].Dims[1:]...)
		shapes := map[string][]int64{in: dims}
		nb, pools, arenaB := byteKernels(t, q, shapes, false)
		nf, _, arenaF := byteKernels(t, q, shapes, true)
		if nf != 0 || 4*nb < len(q.Nodes) || arenaB > arenaF || (c.smaller && arenaB == arenaF) || pools != c.pools {
			t.Errorf("%s-int8: %d kernels with bytes (%d without, %d max pooling), arena %d floats against %d",
				c.name, nb, nf, pools, arenaB, arenaF)
		}
		x := &graph.Tensor{Name: in, DType: graph.Float32, Dims: dims, F32: zoo.Input(7, int(numelOf(dims)))}
		var want []float32
		gemmISAs(t, func(isa string) {
			defer ncpu.SetQGemmKernel(ncpu.QGemmBest)
			for _, k := range []int{ncpu.QGemmBest, ncpu.QGemmNoVNNI, ncpu.QGemmPortable} {
				ncpu.SetQGemmKernel(k)
				out, err := be.RunGraph(ctx, q, map[string]*graph.Tensor{in: x})
				if err != nil {
					t.Fatal(err)
				}
				y := out[q.Outputs[0].Name].F32
				if want == nil {
					want = y
					continue
				}
				for i := range y {
					if math.Float32bits(y[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s-int8, %s, micro-kernel %d: y[%d] = %v, want %v", c.name, isa, k, i, y[i], want[i])
					}
				}
			}
		})
	}
}

// TestDepthwiseBytesLargeBias: a 3x3 depthwise layer on bytes whose
// biases take some channels' sums past 2^24, where float32 sums round
// (the integer path, dw3x3_int_512, leaves those channels to the float
// path, whose bits every instruction set gives), still gives the
// constant folder's bits with every micro-kernel under every GEMM
// instruction set.
func TestDepthwiseBytesLargeBias(t *testing.T) {
	be := cpuBackend(t)
	ctx := context.Background()
	for _, signed := range []bool{false, true} {
		g, x := qconvGraph(16, 16, 16, 21, 67, 3, 2, 1, 0, true, true)
		g = byteChain(g, signed)
		b := g.Initializer("b")
		b.I64[0], b.I64[1], b.I64[2] = 1<<25+1, -(1<<24)-3, 1<<24-7
		gemmISAs(t, func(isa string) {
			foldEveryQGemmKernel(t, ctx, be, fmt.Sprintf("large-bias-signed=%v-%s", signed, isa), g, x)
		})
	}
}

package conformance

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"testing"

	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/zoo"
)

// ZooTol is the largest absolute difference allowed between the cpu
// engine and ONNX Runtime on a zoo model's outputs (the OCR tolerance;
// measured differences are around 1e-5).
const ZooTol = OCRTol

// zooCases are the zoo models at the sizes the tests afford on two cores
// (full-size runs belong to the benchmarks): CNNs at 224×224 except
// ResNet-50 (112×112) and VGG-16 (64×64, 100 classes: its classifier
// weights grow with the input), two reduced BERT-shaped encoders and a
// 3-D U-Net on 8×32×32 volumes.
var zooCases = []struct {
	name string
	opt  zoo.Options
}{
	{"resnet18", zoo.Options{}},
	{"resnet50", zoo.Options{Height: 112, Width: 112}},
	{"mobilenetv2", zoo.Options{}},
	{"squeezenet11", zoo.Options{}},
	{"vgg16", zoo.Options{Height: 64, Width: 64, Classes: 100}},
	{"bert", zoo.Options{Layers: 2, SeqLen: 32, Hidden: 128, Heads: 4, FF: 512}},
	{"bert", zoo.Options{Layers: 1, SeqLen: 128, Hidden: 768, Heads: 12, FF: 3072}},
	{"unet3d", zoo.Options{Depth: 8, Height: 32, Width: 32}},
}

// TestZooCPUvsORT exports each zoo model to ONNX with libml/onnx, runs it
// in ONNX Runtime and in the cpu engine at batch 1 and 8 on the same
// deterministic inputs, and bounds the difference by ZooTol.
func TestZooCPUvsORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	ctx := context.Background()
	for _, c := range zooCases {
		h, w := c.opt.Height, c.opt.Width
		if h == 0 {
			h, w = 224, 224
		}
		name := fmt.Sprintf("%s_%dx%d", c.name, h, w)
		if c.name == "bert" {
			name = fmt.Sprintf("bert_L%d_S%d_H%d", c.opt.Layers, c.opt.SeqLen, c.opt.Hidden)
		}
		t.Run(name, func(t *testing.T) {
			g, err := zoo.Build(c.name, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			checkExport(t, g)
			ref, err := ob.LoadModel(ctx, name, g)
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			inst, err := cb.LoadModel(ctx, name, g)
			if err != nil {
				t.Fatal(err)
			}
			defer inst.Close()
			for _, batch := range []int{1, 8} {
				in := zoo.Input(uint64(batch), batch*inst.InputSize())
				want := runInstance(t, ob, ref, batch, in)
				got := runInstance(t, cb, inst, batch, in)
				d, rel := MaxAbsDiff(got, want), maxRelDiff(got, want)
				t.Logf("batch %d: max abs diff %.3g, max diff relative to max(1,|want|) %.3g, over %d outputs", batch, d, rel, len(want))
				if d > ZooTol || len(got) != len(want) {
					t.Errorf("batch %d: max abs diff %g above %g", batch, d, ZooTol)
				}
			}
		})
	}
}

// checkExport checks that g survives the ONNX round trip: the decoded
// nodes and weights equal the originals.
func checkExport(t *testing.T, g *graph.Graph) {
	t.Helper()
	b, err := onnx.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	back, err := onnx.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back.Nodes, g.Nodes) || back.Opset != g.Opset || len(back.Initializers) != len(g.Initializers) {
		t.Fatalf("ONNX export round trip changed the graph's nodes")
	}
	for i, w := range g.Initializers {
		if !reflect.DeepEqual(scalarDims(back.Initializers[i]), scalarDims(w)) {
			t.Fatalf("ONNX export round trip changed initializer %q", w.Name)
		}
	}
}

// scalarDims returns a copy of t whose Dims are non-nil, so that a scalar
// written with nil or empty Dims compares equal.
func scalarDims(t *graph.Tensor) graph.Tensor {
	c := *t
	if c.Dims == nil {
		c.Dims = []int64{}
	}
	return c
}

func maxRelDiff(got, want []float32) float64 {
	m := 0.0
	for i := range want {
		d := math.Abs(float64(got[i])-float64(want[i])) / math.Max(1, math.Abs(float64(want[i])))
		if d > m {
			m = d
		}
	}
	return m
}

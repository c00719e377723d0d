//go:build linux && cgo

package cuda

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"sluice/libml"
	"sluice/libml/conformance"
	"sluice/libml/cpu"
	"sluice/libml/cuda/internal/emu"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/zoo"
)

// The cuda backend end to end on the kernel emulator (backend_emu_test.go):
// models compiled by libml/engine run as the real kernel sources, through
// the backend's plans, host queue, device window, preemption and restore,
// and are compared with the cpu backend.

// emuSMs is the emulated device's SM count.
const emuSMs = 8

// newEmuBackend returns an initialized backend on a fresh emulated device;
// cleanup deinitializes it and checks that nothing leaked.
func newEmuBackend(t testing.TB, opts Options, cfg libml.BackendConfig, green bool) (*Backend, *emuDev) {
	t.Helper()
	return newEmuBackendOn(t, newEmuDev(emuSMs, green), opts, cfg)
}

// newEmuBackendOn is a backend on the emulated device d, deinitialised
// and checked for leaks at the test's end.
func newEmuBackendOn(t testing.TB, d *emuDev, opts Options, cfg libml.BackendConfig) (*Backend, *emuDev) {
	t.Helper()
	opts.open = func() (gpuCtx, error) { return d, nil }
	b := NewBackend(opts)
	if err := b.Init(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Errorf("Deinit: %v", err)
		}
		if l := d.h.leaks(); l != "" {
			t.Errorf("leaked on the device: %s", l)
		}
	})
	return b, d
}

var cpuRef struct {
	once sync.Once
	b    *cpu.Backend
	err  error
}

// cpuBackend is the reference: the cpu backend on every core, shared by
// the tests.
func cpuBackend(t testing.TB) *cpu.Backend {
	t.Helper()
	cpuRef.once.Do(func() {
		b := cpu.New()
		if err := b.Init(context.Background(), libml.BackendConfig{}); err != nil {
			cpuRef.err = err
			return
		}
		cpuRef.b = b
	})
	if cpuRef.err != nil {
		t.Fatal(cpuRef.err)
	}
	return cpuRef.b
}

// load loads g on be and configures it for maxBatch.
func load(t testing.TB, be libml.Backend, name string, g *graph.Graph, maxBatch int) libml.Instance {
	t.Helper()
	inst, err := be.LoadModel(context.Background(), name, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := be.ConfigureBatch(inst, maxBatch); err != nil {
		inst.Close()
		t.Fatal(err)
	}
	return inst
}

func infer(t testing.TB, be libml.Backend, inst libml.Instance, batch int, in []float32) []float32 {
	t.Helper()
	out := make([]float32, batch*inst.OutputSize())
	if err := be.InferBatch(context.Background(), inst, batch, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// agree checks got against the cpu backend's want: |got-want| <=
// tol*(1+|want|) everywhere, and logs the largest difference.
func agree(t testing.TB, what string, got, want []float32, tol float64) {
	t.Helper()
	var d, m float64
	for i := range want {
		d = math.Max(d, math.Abs(float64(got[i])-float64(want[i])))
		m = math.Max(m, math.Abs(float64(want[i])))
	}
	t.Logf("%s: %d outputs, max |want| %.3g, max |got-want| %.3g", what, len(want), m, d)
	if m == 0 {
		t.Errorf("%s: every output is zero", what)
	}
	closeTo(t, what, got, want, tol)
}

// emuZooCases are the zoo models at sizes the emulator runs in seconds
// (every kernel block's 256 threads are coroutines on one core).
// The emulator's cost grows with weights times batch (a block's K loop
// is a barrier every 16-deep slice, each a switch of 256 coroutines), so
// the weight-heavy models run at batch 1.
var emuZooCases = []struct {
	name  string
	opt   zoo.Options
	batch int
}{
	{"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 1}, 1},
	{"resnet50", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 2}, 1},
	{"mobilenetv2", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 3}, 2},
	{"vgg16", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 4}, 1},
	{"squeezenet11", zoo.Options{Height: 48, Width: 48, Classes: 10, Seed: 5}, 2},
	{"bert", zoo.Options{Layers: 2, SeqLen: 16, Hidden: 64, Heads: 4, FF: 128, Seed: 6}, 2},
}

// Every zoo model through the cuda backend on the emulator agrees with
// the cpu backend (batch 2: one program over both requests).
func TestBackendZooEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	for _, c := range emuZooCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := zoo.Build(c.name, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			inst := load(t, b, c.name, g, c.batch)
			defer inst.Close()
			rinst := load(t, ref, c.name, g, c.batch)
			defer rinst.Close()
			if fmt.Sprint(inst.OutputShape()) != fmt.Sprint(rinst.OutputShape()) || inst.InputSize() != rinst.InputSize() {
				t.Fatalf("shapes %v -> %v, cpu %v -> %v", inst.InputShape(), inst.OutputShape(), rinst.InputShape(), rinst.OutputShape())
			}
			in := zoo.Input(11, c.batch*inst.InputSize())
			t0 := time.Now()
			got := infer(t, b, inst, c.batch, in)
			el := time.Since(t0)
			agree(t, fmt.Sprintf("%s batch %d", c.name, c.batch), got, infer(t, ref, rinst, c.batch, in), tol)
			ci := inst.(*Instance)
			p, _ := ci.Program(c.batch)
			st := ci.Stats()
			t.Logf("%d kernels (%d in place), %d launched, emulated in %v", len(p.Kernels), p.InPlace, st.Launches, el.Round(time.Millisecond))
			if st.Preemptions != 0 || st.Runs != 1 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// ONNX models (decoded by libml/onnx) through the cuda backend on the
// emulator agree with the cpu backend: PaddleOCR's text-angle classifier
// (a real trained model, when `make deps` fetched it) and a zoo model
// exported to ONNX and decoded back.
func TestBackendONNXEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	t.Run("zoo-export", func(t *testing.T) {
		g, err := zoo.Build("squeezenet11", zoo.Options{Height: 32, Width: 32, Classes: 16, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		data, err := onnx.Encode(g)
		if err != nil {
			t.Fatal(err)
		}
		if g, err = onnx.Decode(data); err != nil {
			t.Fatal(err)
		}
		inst := load(t, b, "sq", g, 1)
		defer inst.Close()
		rinst := load(t, ref, "sq", g, 1)
		defer rinst.Close()
		in := zoo.Input(3, inst.InputSize())
		agree(t, "squeezenet from ONNX", infer(t, b, inst, 1, in), infer(t, ref, rinst, 1, in), tol)
	})
	t.Run("recurrent", func(t *testing.T) {
		// a bidirectional LSTM with peepholes and clip, then a GRU with
		// linear_before_reset, batch first (layout 1), batch 2: the
		// recurrent layers lower onto GEMM, unary, binary and copy
		// kernels, which the cuda device runs as the cpu does
		const T, I, H = 4, 5, 8
		w := func(name string, seed uint64, dims ...int64) *graph.Tensor {
			n := int64(1)
			for _, d := range dims {
				n *= d
			}
			v := conformance.Deterministic(int(n), seed)
			for i := range v {
				v[i] *= 0.5
			}
			return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
		}
		g := &graph.Graph{
			Name: "recurrent", Opset: 14,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, T, I}}},
			Outputs: []graph.ValueInfo{{Name: "y2", DType: graph.Float32, Dims: []int64{-1, T, 1, H}}},
			Initializers: []*graph.Tensor{w("W", 1, 2, 4*H, I), w("R", 2, 2, 4*H, H), w("B", 3, 2, 8*H), w("P", 4, 2, 3*H),
				w("W2", 5, 1, 3*H, 2*H), w("R2", 6, 1, 3*H, H), w("B2", 7, 1, 6*H), {Name: "shape", DType: graph.Int64, Dims: []int64{3}, I64: []int64{0, T, 2 * H}}},
			Nodes: []graph.Node{
				{Name: "lstm", Op: "LSTM", Inputs: []string{"x", "W", "R", "B", "", "", "", "P"}, Outputs: []string{"y"},
					Attrs: []graph.Attr{{Name: "hidden_size", Kind: graph.AttrInt, I: H}, {Name: "direction", Kind: graph.AttrString, S: "bidirectional"},
						{Name: "layout", Kind: graph.AttrInt, I: 1}, {Name: "clip", Kind: graph.AttrFloat, F: 2}}},
				{Name: "flat", Op: "Reshape", Inputs: []string{"y", "shape"}, Outputs: []string{"yf"}},
				{Name: "gru", Op: "GRU", Inputs: []string{"yf", "W2", "R2", "B2"}, Outputs: []string{"y2"},
					Attrs: []graph.Attr{{Name: "hidden_size", Kind: graph.AttrInt, I: H}, {Name: "layout", Kind: graph.AttrInt, I: 1},
						{Name: "linear_before_reset", Kind: graph.AttrInt, I: 1}}},
			},
		}
		inst := load(t, b, "rec", g, 2)
		defer inst.Close()
		rinst := load(t, ref, "rec", g, 2)
		defer rinst.Close()
		in := zoo.Input(9, 2*inst.InputSize())
		agree(t, "LSTM then GRU", infer(t, b, inst, 2, in), infer(t, ref, rinst, 2, in), tol)
	})
	t.Run("ocr-classifier", func(t *testing.T) {
		path := conformance.ModelPath(t, "ch_ppocr_mobile_v2.0_cls_infer.onnx")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		g, err := onnx.Decode(data)
		if err != nil {
			t.Fatal(err)
		}
		g.Inputs[0].Dims = []int64{-1, 3, 48, 192}
		g.Inputs[0].DimParams = nil
		inst := load(t, b, "cls", g, 2)
		defer inst.Close()
		rinst := load(t, ref, "cls", g, 2)
		defer rinst.Close()
		in := append(conformance.TextLine(48, 192, 2, false), conformance.TextLine(48, 192, 2, true)...)
		got, want := infer(t, b, inst, 2, in), infer(t, ref, rinst, 2, in)
		agree(t, "PaddleOCR classifier", got, want, tol)
		t.Logf("probabilities: upright %v, turned %v", got[:2], got[2:])
	})
	t.Run("conv3d", func(t *testing.T) {
		// a 3-D convolution (padded depth unfolded into channels, one
		// 2-D convolution, transposed back) and a ReLU, batch 2
		w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{4, 3, 3, 3, 3}, F32: conformance.Deterministic(4*3*27, 31)}
		bias := &graph.Tensor{Name: "b", DType: graph.Float32, Dims: []int64{4}, F32: []float32{0.1, -0.2, 0.3, 0}}
		ints := func(name string, v ...int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v} }
		g := &graph.Graph{Name: "conv3d", Opset: 17,
			Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 5, 6, 7}, DimParams: []string{"batch"}}},
			Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 4, 3, 6, 4}, DimParams: []string{"batch"}}},
			Initializers: []*graph.Tensor{w, bias},
			Nodes: []graph.Node{
				{Name: "c", Op: "Conv", Inputs: []string{"x", "w", "b"}, Outputs: []string{"c"},
					Attrs: []graph.Attr{ints("strides", 2, 1, 2), ints("pads", 1, 1, 1, 1, 1, 1)}},
				{Name: "y", Op: "Relu", Inputs: []string{"c"}, Outputs: []string{"y"}},
			}}
		agreeBatch2(t, b, ref, g, "3-D convolution", 32)
	})
	t.Run("qconv3d", func(t *testing.T) {
		// a quantised 3-D convolution (the depth padding filled with the
		// input's zero point, depth windows unfolded into the channels of
		// one integer 2-D convolution on QGEMM), batch 2
		wq := make([]int64, 4*3*27)
		for i := range wq {
			wq[i] = int64((i*37)%255) - 127
		}
		f := func(name string, v ...float32) *graph.Tensor {
			return &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{}, F32: v}
		}
		u8 := func(name string, v int64) *graph.Tensor {
			return &graph.Tensor{Name: name, DType: graph.Uint8, Dims: []int64{}, I64: []int64{v}}
		}
		ints := func(name string, v ...int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v} }
		g := &graph.Graph{Name: "qconv3d", Opset: 13,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 5, 6, 7}, DimParams: []string{"batch"}}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 4, 3, 6, 4}, DimParams: []string{"batch"}}},
			Initializers: []*graph.Tensor{f("xs", 0.02), u8("xz", 120), f("ws", 0.003), u8("yz", 128), f("ys", 0.05),
				{Name: "w", DType: graph.Int8, Dims: []int64{4, 3, 3, 3, 3}, I64: wq},
				{Name: "wz", DType: graph.Int8, Dims: []int64{}, I64: []int64{0}},
				{Name: "b", DType: graph.Int32, Dims: []int64{4}, I64: []int64{100, -2000, 30, 0}}},
			Nodes: []graph.Node{
				{Name: "q", Op: "QuantizeLinear", Inputs: []string{"x", "xs", "xz"}, Outputs: []string{"xq"}},
				{Name: "c", Op: "QLinearConv", Inputs: []string{"xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"}, Outputs: []string{"yq"},
					Attrs: []graph.Attr{ints("strides", 2, 1, 2), ints("pads", 1, 1, 1, 1, 1, 1)}},
				{Name: "d", Op: "DequantizeLinear", Inputs: []string{"yq", "ys", "yz"}, Outputs: []string{"y"}},
			}}
		agreeBatch2(t, b, ref, g, "quantised 3-D convolution", 36)
	})
	t.Run("affinegrid", func(t *testing.T) {
		// a run-time theta times the constant base grid (one batched
		// GEMM); size says batch 1, the grid follows theta's batch
		g := &graph.Graph{Name: "affinegrid", Opset: 20,
			Inputs:       []graph.ValueInfo{{Name: "theta", DType: graph.Float32, Dims: []int64{-1, 2, 3}, DimParams: []string{"batch"}}},
			Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 5, 7, 2}, DimParams: []string{"batch"}}},
			Initializers: []*graph.Tensor{{Name: "size", DType: graph.Int64, Dims: []int64{4}, I64: []int64{1, 3, 5, 7}}},
			Nodes:        []graph.Node{{Name: "y", Op: "AffineGrid", Inputs: []string{"theta", "size"}, Outputs: []string{"y"}}},
		}
		agreeBatch2(t, b, ref, g, "affine grid", 37)
	})
	t.Run("avgpool-dilated", func(t *testing.T) {
		// a dilated, padded average pool counting the padding, ceil mode
		ints := func(name string, v ...int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v} }
		one := func(name string, v int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInt, I: v} }
		g := &graph.Graph{Name: "avgpool-dilated", Opset: 19,
			Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 2, 9, 10}, DimParams: []string{"batch"}}},
			Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 2, 5, 4}, DimParams: []string{"batch"}}},
			Nodes: []graph.Node{{Name: "y", Op: "AveragePool", Inputs: []string{"x"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{ints("kernel_shape", 2, 3), ints("strides", 2, 2), ints("pads", 1, 0, 1, 1),
					ints("dilations", 3, 2), one("count_include_pad", 1), one("ceil_mode", 1)}}},
		}
		agreeBatch2(t, b, ref, g, "dilated average pool", 38)
	})
	t.Run("convtranspose3d", func(t *testing.T) {
		// a 3-D transposed convolution (the input spread by the strides,
		// a stride-1 3-D convolution by the flipped weights), batch 2
		w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{3, 2, 2, 3, 3}, F32: conformance.Deterministic(3*2*18, 33)}
		ints := func(name string, v ...int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v} }
		g := &graph.Graph{Name: "convt3d", Opset: 17,
			Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3, 3, 4, 4}, DimParams: []string{"batch"}}},
			Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 2, 6, 8, 8}, DimParams: []string{"batch"}}},
			Initializers: []*graph.Tensor{w},
			Nodes: []graph.Node{{Name: "y", Op: "ConvTranspose", Inputs: []string{"x", "w"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{ints("strides", 2, 2, 2), ints("pads", 0, 1, 1, 0, 1, 1), ints("output_padding", 0, 1, 1)}}},
		}
		agreeBatch2(t, b, ref, g, "3-D transposed convolution", 34)
	})
	t.Run("resize3d", func(t *testing.T) {
		// trilinear upsampling: the (H, W) pass, then (D, OH*OW)
		sc := &graph.Tensor{Name: "sc", DType: graph.Float32, Dims: []int64{5}, F32: []float32{1, 1, 2, 1.5, 2}}
		g := &graph.Graph{Name: "resize3d", Opset: 19,
			Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 2, 3, 4, 5}, DimParams: []string{"batch"}}},
			Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 2, 6, 6, 10}, DimParams: []string{"batch"}}},
			Initializers: []*graph.Tensor{sc},
			Nodes: []graph.Node{{Name: "y", Op: "Resize", Inputs: []string{"x", "", "sc"}, Outputs: []string{"y"},
				Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "linear"}}}},
		}
		agreeBatch2(t, b, ref, g, "trilinear resize", 35)
	})
}

// agreeBatch2 runs g at batch 2 on the emulated backend b and on the cpu
// reference on seeded inputs, and compares the outputs within tol.
func agreeBatch2(t *testing.T, b, ref libml.Backend, g *graph.Graph, what string, seed uint64) {
	t.Helper()
	inst := load(t, b, g.Name, g, 2)
	defer inst.Close()
	rinst := load(t, ref, g.Name, g, 2)
	defer rinst.Close()
	in := conformance.Deterministic(2*inst.InputSize(), seed)
	agree(t, what, infer(t, b, inst, 2, in), infer(t, ref, rinst, 2, in), tol)
}

// LinkModel shares the weights: a second instance adds its arena and
// stream state only (at most 5% of the weights here), and gives the same
// outputs. The weights outlive the first instance and go with the last.
func TestBackendLinkModel(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	g, err := zoo.Build("squeezenet11", zoo.Options{Height: 32, Width: 32, Seed: 8})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	before := d.h.liveBytes()
	base := load(t, b, "sq", g, 2).(*Instance)
	afterBase := d.h.liveBytes()
	link, err := b.LinkModel(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ConfigureBatch(link, 2); err != nil {
		t.Fatal(err)
	}
	li := link.(*Instance)
	added := d.h.liveBytes() - afterBase
	w := base.WeightBytes()
	t.Logf("weights %d KiB (model %d KiB with constants); base instance %d KiB of device memory, linked instance %d KiB (%.2f%% of the weights; %d KiB allocated by LinkModel+ConfigureBatch, pinned staging included)",
		w>>10, base.ModelDeviceBytes()>>10, base.DeviceBytes()>>10, li.DeviceBytes()>>10,
		100*float64(li.DeviceBytes())/float64(w), added>>10)
	if li.DeviceBytes() > w/20 {
		t.Errorf("linked instance owns %d device bytes, more than 5%% of the %d weight bytes", li.DeviceBytes(), w)
	}
	if added-int64(li.stageN)-int64(li.descN) != li.DeviceBytes() {
		t.Errorf("linking allocated %d device bytes (%d staging), the instance reports %d", added, li.stageN, li.DeviceBytes())
	}
	if afterBase-before < w {
		t.Errorf("loading allocated %d bytes, less than the weights", afterBase-before)
	}
	in := zoo.Input(4, 2*base.InputSize())
	want := infer(t, b, base, 2, in)
	if err := base.Close(); err != nil {
		t.Fatal(err)
	}
	got := infer(t, b, link, 2, in) // the weights are still there
	closeTo(t, "linked instance", got, want, 0)
	if err := link.Close(); err != nil {
		t.Fatal(err)
	}
	if err := link.Close(); err == nil {
		t.Error("second Close succeeded")
	}
	if n := d.h.liveBytes(); n != before {
		t.Errorf("%d device bytes left after the last instance closed, want %d", n, before)
	}
	if _, err := b.LinkModel(ctx, base); err == nil {
		t.Error("LinkModel of a closed instance succeeded")
	}
}

// preemptModel builds a model for the preemption tests: "bert" has
// in-place kernels (restores start at their idempotent group), the CNNs
// are small.
func preemptModel(t testing.TB, name string) *graph.Graph {
	t.Helper()
	var g *graph.Graph
	var err error
	switch name {
	case "bert":
		g, err = zoo.Build("bert", zoo.Options{Layers: 1, SeqLen: 8, Hidden: 32, Heads: 2, FF: 64, Seed: 9})
	default:
		g, err = zoo.Build(name, zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 10})
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Preemption at a random kernel, at a random block, before the block
// starts or once it is running (the emulator sets the stream's flag
// there, as the host would), then restore: the output is bit for bit the
// unpreempted one, and the run restarted from the idempotent group of the
// last kernel that started (REEF §4.4). Kernels after it exit in their
// prologue.
func TestBackendPreemptRestore(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	r := rand.New(rand.NewPCG(61, 62))
	for _, c := range []struct {
		name  string
		batch int
	}{{"bert", 2}, {"squeezenet11", 1}} {
		t.Run(c.name, func(t *testing.T) {
			batch := c.batch
			inst := load(t, b, c.name, preemptModel(t, c.name), batch).(*Instance)
			defer inst.Close()
			in := zoo.Input(5, batch*inst.InputSize())
			want := infer(t, b, inst, batch, in)
			p, _ := inst.Program(batch)
			ls, _ := inst.Launches(batch)
			t.Logf("%d kernels, %d in place", len(p.Kernels), p.InPlace)
			restartedEarlier := 0
			for trial := 0; trial < 8; trial++ {
				k := r.IntN(len(ls))
				if trial == 0 && p.InPlace > 0 {
					// an in-place kernel: its group starts earlier
					for j := range p.Kernels {
						if !p.Kernels[j].Idempotent() && ls[j].Grid > 1 {
							k = j
							break
						}
					}
				}
				for ls[k].Grid == 0 {
					k = (k + 1) % len(ls)
				}
				// the flag is set before block blk starts, or after its
				// prologue (one barrier): then block blk runs on
				o := emu.Options{Preempt: true, PreemptBlock: int64(r.IntN(ls[k].Grid)), PreemptAfterSyncs: int64(r.IntN(2))}
				started := k // the last kernel a block of which started
				if o.PreemptBlock == 0 && o.PreemptAfterSyncs == 0 {
					for started--; started >= 0 && ls[started].Grid == 0; started-- {
					}
				}
				wantResume := 0
				if started >= 0 {
					wantResume = p.IdemEntry[started]
				}
				d.h.armPreempt(int64(k), o)
				s0 := inst.Stats()
				got := infer(t, b, inst, batch, in)
				s1 := inst.Stats()
				closeTo(t, fmt.Sprintf("kernel %d preempted", k), got, want, 0)
				if s1.Preemptions-s0.Preemptions != 1 || s1.Runs-s0.Runs != 2 {
					t.Errorf("kernel %d: %d preemptions in %d runs, want 1 in 2", k, s1.Preemptions-s0.Preemptions, s1.Runs-s0.Runs)
				}
				if s1.LastResume != wantResume {
					t.Errorf("kernel %d: restored from %d, want %d", k, s1.LastResume, wantResume)
				}
				if s1.LastResume < started {
					restartedEarlier++
				}
				t.Logf("preempted kernel %d (%s, %s) before block %d (+%d barriers): restored from kernel %d",
					k, p.Kernels[k].Ops, ls[k].Kernel, o.PreemptBlock, o.PreemptAfterSyncs, s1.LastResume)
			}
			if p.InPlace > 0 && restartedEarlier == 0 {
				t.Error("no restore started before the interrupted kernel")
			}
		})
	}
}

// Host preemption: Instance.Preempt while the program runs (here from the
// stream, just before kernel k starts) stops the host queue, sets the flag
// and drains; InferBatch restores and the output is unchanged. A
// cancelled context preempts the same way and InferBatch returns its
// error; the next batch runs clean.
func TestBackendPreemptHost(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "bert", preemptModel(t, "bert"), 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(6, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	ls, _ := inst.Launches(1)
	n := int64(len(ls))
	k := n / 2
	var once sync.Once
	d.h.setBefore(func(_ string, exec int64) {
		if exec == k {
			once.Do(func() {
				if err := inst.Preempt(); err != nil {
					t.Error(err)
				}
			})
		}
	})
	d.h.launches()
	s0 := inst.Stats()
	got := infer(t, b, inst, 1, in)
	s1 := inst.Stats()
	closeTo(t, "after a host preemption", got, want, 0)
	if s1.Preemptions-s0.Preemptions != 1 {
		t.Errorf("%d preemptions", s1.Preemptions-s0.Preemptions)
	}
	// the host queue stopped: fewer launches than a run and a restore
	// would take without it
	first := s1.Launches - s0.Launches - (n - int64(s1.LastResume))
	t.Logf("preempted at kernel %d of %d: %d launched before the reset (window %d), restored from %d",
		k, n, first, b.Window(), s1.LastResume)
	if first > k+int64(b.Window())+1 || first < k {
		t.Errorf("%d kernels launched before the reset; preempted at %d with a window of %d", first, k, b.Window())
	}
	// the launches after the preemption exited in their prologue: the
	// execution index was not advanced past k
	if s1.LastResume > int(k) {
		t.Errorf("restored from %d, after the preempted kernel %d", s1.LastResume, k)
	}

	// cancellation
	ctx, cancel := context.WithCancel(context.Background())
	var once2 sync.Once
	d.h.setBefore(func(_ string, exec int64) {
		if exec == k {
			once2.Do(cancel)
		}
	})
	out := make([]float32, inst.OutputSize())
	err := b.InferBatch(ctx, inst, 1, in, out)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled InferBatch: %v", err)
	}
	d.h.setBefore(nil)
	closeTo(t, "after a cancelled batch", infer(t, b, inst, 1, in), want, 0)
	if err := b.InferBatch(ctx, inst, 1, in, out); !errors.Is(err, context.Canceled) {
		t.Errorf("InferBatch with a cancelled context: %v", err)
	}
	if err := inst.Preempt(); err != nil {
		t.Errorf("Preempt with nothing running: %v", err)
	}
	closeTo(t, "after an idle Preempt", infer(t, b, inst, 1, in), want, 0)
}

// A segment (the scheduler's entry) reports a preemption and where to
// restore; a segment from there completes the batch.
func TestBackendRunSegment(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	inst := load(t, b, "bert", preemptModel(t, "bert"), 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(7, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	p, _ := inst.Program(1)
	k := len(p.Kernels) - 2
	// the flag is set before kernel k's first block: k exits in its
	// prologue, so the last kernel that started is k-1, and the run
	// restarts from its idempotent group
	d.h.armPreempt(int64(k), emu.Options{Preempt: true, PreemptBlock: 0})
	pre, resume, err := runSeg(inst, 1, ResumePoint{}, in, nil)
	if err != nil || !pre || resume != p.IdemEntry[k-1] {
		t.Fatalf("segment: preempted %v resume %d err %v; want true %d", pre, resume, err, p.IdemEntry[k-1])
	}
	got := make([]float32, inst.OutputSize())
	if pre, _, err = runSeg(inst, 1, ResumePoint{Kernel: resume}, nil, got); err != nil || pre {
		t.Fatalf("restored segment: preempted %v err %v", pre, err)
	}
	closeTo(t, "segment, preempted and restored", got, want, 0)
	if pre, _, err := runSeg(inst, 1, ResumePoint{Kernel: len(p.Kernels)}, nil, nil); err != nil || pre {
		t.Errorf("segment from the end: preempted %v err %v", pre, err)
	}
	if _, _, err := runSeg(inst, 1, ResumePoint{Kernel: len(p.Kernels) + 1}, nil, nil); err == nil {
		t.Error("segment past the end accepted")
	}
	// an empty segment writes the input alone; the next runs on it
	clear(got)
	setInput(t, inst, 1, in)
	if pre, _, err = runSeg(inst, 1, ResumePoint{}, nil, got); err != nil || pre {
		t.Fatalf("segment after an empty one: preempted %v err %v", pre, err)
	}
	closeTo(t, "segment on the input an empty segment wrote", got, want, 0)
}

// The device window bounds the kernels queued on a stream: the host waits
// for the kernel Window launches back before it launches another.
func TestBackendWindow(t *testing.T) {
	g := preemptModel(t, "bert")
	for _, w := range []int{1, 2, 4} {
		t.Run(fmt.Sprint(w), func(t *testing.T) {
			b, _ := newEmuBackend(t, Options{Window: w}, libml.BackendConfig{}, false)
			inst := load(t, b, "bert", g, 1).(*Instance)
			defer inst.Close()
			infer(t, b, inst, 1, zoo.Input(1, inst.InputSize()))
			got := inst.ln.s.(*emuStream).maxInflight()
			t.Logf("window %d: at most %d kernels outstanding", w, got)
			if got > w || got < 1 {
				t.Errorf("window %d: %d kernels outstanding", w, got)
			}
		})
	}
}

// Spatial shares: an instance bound to an SM partition (a green context
// of its own) runs there, on the same memory, with the same results; a
// shadow instance (LinkModel + SetSMs) shares the weights. Init with
// Units gives every instance a partition. Without green contexts SetSMs
// fails with ErrNoGreen.
func TestBackendGreen(t *testing.T) {
	b, d := newEmuBackend(t, Options{}, libml.BackendConfig{}, true)
	g := preemptModel(t, "squeezenet11")
	inst := load(t, b, "m", g, 1).(*Instance)
	defer inst.Close()
	in := zoo.Input(8, inst.InputSize())
	want := infer(t, b, inst, 1, in)
	if err := inst.SetSMs(3); err != nil {
		t.Fatal(err)
	}
	if inst.SMs() != 4 {
		t.Errorf("partition of %d SMs, want 3 rounded up to 4", inst.SMs())
	}
	d.h.launches()
	closeTo(t, "in a partition", infer(t, b, inst, 1, in), want, 0)
	for _, l := range d.h.launches() {
		if l.sms != 4 {
			t.Fatalf("%s ran on %d SMs, not in the partition", l.kernel, l.sms)
		}
	}
	shadow, err := b.LinkModel(context.Background(), inst)
	if err != nil {
		t.Fatal(err)
	}
	defer shadow.Close()
	sh := shadow.(*Instance)
	if err := b.ConfigureBatch(shadow, 1); err != nil {
		t.Fatal(err)
	}
	if err := sh.SetSMs(6); err != nil {
		t.Fatal(err)
	}
	closeTo(t, "shadow instance", infer(t, b, shadow, 1, in), want, 0)
	if err := inst.SetSMs(0); err != nil || inst.SMs() != emuSMs {
		t.Errorf("back to the whole device: %v, %d SMs", err, inst.SMs())
	}
	if err := inst.SetSMs(emuSMs + 1); err == nil {
		t.Error("a partition larger than the device")
	}
	closeTo(t, "after a failed SetSMs", infer(t, b, inst, 1, in), want, 0)

	nb, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ni := load(t, nb, "m", g, 1).(*Instance)
	defer ni.Close()
	if err := ni.SetSMs(2); !errors.Is(err, ErrNoGreen) {
		t.Errorf("SetSMs without green contexts: %v", err)
	}
	if _, err := newEmuDevBackend(newEmuDev(emuSMs, false), libml.BackendConfig{Units: 4}); !errors.Is(err, ErrNoGreen) {
		t.Errorf("Init with a share and no green contexts: %v", err)
	}

	sb, sd := newEmuBackend(t, Options{}, libml.BackendConfig{Units: 2}, true)
	si := load(t, sb, "m", g, 1).(*Instance)
	defer si.Close()
	if si.SMs() != 2 || sb.Units() != 2 {
		t.Errorf("Init share of 2: instance on %d SMs, units %d", si.SMs(), sb.Units())
	}
	sd.h.launches()
	closeTo(t, "Init share", infer(t, sb, si, 1, in), want, 1e-4)
}

func newEmuDevBackend(d *emuDev, cfg libml.BackendConfig) (*Backend, error) {
	b := NewBackend(Options{open: func() (gpuCtx, error) { return d, nil }})
	return b, b.Init(context.Background(), cfg)
}

// PreemptWith preempts several instances' segments with one wait for the
// control stream (REEF preempts every running BE stream as an RT job
// arrives): the armed instances stop before their first launch, an
// instance named twice counts once, one not armed is left alone and runs
// its next segment through, and each preempted one then restores to the
// unpreempted output.
func TestPreemptWith(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	g := preemptModel(t, "squeezenet11")
	var insts []*Instance
	for range 4 {
		inst := load(t, b, "squeezenet11", g, 1).(*Instance)
		defer inst.Close()
		insts = append(insts, inst)
	}
	in := zoo.Input(3, insts[0].InputSize())
	want := infer(t, b, insts[0], 1, in)
	for _, inst := range insts[:3] {
		inst.Arm()
	}
	w0 := b.FlagWaits()
	others := []libml.SegmentInstance{insts[1], insts[2], insts[1], insts[3]}
	if err := insts[0].PreemptWith(others); err != nil {
		t.Fatal(err)
	}
	if w := b.FlagWaits() - w0; w != 1 {
		t.Errorf("%d waits for the control stream, want 1", w)
	}
	for i, inst := range insts {
		got := make([]float32, inst.OutputSize())
		pre, resume, err := runSeg(inst, 1, ResumePoint{}, in, got)
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if pre != (i < 3) {
			t.Fatalf("instance %d: preempted %v, want %v", i, pre, i < 3)
		}
		if pre {
			if pre, _, err = runSeg(inst, 1, ResumePoint{Kernel: resume}, nil, got); err != nil || pre {
				t.Fatalf("instance %d restored: preempted %v err %v", i, pre, err)
			}
		}
		closeTo(t, fmt.Sprintf("instance %d", i), got, want, 0)
	}
	// nothing armed: no flag written, no error
	w1 := b.FlagWaits()
	if err := insts[0].PreemptWith(others); err != nil || b.FlagWaits() != w1 {
		t.Errorf("PreemptWith with nothing armed: %v, %d waits", err, b.FlagWaits()-w1)
	}
}

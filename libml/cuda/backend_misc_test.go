//go:build linux && cgo

package cuda

import (
	"context"
	"errors"
	"strings"
	"testing"
	"unsafe"

	"sluice/libml"
	"sluice/libml/cuda/cudrv"
	"sluice/libml/graph"
)

// Without libcuda.so.1, Init fails with an error wrapping ErrNoDriver
// (the appliance then runs on the cpu backend), saying so at most once
// per process through Logf.
func TestBackendNoDriver(t *testing.T) {
	if gpuWanted() {
		t.Skip("SLUICE_GPU=1: the real driver is under test")
	}
	if _, err := cudrv.Open(); err == nil {
		t.Skip("this machine has a CUDA driver")
	}
	n := 0
	logf := func(format string, args ...any) { n++; t.Logf(format, args...) }
	for k := 0; k < 2; k++ {
		b := NewBackend(Options{Logf: logf})
		err := b.Init(context.Background(), libml.BackendConfig{})
		if !errors.Is(err, ErrNoDriver) {
			t.Fatalf("Init: %v, want ErrNoDriver", err)
		}
		if _, err := b.LoadModel(context.Background(), "m", reluGraph(8)); err == nil {
			t.Error("LoadModel on an uninitialized backend")
		}
		if err := b.Deinit(); err == nil {
			t.Error("Deinit of an uninitialized backend")
		}
	}
	if n > 1 {
		t.Errorf("logged %d times", n)
	}
}

// reluGraph is y = Relu(x) over n values per request.
func reluGraph(n int64) *graph.Graph {
	return &graph.Graph{
		Name:    "relu",
		Opset:   13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, n}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, n}}},
		Nodes:   []graph.Node{{Name: "r", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"y"}}},
	}
}

// Misuse gets clear errors and loses nothing.
func TestBackendErrors(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ctx := context.Background()
	if err := b.Init(ctx, libml.BackendConfig{}); err == nil {
		t.Error("second Init succeeded")
	}
	inst, err := b.LoadModel(ctx, "relu", reluGraph(8))
	if err != nil {
		t.Fatal(err)
	}
	in, out := make([]float32, 16), make([]float32, 16)
	if err := b.InferBatch(ctx, inst, 1, in, out); err == nil || !strings.Contains(err.Error(), "ConfigureBatch") {
		t.Errorf("InferBatch before ConfigureBatch: %v", err)
	}
	if err := b.ConfigureBatch(inst, 0); err == nil {
		t.Error("ConfigureBatch(0) succeeded")
	}
	if err := b.ConfigureBatch(inst, 2); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		batch   int
		in, out []float32
	}{{0, in, out}, {3, in, out}, {2, in[:15], out}, {2, in, out[:15]}} {
		if err := b.InferBatch(ctx, inst, c.batch, c.in, c.out); err == nil {
			t.Errorf("batch %d with %d inputs and %d outputs accepted", c.batch, len(c.in), len(c.out))
		}
	}
	for k := range in {
		in[k] = float32(k%5) - 2
	}
	if err := b.InferBatch(ctx, inst, 2, in, out); err != nil {
		t.Fatal(err)
	}
	for k, v := range out {
		if v != max(in[k], 0) {
			t.Fatalf("relu(%g) = %g", in[k], v)
		}
	}
	// reconfiguring for larger batches keeps the instance working
	if err := b.ConfigureBatch(inst, 3); err != nil {
		t.Fatal(err)
	}
	in3, out3 := append(in, in[:8]...), make([]float32, 24)
	if err := b.InferBatch(ctx, inst, 3, in3, out3); err != nil {
		t.Fatal(err)
	}
	for k, v := range out3 {
		if v != max(in3[k], 0) {
			t.Fatalf("after reconfiguring: relu(%g) = %g", in3[k], v)
		}
	}
	other, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	if err := other.InferBatch(ctx, inst, 1, in, out); err == nil {
		t.Error("another backend's instance accepted")
	}
	if _, err := other.LinkModel(ctx, inst); err == nil {
		t.Error("another backend linked the instance")
	}
	if err := other.ConfigureBatch(inst, 1); err == nil {
		t.Error("another backend configured the instance")
	}
	if err := b.Deinit(); err == nil || !strings.Contains(err.Error(), "still open") {
		t.Errorf("Deinit with an open instance: %v", err)
	}
	if err := inst.(*Instance).SetSMs(-1); err == nil {
		t.Error("SetSMs(-1) accepted")
	}
	if _, err := b.LoadModel(ctx, "bad", &graph.Graph{Name: "bad", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Nodes:   []graph.Node{{Op: "NoSuchOp", Inputs: []string{"x"}, Outputs: []string{"y"}}}}); err == nil {
		t.Error("a model with an unknown operator loaded")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.InferBatch(cctx, inst, 1, in, out); !errors.Is(err, context.Canceled) {
		t.Errorf("InferBatch with a cancelled context: %v", err)
	}
	if _, err := b.LoadModel(cctx, "relu", reluGraph(8)); !errors.Is(err, context.Canceled) {
		t.Errorf("LoadModel with a cancelled context: %v", err)
	}
	if err := inst.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.InferBatch(ctx, inst, 1, in, out); err == nil {
		t.Error("InferBatch on a closed instance")
	}
	if err := inst.(*Instance).SetSMs(0); err == nil {
		t.Error("SetSMs on a closed instance")
	}
}

// The driver path (backend_driver.go, through cgo) against the fake
// libcuda of testdata/fakecuda.c, in a child process (the loaded driver
// is process-wide): primary context, kernels, streams, events, pinned
// memory, a green-context partition, a registered region, and launches
// whose parameter buffers the fake kernel copies to its output (so the
// planned arguments can be read back through the output copy).
func TestBackendFakeDriver(t *testing.T) {
	inFakeDriverChild(t, "SLUICE_FAKE_CUDA_BACKEND", "TestBackendFakeDriver", "backend_misc_test.go", fakeBackendChecks)
}

func fakeBackendChecks(t *testing.T, lib string) {
	ctx := context.Background()
	b := NewBackend(Options{open: func() (gpuCtx, error) { return openDriver(lib, 0) }})
	if err := b.Init(ctx, libml.BackendConfig{}); err != nil {
		t.Fatal(err)
	}
	if b.SMs() != 4 || !b.Green() {
		t.Errorf("fake device: %d SMs, green %v", b.SMs(), b.Green())
	}
	// 512 values: the fake kernel's 432-byte record fits in the output
	const n = 512
	inst, err := b.LoadModel(ctx, "relu", reluGraph(n))
	if err != nil {
		t.Fatal(err)
	}
	ci := inst.(*Instance)
	if err := b.ConfigureBatch(inst, 1); err != nil {
		t.Fatal(err)
	}
	if err := ci.SetSMs(1); err != nil {
		t.Fatal(err)
	}
	if ci.SMs() != 2 {
		t.Errorf("partition of %d SMs, want 2", ci.SMs())
	}
	in, out := make([]float32, n), make([]float32, n)
	if err := b.InferBatch(ctx, inst, 1, in, out); err != nil {
		t.Fatal(err)
	}
	var a Args
	a.Decode(f32view(out)[:ArgsSize])
	p, _ := ci.Program(1)
	k := p.Kernels[0]
	if a.Out != ci.arena+4*uint64(k.Out.Off) || a.In[0] != ci.arena+4*uint64(k.In[0].Off) ||
		a.P[0] != n || a.P[PAct] != 1 || a.T[TBase] != 0 {
		t.Errorf("the launch carried %+v", a)
	}
	mem := packetRegion(t, 1<<16)
	reg, err := b.RegisterRegion(unsafe.Pointer(&mem[0]), len(mem))
	if err != nil {
		t.Fatal(err)
	}
	f, _ := reg.Frag(unsafe.Pointer(&mem[100]), 64, 0)
	if err := b.GatherBatch(inst, 1, []Frag{f}); err != nil {
		t.Fatal(err)
	}
	if err := b.InferGathered(ctx, inst, 1, out); err != nil {
		t.Fatal(err)
	}
	if err := ci.SetSMs(0); err != nil {
		t.Fatal(err)
	}
	link, err := b.LinkModel(ctx, inst)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{link.Close(), inst.Close(), b.Deinit()} {
		if err != nil {
			t.Error(err)
		}
	}
	t.Logf("fake driver: Init (primary context), load, plan, launch, green partition, gather, Deinit OK")
}

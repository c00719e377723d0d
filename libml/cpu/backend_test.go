package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand"
	"strings"
	"sync"
	"testing"
	"time"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/zoo"
	ncpu "sluice/native/cpu"
)

// TestOpNumbering checks that the engine's and the C engine's numbering of
// operations, activations and slots agree.
func TestOpNumbering(t *testing.T) {
	pairs := []struct {
		name string
		g, c int64
	}{
		{"gemm", int64(engine.OpGemm), int64(ncpu.OpGemm)}, {"conv", int64(engine.OpConv), int64(ncpu.OpConv)},
		{"im2col", int64(engine.OpIm2col), int64(ncpu.OpIm2col)}, {"dwconv", int64(engine.OpDWConv), int64(ncpu.OpDWConv)},
		{"col2im", int64(engine.OpCol2im), int64(ncpu.OpCol2im)}, {"pool", int64(engine.OpPool), int64(ncpu.OpPool)},
		{"gpool", int64(engine.OpGPool), int64(ncpu.OpGPool)}, {"unary", int64(engine.OpUnary), int64(ncpu.OpUnary)},
		{"binary", int64(engine.OpBinary), int64(ncpu.OpBinary)}, {"chaffine", int64(engine.OpChAffine), int64(ncpu.OpChAffine)},
		{"softmax", int64(engine.OpSoftmax), int64(ncpu.OpSoftmax)}, {"layernorm", int64(engine.OpLayerNorm), int64(ncpu.OpLayerNorm)},
		{"reduce", int64(engine.OpReduce), int64(ncpu.OpReduce)}, {"copy", int64(engine.OpCopy), int64(ncpu.OpCopy)},
		{"resize", int64(engine.OpResize), int64(ncpu.OpResize)}, {"gather", int64(engine.OpGather), int64(ncpu.OpGather)},
		{"quant", int64(engine.OpQuant), int64(ncpu.OpQuant)}, {"qgemm", int64(engine.OpQGemm), int64(ncpu.OpQGemm)},
		{"gridsample", int64(engine.OpGridSample), int64(ncpu.OpGridSample)}, {"topk", int64(engine.OpTopK), int64(ncpu.OpTopK)},
		{"roialign", int64(engine.OpRoiAlign), int64(ncpu.OpRoiAlign)},
		{"det", int64(engine.OpDet), int64(ncpu.OpDet)},
		{"count", int64(engine.OpCount), int64(ncpu.OpCount)},
		{"acts", engine.ActCount, int64(ncpu.ActCount)}, {"bins", engine.BinCount, int64(ncpu.BinCount)},
		{"reds", engine.RedCount, int64(ncpu.RedCount)}, {"maxin", engine.MaxIn, int64(ncpu.MaxIn)},
		{"np", engine.NumP, int64(ncpu.NumP)}, {"nf", engine.NumF, int64(ncpu.NumF)},
		{"pact", engine.PAct, int64(ncpu.PAct)}, {"facta", engine.FActA, int64(ncpu.FActA)},
		{"factb", engine.FActB, int64(ncpu.FActB)}, {"rank", engine.MaxRank, int64(ncpu.MaxRank)},
		{"inplace", engine.FlagInPlace, int64(ncpu.FlagInPlace)},
		{"panel", engine.GemmPanel, int64(ncpu.GemmPanel)}, {"pgemmpanels", engine.PGemmPanels, int64(ncpu.PGemmPanels)},
		{"pgemmapanels", engine.PGemmAPanels, int64(ncpu.PGemmAPanels)}, {"pgemmtprod", engine.PGemmTProd, int64(ncpu.PGemmTProd)},
		{"pconvwpanels", engine.PConvWPanels, int64(ncpu.PConvWPanels)},
		{"pdwpointwise", engine.PDWPointwise, int64(ncpu.PDWPointwise)}, {"pdwpointwisec", engine.PDWPointwiseC, int64(ncpu.PDWPointwiseC)},
		{"pdwpointwisepanels", engine.PDWPointwisePanels, int64(ncpu.PDWPointwisePanels)},
		{"pdwpointwiselda", engine.PDWPointwiseLda, int64(ncpu.PDWPointwiseLda)},
		{"pdwpointwiseact", engine.PDWPointwiseAct, int64(ncpu.PDWPointwiseAct)},
		{"fdwpointwisea", engine.FDWPointwiseA, int64(ncpu.FDWPointwiseA)}, {"fdwpointwiseb", engine.FDWPointwiseB, int64(ncpu.FDWPointwiseB)},
		{"indwpointwisew", engine.InDWPointwiseW, int64(ncpu.InDWPointwiseW)}, {"indwpointwiseb", engine.InDWPointwiseB, int64(ncpu.InDWPointwiseB)},
	}
	for _, p := range pairs {
		if p.g != p.c {
			t.Errorf("%s: engine %d, C %d", p.name, p.g, p.c)
		}
	}
	if !ncpu.ChecksCompiled() {
		t.Log("preemption checks compiled out (sluice_nopreempt build)")
	}
}

// zooCases are the zoo models at test sizes (full sizes are for the
// benchmark).
func zooCases() []struct {
	name string
	opt  zoo.Options
} {
	return []struct {
		name string
		opt  zoo.Options
	}{
		{"resnet18", zoo.Options{Height: 64, Width: 64, Classes: 100, Seed: 1}},
		{"resnet50", zoo.Options{Height: 64, Width: 64, Classes: 100, Seed: 2}},
		{"mobilenetv2", zoo.Options{Height: 96, Width: 96, Classes: 100, Seed: 3}},
		{"vgg16", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 4}},
		{"squeezenet11", zoo.Options{Height: 96, Width: 96, Classes: 100, Seed: 5}},
		{"bert", zoo.Options{Layers: 2, SeqLen: 32, Hidden: 128, Heads: 4, FF: 512, Seed: 6}},
	}
}

func loadZoo(t testing.TB, b *Backend, name string, opt zoo.Options, maxBatch int) *Instance {
	t.Helper()
	g, err := zoo.Build(name, opt)
	if err != nil {
		t.Fatal(err)
	}
	inst, err := b.LoadModel(context.Background(), name, g)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.ConfigureBatch(inst, maxBatch); err != nil {
		t.Fatal(err)
	}
	return inst.(*Instance)
}

// TestZooBatchAgreement checks that every zoo model's per-request outputs
// in a batch of 8 equal its batch-1 outputs bit for bit, and that outputs are finite
// and not constant.
func TestZooBatchAgreement(t *testing.T) {
	b := newTestBackend(t, 2)
	ctx := context.Background()
	for _, zc := range zooCases() {
		t.Run(zc.name, func(t *testing.T) {
			inst := loadZoo(t, b, zc.name, zc.opt, 8)
			defer inst.Close()
			isz, osz := inst.InputSize(), inst.OutputSize()
			in := zoo.Input(7, 8*isz)
			out8 := make([]float32, 8*osz)
			if err := b.InferBatch(ctx, inst, 8, in, out8); err != nil {
				t.Fatal(err)
			}
			out1 := make([]float32, osz)
			var maxd, maxv float64
			for r := 0; r < 8; r++ {
				if err := b.InferBatch(ctx, inst, 1, in[r*isz:(r+1)*isz], out1); err != nil {
					t.Fatal(err)
				}
				for j, v := range out1 {
					if math.IsNaN(float64(v)) || math.IsInf(float64(v), 0) {
						t.Fatalf("request %d output %d is %v", r, j, v)
					}
					maxd = math.Max(maxd, math.Abs(float64(v-out8[r*osz+j])))
					maxv = math.Max(maxv, math.Abs(float64(v)))
				}
			}
			if maxv == 0 {
				t.Fatal("all outputs are zero")
			}
			// Batch invariance: tiles differ between batch sizes, but
			// every kernel computes each output the same way whatever
			// its tile, so the bits are the same.
			if maxd != 0 {
				t.Fatalf("batch 8 vs batch 1: max difference %g (max |y| %g)", maxd, maxv)
			}
			t.Logf("max |y| %.3g, batch-8 vs batch-1 max difference %.3g", maxv, maxd)
		})
	}
}

// TestZooSameBitsOnEveryISA checks that the GEMM core's instruction sets
// (AVX-512, AVX2+FMA, portable) give every zoo model the same output bits,
// so a model answers the same on every machine.
func TestZooSameBitsOnEveryISA(t *testing.T) {
	defer ncpu.SetGemmISA("")
	b := newTestBackend(t, 2)
	ctx := context.Background()
	for _, zc := range zooCases() {
		if zc.name == "vgg16" {
			continue // the portable GEMM takes minutes on it
		}
		t.Run(zc.name, func(t *testing.T) {
			inst := loadZoo(t, b, zc.name, zc.opt, 2)
			defer inst.Close()
			in := zoo.Input(5, 2*inst.InputSize())
			var want []float32
			for _, isa := range ncpu.GemmISAs() {
				if err := ncpu.SetGemmISA(isa); err != nil {
					t.Fatal(err)
				}
				out := make([]float32, 2*inst.OutputSize())
				if err := b.InferBatch(ctx, inst, 2, in, out); err != nil {
					t.Fatal(err)
				}
				if want == nil {
					want = out
					continue
				}
				for i := range out {
					if math.Float32bits(out[i]) != math.Float32bits(want[i]) {
						t.Fatalf("%s: output %d is %v, %s gave %v", isa, i, out[i], ncpu.GemmISAs()[0], want[i])
					}
				}
			}
		})
	}
}

// TestZooDeterministic checks that the same seed gives the same weights and
// outputs, and that another seed changes them.
func TestZooDeterministic(t *testing.T) {
	b := newTestBackend(t, 2)
	opt := zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 9}
	run := func(o zoo.Options) []float32 {
		inst := loadZoo(t, b, "resnet18", o, 1)
		defer inst.Close()
		out := make([]float32, inst.OutputSize())
		if err := b.InferBatch(context.Background(), inst, 1, zoo.Input(1, inst.InputSize()), out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	a, c := run(opt), run(opt)
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("output %d: %v then %v", i, a[i], c[i])
		}
	}
	opt.Seed = 10
	d := run(opt)
	same := true
	for i := range a {
		same = same && a[i] == d[i]
	}
	if same {
		t.Fatal("another seed gave the same outputs")
	}
}

func runOnce(t *testing.T, inst *Instance, batch int, in []float32) []float32 {
	t.Helper()
	out := make([]float32, batch*inst.OutputSize())
	if err := inst.InferBatch(context.Background(), batch, in, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPreemptAtRandomBlock preempts a run at a random block of a random
// kernel (other units may be inside their blocks at that moment), restores
// from the interrupted kernel's idempotent group entry, and checks the
// output is identical, bit for bit, to an uninterrupted run.
func TestPreemptAtRandomBlock(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	b := newTestBackend(t, 2)
	rng := rand.New(rand.NewSource(1))
	for _, zc := range zooCases() {
		if zc.name == "vgg16" {
			continue
		}
		t.Run(zc.name, func(t *testing.T) {
			inst := loadZoo(t, b, zc.name, zc.opt, 2)
			defer inst.Close()
			const batch = 2
			in := zoo.Input(3, batch*inst.InputSize())
			want := runOnce(t, inst, batch, in)
			ks, err := inst.Kernels(batch)
			if err != nil {
				t.Fatal(err)
			}
			var inPlace []int
			for j, k := range ks {
				if !k.Idempotent {
					inPlace = append(inPlace, j)
				}
			}
			for trial := 0; trial < 12; trial++ {
				k := rng.Intn(len(ks))
				if trial < 4 && trial < len(inPlace) { // make sure in-place kernels are hit
					k = inPlace[rng.Intn(len(inPlace))]
				}
				blk := rng.Int63n(int64(ks[k].Grid))
				// poison the output so a missed re-execution shows
				outBuf, _ := inst.Output(batch)
				for j := range outBuf {
					outBuf[j] = float32(math.NaN())
				}
				inBuf, _ := inst.Input(batch)
				copy(inBuf, in)
				inst.PreemptAt(k, blk)
				pre, resume, err := inst.Run(batch, 0)
				inst.PreemptAt(-1, 0)
				if err != nil {
					t.Fatal(err)
				}
				if !pre {
					t.Fatalf("kernel %d block %d: run was not preempted", k, blk)
				}
				if resume > k {
					t.Fatalf("kernel %d: resume at %d", k, resume)
				}
				// The execution index is the last kernel whose block got
				// past the prologue: k, or k-1 when every started block of
				// k saw the flag first.
				if resume != ks[k].IdemEntry && (k == 0 || resume != ks[k-1].IdemEntry) {
					t.Fatalf("kernel %d: resume at %d, its idempotent group starts at %d", k, resume, ks[k].IdemEntry)
				}
				pre, _, err = inst.Run(batch, resume)
				if err != nil || pre {
					t.Fatalf("restore: preempted %v err %v", pre, err)
				}
				got, _ := inst.Output(batch)
				for j := range want {
					if math.Float32bits(got[j]) != math.Float32bits(want[j]) {
						t.Fatalf("preempted at kernel %d (%s) block %d, resumed at %d: output %d = %v, want %v",
							k, ks[k].Ops, blk, resume, j, got[j], want[j])
					}
				}
			}
			t.Logf("%d kernels, %d in place", len(ks), len(inPlace))
		})
	}
}

// TestPreemptAsync preempts InferBatch at random moments from another
// goroutine (the real preemption path: flag in C memory, in-block checks,
// queue reset, restore) and checks every output is exact.
func TestPreemptAsync(t *testing.T) {
	if !ncpu.ChecksCompiled() {
		t.Skip("preemption checks compiled out")
	}
	b := newTestBackend(t, 2)
	inst := loadZoo(t, b, "mobilenetv2", zoo.Options{Height: 96, Width: 96, Classes: 50, Seed: 11}, 4)
	defer inst.Close()
	in := zoo.Input(5, 4*inst.InputSize())
	want := runOnce(t, inst, 4, in)
	start := time.Now()
	want1 := runOnce(t, inst, 4, in)
	dur := time.Since(start)
	for i := range want {
		if want[i] != want1[i] {
			t.Fatal("two uninterrupted runs differ")
		}
	}
	rng := rand.New(rand.NewSource(2))
	for trial := 0; trial < 20; trial++ {
		var wg sync.WaitGroup
		wg.Add(1)
		delay := time.Duration(rng.Int63n(int64(dur)))
		go func() {
			defer wg.Done()
			time.Sleep(delay)
			inst.Preempt()
		}()
		got := runOnce(t, inst, 4, in)
		wg.Wait()
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("trial %d (preempt after %v): output %d = %v, want %v", trial, delay, i, got[i], want[i])
			}
		}
	}
}

// TestCancel checks that a cancelled context stops a running batch.
func TestCancel(t *testing.T) {
	b := newTestBackend(t, 2)
	inst := loadZoo(t, b, "resnet18", zoo.Options{Height: 128, Width: 128, Seed: 1}, 8)
	defer inst.Close()
	in := zoo.Input(1, 8*inst.InputSize())
	out := make([]float32, 8*inst.OutputSize())
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(5 * time.Millisecond); cancel() }()
	err := inst.InferBatch(ctx, 8, in, out)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	// the instance still works
	if err := inst.InferBatch(context.Background(), 8, in, out); err != nil {
		t.Fatal(err)
	}
}

// TestLinkModelShares checks GSLICE's parameter sharing: a linked instance
// adds at most 5% of the model's weight bytes, gives the same outputs, and
// the weights live until the last instance closes.
func TestLinkModelShares(t *testing.T) {
	b := newTestBackend(t, 2)
	ctx := context.Background()
	g, _ := zoo.Build("resnet18", zoo.Options{Seed: 3})
	first, err := b.LoadModel(ctx, "r18", g)
	if err != nil {
		t.Fatal(err)
	}
	base := first.(*Instance)
	if err := b.ConfigureBatch(base, 1); err != nil {
		t.Fatal(err)
	}
	second, err := b.LinkModel(ctx, base)
	if err != nil {
		t.Fatal(err)
	}
	link := second.(*Instance)
	wb := float64(base.WeightBytes())
	added := float64(link.Bytes())
	t.Logf("weights %.1f MB, linked instance adds %.1f KB (%.3f%%)", wb/1e6, added/1e3, 100*added/wb)
	if added > 0.05*wb {
		t.Fatalf("LinkModel added %.0f bytes, more than 5%% of %.0f weight bytes", added, wb)
	}
	if err := b.ConfigureBatch(link, 1); err != nil {
		t.Fatal(err)
	}
	t.Logf("configured for batch 1: linked instance owns %.1f MB (activations), weights shared", float64(link.Bytes())/1e6)
	if link.Bytes() >= base.WeightBytes() {
		t.Fatalf("linked instance owns %d bytes, as much as the weights", link.Bytes())
	}
	in := zoo.Input(4, base.InputSize())
	a := runOnce(t, base, 1, in)
	if err := base.Close(); err != nil {
		t.Fatal(err)
	}
	c := runOnce(t, link, 1, in) // weights survive the first instance
	for i := range a {
		if a[i] != c[i] {
			t.Fatalf("output %d: %v vs %v", i, a[i], c[i])
		}
	}
	if err := link.Close(); err != nil {
		t.Fatal(err)
	}
	if err := link.Close(); err == nil {
		t.Fatal("double Close succeeded")
	}
}

// TestUnsupportedOperator checks the load error names the operator, the
// node and the supported list.
func TestUnsupportedOperator(t *testing.T) {
	b := newTestBackend(t, 1)
	g := &graph.Graph{Name: "bad", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{-1, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y", DType: graph.Float32}},
		Nodes: []graph.Node{{Name: "r", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"t"}},
			{Name: "mystery_node", Op: "StringNormalizer", Inputs: []string{"t"}, Outputs: []string{"y"}}},
	}
	_, err := b.LoadModel(context.Background(), "bad", g)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	for _, want := range []string{"StringNormalizer", "mystery_node", "Conv, ConvInteger, ConvTranspose", "QLinearConv", "Resize"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	var ue *engine.UnsupportedError
	if !errors.As(err, &ue) || ue.Op != "StringNormalizer" || ue.Node != "mystery_node" {
		t.Errorf("error %v is not an UnsupportedError for the node", err)
	}
}

// TestBackendErrors checks misuse is reported, not crashed on.
func TestBackendErrors(t *testing.T) {
	b := New()
	ctx := context.Background()
	g, _ := zoo.Build("squeezenet11", zoo.Options{Height: 64, Width: 64, Classes: 10})
	if _, err := b.LoadModel(ctx, "s", g); err == nil {
		t.Fatal("LoadModel before Init succeeded")
	}
	if err := b.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	inst, err := b.LoadModel(ctx, "s", g)
	if err != nil {
		t.Fatal(err)
	}
	in := make([]float32, 4*inst.InputSize())
	out := make([]float32, 4*inst.OutputSize())
	if err := b.InferBatch(ctx, inst, 1, in, out); err == nil {
		t.Error("InferBatch before ConfigureBatch succeeded")
	}
	if err := b.ConfigureBatch(inst, 2); err != nil {
		t.Fatal(err)
	}
	if err := b.InferBatch(ctx, inst, 3, in, out); err == nil {
		t.Error("batch above the configured maximum succeeded")
	}
	if err := b.InferBatch(ctx, inst, 2, in[:10], out); err == nil {
		t.Error("short input succeeded")
	}
	if err := b.Deinit(); err == nil {
		t.Error("Deinit with an open instance succeeded")
	}
	inst.Close()
	if err := b.Deinit(); err != nil {
		t.Fatal(err)
	}
}

// TestFixedBatchModel runs a graph whose batch dimension is fixed to 1: a
// batch runs one request at a time.
func TestFixedBatchModel(t *testing.T) {
	b := newTestBackend(t, 2)
	w := make([]float32, 6*4)
	for i := range w {
		w[i] = float32(i%5) - 2
	}
	g := &graph.Graph{Name: "fixed", Opset: 17,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4}}},
		Outputs:      []graph.ValueInfo{{Name: "y", DType: graph.Float32, Dims: []int64{1, 6}}},
		Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: []int64{6, 4}, F32: w}, {Name: "s", DType: graph.Int64, Dims: []int64{2}, I64: []int64{1, -1}}},
		Nodes: []graph.Node{{Name: "g", Op: "Gemm", Inputs: []string{"x", "w"}, Outputs: []string{"t"}, Attrs: []graph.Attr{attrInt("transB", 1)}},
			{Name: "r", Op: "Reshape", Inputs: []string{"t", "s"}, Outputs: []string{"y"}}},
	}
	inst, err := b.LoadModel(context.Background(), "fixed", g)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	if inst.InputSize() != 4 || inst.OutputSize() != 6 || inst.(*Instance).Batched() {
		t.Fatalf("sizes %d %d batched %v", inst.InputSize(), inst.OutputSize(), inst.(*Instance).Batched())
	}
	if err := b.ConfigureBatch(inst, 3); err != nil {
		t.Fatal(err)
	}
	in := []float32{1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 1}
	out := make([]float32, 18)
	if err := b.InferBatch(context.Background(), inst, 3, in, out); err != nil {
		t.Fatal(err)
	}
	for r := 0; r < 3; r++ {
		col := []int{0, 1, 3}[r]
		for j := 0; j < 6; j++ {
			if out[r*6+j] != w[j*4+col] {
				t.Fatalf("request %d output %d = %v, want %v", r, j, out[r*6+j], w[j*4+col])
			}
		}
	}
}

// TestKernelMetadata checks grid, units and profiled block times are
// reported.
func TestKernelMetadata(t *testing.T) {
	b := newTestBackend(t, 2)
	inst := loadZoo(t, b, "squeezenet11", zoo.Options{Height: 96, Width: 96, Classes: 10}, 2)
	defer inst.Close()
	in, _ := inst.Input(2)
	copy(in, zoo.Input(1, len(in)))
	ks, err := inst.Profile(context.Background(), 2, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if k.Grid < 1 || k.MaxUnits < 1 || k.MaxUnits > 2 || k.BlockNs <= 0 || k.WallNs <= 0 || k.Name == "" {
			t.Fatalf("kernel %+v", k)
		}
	}
}

// TestZooMatchesReference runs small zoo models end to end and compares
// with the reference evaluator on the original graph (so load-time
// rewrites, BatchNormalization folding and GELU fusion included, are
// checked too).
func TestZooMatchesReference(t *testing.T) {
	b := newTestBackend(t, 2)
	for _, c := range []struct {
		name string
		opt  zoo.Options
	}{
		{"bert", zoo.Options{Layers: 2, SeqLen: 16, Hidden: 64, Heads: 4, FF: 128, Seed: 3}},
		{"mobilenetv2", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 4}},
		{"squeezenet11", zoo.Options{Height: 48, Width: 48, Classes: 10, Seed: 5}},
		{"resnet18", zoo.Options{Height: 32, Width: 32, Classes: 10, Seed: 6}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := zoo.Build(c.name, c.opt)
			if err != nil {
				t.Fatal(err)
			}
			inst := loadZoo(t, b, c.name, c.opt, 2)
			defer inst.Close()
			in := zoo.Input(8, 2*inst.InputSize())
			got := runOnce(t, inst, 2, in)
			vals := map[string]*engine.Tensor{}
			for _, init := range g.Initializers {
				vals[init.Name], _ = engine.FromGraph(init)
			}
			shape := append([]int64{2}, inst.InputShape()...)
			vals[g.Inputs[0].Name] = engine.NewFloat(shape, in)
			ref, err := refRun(g, vals)
			if err != nil {
				t.Fatal(err)
			}
			if err := closeTo(got, ref[g.Outputs[0].Name].F, 2e-4); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestConcurrentInstances runs linked instances of one model from several
// goroutines at once (their streams share the units) and checks every
// output.
func TestConcurrentInstances(t *testing.T) {
	b := newTestBackend(t, 2)
	ctx := context.Background()
	base := loadZoo(t, b, "mobilenetv2", zoo.Options{Height: 64, Width: 64, Classes: 20, Seed: 8}, 2)
	defer base.Close()
	in := zoo.Input(2, 2*base.InputSize())
	want := runOnce(t, base, 2, in)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := 0; g < 4; g++ {
		inst, err := b.LinkModel(ctx, base)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.ConfigureBatch(inst, 2); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func(inst libml.Instance) {
			defer wg.Done()
			defer inst.Close()
			out := make([]float32, 2*inst.OutputSize())
			for r := 0; r < 10; r++ {
				if err := b.InferBatch(ctx, inst, 2, in, out); err != nil {
					errs <- err
					return
				}
				for i := range want {
					if out[i] != want[i] {
						errs <- fmt.Errorf("output %d: %v, want %v", i, out[i], want[i])
						return
					}
				}
			}
		}(inst)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestLaunchPerKernel drives a plan kernel by kernel on the instance's
// stream, as a scheduler would (one unit for even kernels, all units for
// odd ones), and checks the output.
func TestLaunchPerKernel(t *testing.T) {
	b := newTestBackend(t, 2)
	inst := loadZoo(t, b, "squeezenet11", zoo.Options{Height: 64, Width: 64, Classes: 10, Seed: 2}, 1)
	defer inst.Close()
	in := zoo.Input(3, inst.InputSize())
	want := runOnce(t, inst, 1, in)
	ks, err := inst.KernelArray(1)
	if err != nil {
		t.Fatal(err)
	}
	buf, _ := inst.Input(1)
	copy(buf, in)
	out, _ := inst.Output(1)
	for i := range out {
		out[i] = 0
	}
	st := inst.Stream()
	st.Restore()
	for k := 0; k < ks.Len(); k++ {
		mask := uint64(1)
		if k%2 == 1 {
			mask = 0
		}
		if err := st.Launch(ks, k, int64(k), mask); err != nil {
			t.Fatal(err)
		}
		if k%5 == 4 {
			if st.Sync() != ncpu.Done {
				t.Fatal("preempted")
			}
		}
	}
	if st.Sync() != ncpu.Done {
		t.Fatal("preempted")
	}
	if got := st.ExecIndex(); got != int64(ks.Len()-1) {
		t.Fatalf("execution index %d, want %d", got, ks.Len()-1)
	}
	for i := range want {
		if out[i] != want[i] {
			t.Fatalf("output %d: %v, want %v", i, out[i], want[i])
		}
	}
}

// TestInline: every zoo model (small sizes) run on the calling thread
// (SetInline(InlineAlways)) gives the units' output bit for bit, at batch
// 1 and 2, also when preempted at a block and restored; InlineAuto
// decides each batch size after its first 2·inlineTrials+1 runs (which way
// depends on the machine; both give the same output).
func TestInline(t *testing.T) {
	b := newTestBackend(t, 2)
	defer b.SetInline(InlineAuto)
	for _, zc := range zooCases() {
		if zc.name == "vgg16" {
			continue
		}
		t.Run(zc.name, func(t *testing.T) {
			inst := loadZoo(t, b, zc.name, zc.opt, 2)
			defer inst.Close()
			for _, batch := range []int{1, 2} {
				in := zoo.Input(5, batch*inst.InputSize())
				b.SetInline(InlineNever)
				want := runOnce(t, inst, batch, in)
				if inst.RunsInline(batch) {
					t.Fatal("InlineNever: runs inline")
				}
				b.SetInline(InlineAlways)
				if !inst.RunsInline(batch) {
					t.Fatal("InlineAlways: does not run inline")
				}
				sameBits(t, fmt.Sprintf("batch %d inline", batch), runOnce(t, inst, batch, in), want)
				if ncpu.ChecksCompiled() {
					ks, err := inst.Kernels(batch)
					if err != nil {
						t.Fatal(err)
					}
					k := len(ks) / 2
					inst.PreemptAt(k, int64(ks[k].Grid-1))
					got := runOnce(t, inst, batch, in)
					inst.PreemptAt(-1, 0)
					sameBits(t, fmt.Sprintf("batch %d inline, preempted at kernel %d", batch, k), got, want)
				}
				b.SetInline(InlineAuto)
				for r := 0; r < 2*inlineTrials+1; r++ { // +1: the untimed first run
					sameBits(t, fmt.Sprintf("batch %d auto, run %d", batch, r), runOnce(t, inst, batch, in), want)
				}
				inst.mu.Lock()
				p, _ := inst.planFor(batch)
				decided := p.decided
				inst.mu.Unlock()
				if !decided {
					t.Fatalf("batch %d: InlineAuto undecided after %d runs", batch, 2*inlineTrials+1)
				}
				t.Logf("batch %d: auto runs inline: %v", batch, inst.RunsInline(batch))
			}
		})
	}
}

package conformance

import (
	"context"
	"fmt"
	"math"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
)

// How the node tests drive the cpu engine.
//
// A node test is selected when every operator of its model is one the
// engine supports (engine.SupportedOps). It then runs one of two ways:
//
//   - kernels: when it has a float32 input and only float32 outputs. The
//     first float32 input is fed at run time and every other input is
//     baked in as an initializer, as weights and parameters are in real
//     models (cpu.Backend.RunGraph compiles and runs the graph). Single-node
//     tests of operators whose inputs are all data (elementwise binary ops,
//     MatMul, Concat) run a second time with every float32 input fed at run
//     time.
//   - folding: otherwise (integer or boolean tensors only, non-float32
//     outputs such as Shape's, or a single node of an operator the engine
//     only folds, such as Where or Range). The engine computes float32 only and
//     evaluates everything else at load time with its reference evaluator
//     (engine.Eval), so that is what runs, node by node, with every input
//     constant.
//
// A test that fails to load or to match is an error naming the test,
// unless nodeSkips lists it with a reason.

// nodeSkips are node tests (or, with "/name", single outputs of them) the
// engine legitimately does not run, each with the reason. Keys ending in
// "*" match by prefix.
var nodeSkips = map[string]string{
	// Training-only behaviour (the engine is an inference engine).
	"test_batchnorm_epsilon_training_mode":    "training-mode BatchNormalization (running statistics outputs)",
	"test_batchnorm_example_training_mode":    "training-mode BatchNormalization (running statistics outputs)",
	"test_training_dropout":                   "training-mode Dropout is random",
	"test_training_dropout_default":           "training-mode Dropout is random",
	"test_training_dropout_default_mask":      "training-mode Dropout is random",
	"test_training_dropout_mask":              "training-mode Dropout is random",
	"test_training_dropout_zero_ratio_mask/z": "Dropout's mask output is training-only",
	"test_dropout_default_mask*/z":            "Dropout's mask output is training-only",
	"test_layer_normalization_*/Mean":         "LayerNormalization's Mean output is training-only",
	"test_layer_normalization_*/InvStdDev":    "LayerNormalization's InvStdDev output is training-only",
	"test_maxpool_with_argmax_*/z":            "MaxPool's Indices output is not supported",
	// The harness feeds a test's first float32 input at run time.
	"test_onehot_negative_indices": "its only float32 input is OneHot's depth, which the engine needs as a constant (the int64 indices make it a folding test otherwise)",
	// Resize modes the engine does not implement.
	// Variadic Max / Min beyond two inputs.
	// Precision: float32 evaluation against float64 references.
	"test_blackmanwindow*expanded": "float32 cos vs float64 reference: 1.5e-4 relative (ONNX Runtime misses it too)",
	"test_hammingwindow*expanded":  "float32 cos vs float64 reference: 1.6e-4 relative (ONNX Runtime misses it too)",
	"test_hannwindow*expanded":     "float32 cos vs float64 reference: 2e-4 relative (ONNX Runtime misses it too)",
	// Reference data of libonnx-testdata 1.12 that later ONNX releases fixed.
	"test_resize_downsample_scales_linear_align_corners": "engine and ONNX Runtime both give 4; the 1.12 reference 3.142857",
	"test_resize_downsample_scales_cubic_align_corners":  "engine and ONNX Runtime agree exactly ([1 2.5 4 7 ...]); the 1.12 reference ([1 2.395 3.790 ...]) differs",
	"test_hannwindow":               "the 1.12 reference takes pi as 3.1415 (0.34556 for 0.34549 at n = 8); TestSignalConstantsORT compares with ONNX Runtime",
	"test_hannwindow_symmetric":     "the 1.12 reference takes pi as 3.1415; TestSignalConstantsORT compares with ONNX Runtime",
	"test_hammingwindow":            "the 1.12 reference takes pi as 3.1415; TestSignalConstantsORT compares with ONNX Runtime",
	"test_hammingwindow_symmetric":  "the 1.12 reference takes pi as 3.1415; TestSignalConstantsORT compares with ONNX Runtime",
	"test_blackmanwindow":           "the 1.12 reference takes pi as 3.1415; TestSignalConstantsORT compares with ONNX Runtime",
	"test_blackmanwindow_symmetric": "the 1.12 reference takes pi as 3.1415; TestSignalConstantsORT compares with ONNX Runtime",
	"test_roialign_aligned_false":   "the 1.12 reference is rounded to 4 decimals and one value, 0.4713, is not the rounding of the 0.47124 the engine and ONNX Runtime give; TestRoiAlignORT compares with ONNX Runtime",
	// Reference data that contradict the node they test.
	"test_adam_multiple/X1_new": "the generator computed it with epsilon 1e-2, which the node does not set (ONNX's default, 1e-6, is what applies); V and H do not depend on epsilon and are compared",
	"test_adam_multiple/X2_new": "the generator computed it with epsilon 1e-2, which the node does not set (ONNX's default, 1e-6, is what applies); V and H do not depend on epsilon and are compared",
	// Integer exponents.
	// Operator versions the engine does not run.
	"test_scan_sum": "opset 8's Scan (a batch axis in the body's values, sequence_lens): refused at load; opset 9's runs (test_scan9_sum)",
	// Types the engine does not compute in.
	"test_cast_FLOAT_to_BFLOAT16*":     "bfloat16 is not an engine type",
	"test_castlike_FLOAT_to_BFLOAT16*": "bfloat16 is not an engine type",
	"test_cast_BFLOAT16_to_FLOAT":      "bfloat16 is not an engine type (and the data stores it as uint16)",
	"test_castlike_BFLOAT16_to_FLOAT*": "bfloat16 is not an engine type (and the data stores it as uint16)",
}

// roundedRefs are node tests whose reference data libonnx-testdata 1.12
// gives rounded to 4 decimals (hand-written examples): their outputs must
// round to it, |got - want| <= 0.5e-4 (plus float32's rounding).
var roundedRefs = map[string]string{
	"test_gridsample_bicubic":    "-0.1406 for -0.140625 (-9/64, exact for these inputs)",
	"test_roialign_aligned_true": "0.4002 for 0.40015",
}

// compareRounded is Compare for a reference rounded to 4 decimals.
func compareRounded(got, want *graph.Tensor) error {
	if !sameDims(got.Dims, want.Dims) || len(got.F32) != len(want.F32) || want.F32 == nil {
		return fmt.Errorf("%s: shape %v, want %v (float32)", want.Name, got.Dims, want.Dims)
	}
	for i, w := range want.F32 {
		if d := math.Abs(float64(got.F32[i]) - float64(w)); !(d <= 0.5e-4+1e-6) {
			return fmt.Errorf("%s: [%d] = %g, want %g rounded (off by %.2g)", want.Name, i, got.F32[i], w, d)
		}
	}
	return nil
}

// instanceSkips are node tests that pass through the kernels but cannot go
// through InferBatch, whose input's first dimension is the batch.
var instanceSkips = map[string]string{
	"test_reshape_allowzero_reordered": "zero-sized input: a first dimension of 0 cannot be a batch axis",
	"test_split_zero_size_splits":      "zero-sized input: a first dimension of 0 cannot be a batch axis",
}

// nodeSkip returns why the engine does not run output out ("" for the
// whole test) of node test name, or "".
func nodeSkip(name, out string) string {
	for key, why := range nodeSkips {
		test, o, hasOut := strings.Cut(key, "/")
		if hasOut != (out != "") || (hasOut && o != out) {
			continue
		}
		if ok, _ := path.Match(test, name); ok {
			return why
		}
	}
	return ""
}

// foldOnly are the operators the engine only ever evaluates at load time
// (engine's foldOnlyOps: shape arithmetic and constants). A single-node
// test of one of them runs through the folder whatever its types.
var foldOnly = map[string]bool{
	"And": true, "Constant": true, "ConstantOfShape": true, "Equal": true,
	"Greater": true, "Less": true, "Not": true, "Or": true, "Range": true,
	"Shape": true, "Size": true, "Where": true,
	"HannWindow": true, "HammingWindow": true, "BlackmanWindow": true, "MelWeightMatrix": true,
	"NonZero": true, "Unique": true,
}

// dataOps are operators whose inputs are all data: their single-node tests
// also run with every input fed at run time.
var dataOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Pow": true,
	"Max": true, "Min": true, "PRelu": true, "MatMul": true, "Concat": true,
	"Clip": true, // bounds computed at run time: Max and Min kernels
}

// cpuBackend starts the cpu backend on both cores.
func cpuBackend(t testing.TB) *cpu.Backend {
	t.Helper()
	b := cpu.New()
	if err := b.Init(context.Background(), libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Deinit(); err != nil {
			t.Error(err)
		}
	})
	return b
}

// TestNodeTestsCPU runs ONNX's node tests for every operator the cpu
// engine supports.
func TestNodeTestsCPU(t *testing.T) {
	names := NodeTestNames()
	if len(names) == 0 {
		RequireDeps(t, "libonnx-testdata", os.ErrNotExist)
	}
	be := cpuBackend(t)
	supported := supportedOps()
	covered := map[string]int{}
	var kernels, folded, skipped, partial, allRuntime int
	for _, name := range names {
		nt, err := LoadNodeTest(name)
		if err != nil {
			continue // sub-graphs, sequences...: no engine operator either
		}
		ops := nt.Ops()
		if !allSupported(ops, supported) {
			continue
		}
		if why := nodeSkip(name, ""); why != "" {
			skipped++
			t.Logf("skip %s: %s", name, why)
			continue
		}
		t.Run(strings.TrimPrefix(name, "test_"), func(t *testing.T) {
			fold := !kernelPath(nt)
			skippedOuts, runtimeAll, err := runNodeTestCPU(be, nt, fold)
			if err != nil {
				t.Errorf("%s (%s): %v", name, strings.Join(ops, ","), err)
				return
			}
			if fold {
				folded++
			} else {
				kernels++
			}
			if skippedOuts > 0 {
				partial++
			}
			if runtimeAll {
				allRuntime++
			}
			for _, op := range ops {
				covered[op]++
			}
		})
	}
	var uncovered []string
	for op := range supported {
		if covered[op] == 0 {
			uncovered = append(uncovered, op)
		}
	}
	sort.Strings(uncovered)
	t.Logf("node tests passed: %d through kernels (%d of them also with every input at run time), %d through the constant folder; %d with an output skipped; %d skipped (nodeSkips)", kernels, allRuntime, folded, partial, skipped)
	t.Logf("supported operators without a passing node test: %v", uncovered)
}

// TestNodeTestsCPUInstances runs the node tests that go through the
// kernels once more through the cpu backend's production path: one
// runtime input, one output, LoadModel, ConfigureBatch and InferBatch (the
// batch read off the instance's input shape).
func TestNodeTestsCPUInstances(t *testing.T) {
	names := NodeTestNames()
	if len(names) == 0 {
		RequireDeps(t, "libonnx-testdata", os.ErrNotExist)
	}
	be := cpuBackend(t)
	passed := 0
	for _, name := range names {
		nt, err := LoadNodeTest(name)
		if err != nil || !allSupported(nt.Ops(), supportedOps()) || !kernelPath(nt) || nodeSkip(name, "") != "" {
			continue
		}
		if why := instanceSkips[name]; why != "" {
			continue
		}
		if err := runNodeTest(context.Background(), be, nt); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		passed++
	}
	t.Logf("%d node tests pass through LoadModel / InferBatch", passed)
}

func supportedOps() map[string]bool {
	m := map[string]bool{}
	for _, op := range engine.SupportedOps() {
		m[op] = true
	}
	return m
}

func allSupported(ops []string, supported map[string]bool) bool {
	for _, op := range ops {
		if !supported[op] {
			return false
		}
	}
	return true
}

// kernelPath reports whether nt runs through the kernels: it has a
// float32 input and only float32 outputs (of those it checks), and is not
// a single fold-only node.
func kernelPath(nt *NodeTest) bool {
	if g := nt.Model.Graph; len(g.Nodes) == 1 && foldOnly[g.Nodes[0].Op] {
		return false
	}
	ds := nt.Sets[0]
	if _, ok := feedInput(nt, ds); !ok {
		return false
	}
	for _, o := range ds.Outputs {
		if o.DType != graph.Float32 && nodeSkip(nt.Name, o.Name) == "" {
			return false
		}
	}
	return true
}

// runNodeTestCPU runs every data set of nt and compares the outputs not
// skipped; it returns how many outputs nodeSkips left out and whether the
// every-input-at-run-time configuration ran too.
func runNodeTestCPU(be *cpu.Backend, nt *NodeTest, fold bool) (skipped int, runtimeAll bool, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	ctx := context.Background()
	for s, ds := range nt.Sets {
		var wants []*graph.Tensor
		for _, w := range ds.Outputs {
			if nodeSkip(nt.Name, w.Name) != "" {
				skipped++
				continue
			}
			wants = append(wants, w)
		}
		var configs []map[string]*graph.Tensor
		if fold {
			var got map[string]*graph.Tensor
			g := *nt.Model.Graph
			g.Outputs = outputsFor(nt.Model.Graph, wants)
			if got, err = foldGraph(pruneOutputs(&g), ds.Inputs); err != nil {
				return skipped, runtimeAll, fmt.Errorf("data set %d: fold: %w", s, err)
			}
			configs = append(configs, got)
		} else {
			feed, _ := feedInput(nt, ds)
			g := constInputs(nt.Model.Graph, ds, feed, wants)
			got, err := be.RunGraph(ctx, pruneOutputs(g), map[string]*graph.Tensor{ds.Inputs[feed].Name: ds.Inputs[feed]})
			if err != nil {
				return skipped, runtimeAll, fmt.Errorf("data set %d: %w", s, err)
			}
			configs = append(configs, got)
			if allData(nt, ds) {
				g := *nt.Model.Graph
				g.Outputs = outputsFor(nt.Model.Graph, wants)
				in := map[string]*graph.Tensor{}
				for _, t := range ds.Inputs {
					in[t.Name] = t
				}
				got, err := be.RunGraph(ctx, pruneOutputs(&g), in)
				if err != nil {
					return skipped, runtimeAll, fmt.Errorf("data set %d, every input at run time: %w", s, err)
				}
				configs = append(configs, got)
				runtimeAll = true
			}
		}
		for c, got := range configs {
			for _, w := range wants {
				g := got[w.Name]
				if g == nil {
					return skipped, runtimeAll, fmt.Errorf("data set %d: no output %q", s, w.Name)
				}
				if why := roundedRefs[nt.Name]; why != "" {
					if err := compareRounded(g, w); err != nil {
						return skipped, runtimeAll, fmt.Errorf("data set %d (config %d), reference rounded to 4 decimals: %w", s, c, err)
					}
					continue
				}
				if err := Compare(asType(g, w), w); err != nil {
					return skipped, runtimeAll, fmt.Errorf("data set %d (config %d): %w", s, c, err)
				}
			}
		}
	}
	return skipped, runtimeAll, nil
}

// constInputs makes a copy of g whose only runtime input is ds.Inputs[feed]:
// every other input becomes an initializer with the data set's value, and
// the outputs are those in wants.
func constInputs(g *graph.Graph, ds DataSet, feed int, wants []*graph.Tensor) *graph.Graph {
	c := *g
	c.Initializers = slices.Clone(g.Initializers)
	c.Inputs = nil
	for i, t := range ds.Inputs {
		if i == feed {
			c.Inputs = append(c.Inputs, g.Inputs[i])
		} else {
			c.Initializers = append(c.Initializers, t)
		}
	}
	c.Outputs = outputsFor(g, wants)
	return &c
}

func outputsFor(g *graph.Graph, wants []*graph.Tensor) []graph.ValueInfo {
	var out []graph.ValueInfo
	for _, vi := range g.Outputs {
		for _, w := range wants {
			if w.Name == vi.Name {
				out = append(out, vi)
			}
		}
	}
	return out
}

// allData reports whether nt is a single node of a dataOps operator with
// at least two float32 inputs.
func allData(nt *NodeTest, ds DataSet) bool {
	g := nt.Model.Graph
	if len(g.Nodes) != 1 || !dataOps[g.Nodes[0].Op] {
		return false
	}
	n := 0
	for _, t := range ds.Inputs {
		if t.DType == graph.Float32 {
			n++
		}
	}
	return n >= 2
}

// asType returns got with want's kind of values: the engine returns every
// output as float32, so integer expectations compare the rounded values.
func asType(got, want *graph.Tensor) *graph.Tensor {
	if want.F32 != nil || got.I64 != nil {
		return got
	}
	c := &graph.Tensor{Name: got.Name, DType: want.DType, Dims: got.Dims, I64: make([]int64, len(got.F32))}
	for i, v := range got.F32 {
		c.I64[i] = int64(v)
	}
	return c
}

// optionalOutputs are operators whose outputs after the first are
// optional (training statistics, masks, indices).
var optionalOutputs = map[string]bool{
	"Dropout": true, "LayerNormalization": true, "MaxPool": true, "BatchNormalization": true,
}

// pruneOutputs drops the optional node outputs nothing reads (such as
// LayerNormalization's Mean or Dropout's mask, once the test no longer asks
// for them), as an exporter omits them. g's nodes are copied.
func pruneOutputs(g *graph.Graph) *graph.Graph {
	used := map[string]bool{}
	for _, vi := range g.Outputs {
		used[vi.Name] = true
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			used[in] = true
		}
	}
	c := *g
	c.Nodes = slices.Clone(g.Nodes)
	for i := range c.Nodes {
		if !optionalOutputs[c.Nodes[i].Op] {
			continue
		}
		outs := slices.Clone(c.Nodes[i].Outputs)
		for k := 1; k < len(outs); k++ {
			if !used[outs[k]] {
				outs[k] = ""
			}
		}
		for len(outs) > 1 && outs[len(outs)-1] == "" {
			outs = outs[:len(outs)-1]
		}
		c.Nodes[i].Outputs = outs
	}
	return &c
}

// foldGraph evaluates g with the engine's constant folder (engine.Eval),
// node by node, every input a constant, and returns the graph outputs.
func foldGraph(g *graph.Graph, inputs []*graph.Tensor) (map[string]*graph.Tensor, error) {
	vals := map[string]*engine.Tensor{}
	for _, t := range append(slices.Clone(g.Initializers), inputs...) {
		et, err := engine.FromGraph(t)
		if err != nil {
			return nil, err
		}
		vals[t.Name] = et
	}
	for i := range g.Nodes {
		n := &g.Nodes[i]
		ins := make([]*engine.Tensor, len(n.Inputs))
		for k, name := range n.Inputs {
			if name == "" {
				continue
			}
			if ins[k] = vals[name]; ins[k] == nil {
				return nil, fmt.Errorf("node %d (%s): no value for %q", i, n.Op, name)
			}
		}
		outs, err := engine.Eval(n, g.Opset, ins)
		if err != nil {
			return nil, err
		}
		for k, name := range n.Outputs {
			if name != "" && k < len(outs) && outs[k] != nil {
				vals[name] = outs[k]
			}
		}
	}
	res := map[string]*graph.Tensor{}
	for _, vi := range g.Outputs {
		v := vals[vi.Name]
		if v == nil {
			return nil, fmt.Errorf("output %q was not computed", vi.Name)
		}
		res[vi.Name] = v.ToGraph(vi.Name)
	}
	return res, nil
}

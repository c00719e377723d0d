package conformance

import (
	"context"
	"fmt"
	"math"
	"testing"

	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
)

// Run-time lowerings the node tests leave out (their data is integer or
// float64, so they fold): each node runs once through the cpu backend's
// kernels with a float32 input fed at run time and once through the
// reference evaluator, and the two must agree.
func TestRuntimeLoweringsMatchReference(t *testing.T) {
	be := cpuBackend(t)
	attr := func(name string, v int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInt, I: v} }
	eq := func(e string) graph.Attr { return graph.Attr{Name: "equation", Kind: graph.AttrString, S: e} }
	str := func(name, v string) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrString, S: v} }
	// grid is a sampling grid [n, oh, ow, 2] over [-1.3, 1.3]: inside the
	// image and past its borders
	grid := func(name string, n, oh, ow int64) *graph.Tensor {
		t := &graph.Tensor{Name: name, DType: graph.Float32, Dims: []int64{n, oh, ow, 2}}
		t.F32 = make([]float32, t.NumElements())
		for i := range t.F32 {
			t.F32[i] = float32((i*29)%53)/20 - 1.3
		}
		return t
	}
	floats := func(name string, dims ...int64) *graph.Tensor {
		t := &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims}
		t.F32 = make([]float32, t.NumElements())
		for i := range t.F32 {
			t.F32[i] = float32((i*13)%17)/8 - 1
		}
		return t
	}
	inf := float32(math.Inf(1))
	cases := []struct {
		name   string
		node   graph.Node
		xdims  []int64
		inits  []*graph.Tensor
		x      []float32 // nil: generated
		opset  int64
		kernel string // a kernel the program must hold
	}{
		// infinities and NaN: a kept one survives, a cleared one is 0
		{name: "trilu-upper-k1", node: graph.Node{Op: "Trilu", Inputs: []string{"x", "k"}},
			xdims: []int64{2, 3, 4}, inits: []*graph.Tensor{i64Tensor("k", []int64{}, 1)},
			x: []float32{inf, -inf, float32(math.NaN()), 1, inf, 2, 3, -inf, 4, 5, 6, 7, -1, -2, -3, -4, -5, -6, -7, -8, -9, -10, -11, -12}},
		{name: "trilu-lower-k-1", node: graph.Node{Op: "Trilu", Inputs: []string{"x", "k"}, Attrs: []graph.Attr{attr("upper", 0)}},
			xdims: []int64{3, 5}, inits: []*graph.Tensor{i64Tensor("k", []int64{1}, -1)}},
		// a view of rank 8 that does not collapse: 4 COPY kernels of rank 6
		{name: "tile-rank8", node: graph.Node{Op: "Tile", Inputs: []string{"x", "r"}},
			xdims: []int64{2, 3, 2, 3}, inits: []*graph.Tensor{i64Tensor("r", []int64{4}, 2, 2, 2, 2)}, kernel: "copy"},
		{name: "cumsum-axis1", node: graph.Node{Op: "CumSum", Inputs: []string{"x", "a"}},
			xdims: []int64{3, 4, 5}, inits: []*graph.Tensor{i64Tensor("a", []int64{}, 1)}, kernel: "gemm"},
		{name: "cumsum-last-exclusive", node: graph.Node{Op: "CumSum", Inputs: []string{"x", "a"}, Attrs: []graph.Attr{attr("exclusive", 1)}},
			xdims: []int64{3, 7}, inits: []*graph.Tensor{i64Tensor("a", []int64{}, -1)}, kernel: "gemm"},
		{name: "cumsum-reverse", node: graph.Node{Op: "CumSum", Inputs: []string{"x", "a"}, Attrs: []graph.Attr{attr("reverse", 1)}},
			xdims: []int64{6, 2}, inits: []*graph.Tensor{i64Tensor("a", []int64{}, 0)}, kernel: "gemm"},
		{name: "cumsum-reverse-exclusive", node: graph.Node{Op: "CumSum", Inputs: []string{"x", "a"},
			Attrs: []graph.Attr{attr("reverse", 1), attr("exclusive", 1)}},
			xdims: []int64{2, 9}, inits: []*graph.Tensor{i64Tensor("a", []int64{}, 1)}, kernel: "gemm"},
		{name: "where-const-cond", node: graph.Node{Op: "Where", Inputs: []string{"c", "x", "y"}},
			xdims: []int64{3, 4}, inits: []*graph.Tensor{{Name: "c", DType: graph.Bool, Dims: []int64{4}, I64: []int64{1, 0, 0, 1}},
				{Name: "y", DType: graph.Float32, Dims: []int64{3, 1}, F32: []float32{-1, -2, -3}}}, kernel: "gather"},
		{name: "gatherelements-axis-neg", node: graph.Node{Op: "GatherElements", Inputs: []string{"x", "i"}, Attrs: []graph.Attr{attr("axis", -1)}},
			xdims: []int64{2, 3}, inits: []*graph.Tensor{i64Tensor("i", []int64{2, 4}, 0, -1, 2, 1, 1, 1, 0, -3)}, kernel: "gather"},
		{name: "depthtospace-crd", node: graph.Node{Op: "DepthToSpace", Inputs: []string{"x"},
			Attrs: []graph.Attr{attr("blocksize", 2), {Name: "mode", Kind: graph.AttrString, S: "CRD"}}},
			xdims: []int64{2, 8, 3, 2}, kernel: "copy"},
		{name: "spacetodepth", node: graph.Node{Op: "SpaceToDepth", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("blocksize", 3)}},
			xdims: []int64{1, 2, 6, 9}, kernel: "copy"},
		{name: "mod-fmod", node: graph.Node{Op: "Mod", Inputs: []string{"x", "d"}, Attrs: []graph.Attr{attr("fmod", 1)}},
			xdims: []int64{4, 3}, inits: []*graph.Tensor{{Name: "d", DType: graph.Float32, Dims: []int64{3}, F32: []float32{0.7, -2, 3}}},
			kernel: "binary"},
		// Pad: a fill and an interior COPY (cropping where pads are
		// negative), or a GATHER by index map in the other modes
		{name: "pad-constant-crop", node: graph.Node{Op: "Pad", Inputs: []string{"x", "p", "v"}},
			xdims: []int64{2, 3, 4}, inits: []*graph.Tensor{i64Tensor("p", []int64{6}, 1, -1, 2, 0, 2, -1),
				{Name: "v", DType: graph.Float32, Dims: []int64{}, F32: []float32{-7.5}}}, kernel: "copy"},
		{name: "pad-reflect-axes", node: graph.Node{Op: "Pad", Inputs: []string{"x", "p", "", "a"}, Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "reflect"}}},
			xdims: []int64{2, 4, 5}, inits: []*graph.Tensor{i64Tensor("p", []int64{4}, 3, 2, 1, 4), i64Tensor("a", []int64{2}, -1, 1)}, opset: 18, kernel: "gather"},
		{name: "pad-edge", node: graph.Node{Op: "Pad", Inputs: []string{"x", "p"}, Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "edge"}}},
			xdims: []int64{3, 2}, inits: []*graph.Tensor{i64Tensor("p", []int64{4}, 2, 3, 1, 0)}, kernel: "gather"},
		{name: "pad-wrap", node: graph.Node{Op: "Pad", Inputs: []string{"x", "p"}, Attrs: []graph.Attr{{Name: "mode", Kind: graph.AttrString, S: "wrap"}}},
			xdims: []int64{3, 2}, inits: []*graph.Tensor{i64Tensor("p", []int64{4}, 4, 1, 0, 5)}, opset: 19, kernel: "gather"},
		{name: "pad-opset2-attrs", node: graph.Node{Op: "Pad", Inputs: []string{"x"}, Attrs: []graph.Attr{
			{Name: "pads", Kind: graph.AttrInts, Ints: []int64{0, 1, 1, 0}}, {Name: "value", Kind: graph.AttrFloat, F: 3}}},
			xdims: []int64{2, 2}, opset: 2, kernel: "copy"},
		// ScatterND with run-time updates and constant data: both copied
		// into one scratch buffer, then gathered
		{name: "scatternd-runtime-updates", node: graph.Node{Op: "ScatterND", Inputs: []string{"d", "i", "x"}},
			xdims: []int64{2, 3}, inits: []*graph.Tensor{{Name: "d", DType: graph.Float32, Dims: []int64{4, 3}, F32: []float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
				i64Tensor("i", []int64{2, 1}, -1, 1)}, kernel: "gather"},
		{name: "scatterelements-add", node: graph.Node{Op: "ScatterElements", Inputs: []string{"x", "i", "u"},
			Attrs: []graph.Attr{attr("axis", 1), {Name: "reduction", Kind: graph.AttrString, S: "add"}}},
			xdims: []int64{2, 4}, inits: []*graph.Tensor{i64Tensor("i", []int64{2, 2}, 1, 1, 3, 0),
				{Name: "u", DType: graph.Float32, Dims: []int64{2, 2}, F32: []float32{10, 20, 30, 40}}}, kernel: "binary"},
		{name: "scatternd-max", node: graph.Node{Op: "ScatterND", Inputs: []string{"x", "i", "u"},
			Attrs: []graph.Attr{{Name: "reduction", Kind: graph.AttrString, S: "max"}}},
			xdims: []int64{3, 2}, inits: []*graph.Tensor{i64Tensor("i", []int64{2, 2}, 0, 1, 2, 0),
				{Name: "u", DType: graph.Float32, Dims: []int64{2}, F32: []float32{100, -100}}}, opset: 18, kernel: "binary"},
		{name: "gathernd-batch1", node: graph.Node{Op: "GatherND", Inputs: []string{"x", "i"}, Attrs: []graph.Attr{attr("batch_dims", 1)}},
			xdims: []int64{2, 3, 4}, inits: []*graph.Tensor{i64Tensor("i", []int64{2, 2, 1}, 2, -3, 1, 1)}, kernel: "gather"},
		{name: "compress-axis1", node: graph.Node{Op: "Compress", Inputs: []string{"x", "c"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 5}, inits: []*graph.Tensor{{Name: "c", DType: graph.Bool, Dims: []int64{4}, I64: []int64{1, 0, 1, 1}}}, kernel: "gather"},
		// OneHot on float indices at run time (negative ones from the end,
		// one out of range)
		{name: "onehot-axis0", node: graph.Node{Op: "OneHot", Inputs: []string{"x", "d", "v"}, Attrs: []graph.Attr{attr("axis", 0)}},
			xdims: []int64{2, 3}, x: []float32{0, 3, -1, -4, 9, 2},
			inits: []*graph.Tensor{i64Tensor("d", []int64{}, 4), {Name: "v", DType: graph.Float32, Dims: []int64{2}, F32: []float32{-1, 2}}}, kernel: "binary"},
		// Einsum: one batched GEMM, operands in place, transposed or
		// copied into order, the product copied into the output's order
		{name: "einsum-attention-scores", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "k"}, Attrs: []graph.Attr{eq("bhid,bhjd->bhij")}},
			xdims: []int64{2, 3, 4, 5}, inits: []*graph.Tensor{floats("k", 2, 3, 6, 5)}, kernel: "gemm"},
		{name: "einsum-batch-matmul", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "y"}, Attrs: []graph.Attr{eq("bij, bjk -> bik")}},
			xdims: []int64{3, 2, 4}, inits: []*graph.Tensor{floats("y", 3, 4, 5)}, kernel: "gemm"},
		{name: "einsum-output-permuted", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "y"}, Attrs: []graph.Attr{eq("ij,jk->ki")}},
			xdims: []int64{3, 4}, inits: []*graph.Tensor{floats("y", 4, 2)}, kernel: "copy"},
		{name: "einsum-ellipsis", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "y"}, Attrs: []graph.Attr{eq("...ij,jk->...ik")}},
			xdims: []int64{2, 3, 4}, inits: []*graph.Tensor{floats("y", 4, 5)}, kernel: "gemm"},
		{name: "einsum-a-transposed", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "y"}, Attrs: []graph.Attr{eq("ji,jk->ik")}},
			xdims: []int64{4, 3}, inits: []*graph.Tensor{floats("y", 4, 2)}, kernel: "gemm"},
		{name: "einsum-b-transposed-implicit", node: graph.Node{Op: "Einsum", Inputs: []string{"y", "x"}, Attrs: []graph.Attr{eq("ij,kj")}},
			xdims: []int64{5, 4}, inits: []*graph.Tensor{floats("y", 3, 4)}, kernel: "gemm"},
		{name: "einsum-a-copied", node: graph.Node{Op: "Einsum", Inputs: []string{"x", "y"}, Attrs: []graph.Attr{eq("jib,bjk->bik")}},
			xdims: []int64{4, 3, 2}, inits: []*graph.Tensor{floats("y", 2, 4, 5)}, kernel: "copy"},
		{name: "einsum-transpose", node: graph.Node{Op: "Einsum", Inputs: []string{"x"}, Attrs: []graph.Attr{eq("ijk->kij")}},
			xdims: []int64{2, 3, 4}, kernel: "copy"},
		// GridSample: every mode and padding, the grid fed as a constant
		{name: "gridsample-bicubic-zeros", node: graph.Node{Op: "GridSample", Inputs: []string{"x", "g"}, Attrs: []graph.Attr{str("mode", "bicubic")}},
			xdims: []int64{2, 3, 4, 5}, inits: []*graph.Tensor{grid("g", 2, 3, 4)}, opset: 16, kernel: "gridsample"},
		{name: "gridsample-bicubic-reflection-aligned", node: graph.Node{Op: "GridSample", Inputs: []string{"x", "g"},
			Attrs: []graph.Attr{str("mode", "bicubic"), str("padding_mode", "reflection"), attr("align_corners", 1)}},
			xdims: []int64{1, 2, 4, 5}, inits: []*graph.Tensor{grid("g", 1, 5, 3)}, opset: 16, kernel: "gridsample"},
		{name: "gridsample-bicubic-border", node: graph.Node{Op: "GridSample", Inputs: []string{"x", "g"},
			Attrs: []graph.Attr{str("mode", "bicubic"), str("padding_mode", "border")}},
			xdims: []int64{1, 2, 4, 5}, inits: []*graph.Tensor{grid("g", 1, 5, 3)}, opset: 16, kernel: "gridsample"},
		{name: "gridsample-bilinear-reflection", node: graph.Node{Op: "GridSample", Inputs: []string{"x", "g"},
			Attrs: []graph.Attr{str("padding_mode", "reflection")}},
			xdims: []int64{1, 3, 3, 4}, inits: []*graph.Tensor{grid("g", 1, 4, 4)}, opset: 16, kernel: "gridsample"},
		{name: "gridsample-nearest-border-aligned", node: graph.Node{Op: "GridSample", Inputs: []string{"x", "g"},
			Attrs: []graph.Attr{str("mode", "nearest"), str("padding_mode", "border"), attr("align_corners", 1)}},
			xdims: []int64{1, 3, 3, 4}, inits: []*graph.Tensor{grid("g", 1, 4, 4)}, opset: 16, kernel: "gridsample"},
		{name: "reversesequence-rank3", node: graph.Node{Op: "ReverseSequence", Inputs: []string{"x", "l"},
			Attrs: []graph.Attr{attr("batch_axis", 1), attr("time_axis", 0)}},
			xdims: []int64{5, 3, 2}, inits: []*graph.Tensor{i64Tensor("l", []int64{3}, 5, 0, 3)}, kernel: "gather"},
		{name: "maxunpool-1d-pads", node: graph.Node{Op: "MaxUnpool", Inputs: []string{"x", "i"},
			Attrs: []graph.Attr{{Name: "kernel_shape", Kind: graph.AttrInts, Ints: []int64{3}},
				{Name: "strides", Kind: graph.AttrInts, Ints: []int64{2}}, {Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 0}}}},
			xdims: []int64{1, 2, 3}, inits: []*graph.Tensor{i64Tensor("i", []int64{1, 2, 3}, 0, 3, 5, 7, 8, 11)}, kernel: "gather"},
		// TopK: values and indices (int64 as float32 values), ties to the
		// lower index, largest and smallest, an inner axis
		{name: "topk-values-ties", node: graph.Node{Op: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"out", ""}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 6, 2}, x: []float32{1, 5, 3, 5, 3, 1, 2, 5, 5, 0, 3, 2, 0, 0, 0, 0, -1, 0, 4, 4, 0, 2, 4, 9},
			inits: []*graph.Tensor{i64Tensor("k", []int64{1}, 3)}, opset: 11, kernel: "topk"},
		{name: "topk-indices-ties", node: graph.Node{Op: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"", "out"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 6, 2}, x: []float32{1, 5, 3, 5, 3, 1, 2, 5, 5, 0, 3, 2, 0, 0, 0, 0, -1, 0, 4, 4, 0, 2, 4, 9},
			inits: []*graph.Tensor{i64Tensor("k", []int64{1}, 3)}, opset: 11, kernel: "topk"},
		{name: "topk-smallest-last-axis", node: graph.Node{Op: "TopK", Inputs: []string{"x", "k"}, Outputs: []string{"", "out"}, Attrs: []graph.Attr{attr("largest", 0)}},
			xdims: []int64{3, 40}, inits: []*graph.Tensor{i64Tensor("k", []int64{1}, 40)}, opset: 11, kernel: "topk"},
		// ArgMax / ArgMin at run time: int64 indices as float32 values;
		// ties, the first or (select_last_index) the last
		{name: "argmax-axis1-ties", node: graph.Node{Op: "ArgMax", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 4, 2}, x: []float32{1, 5, 3, 5, 3, 1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0}, kernel: "reduce"},
		{name: "argmax-last-index", node: graph.Node{Op: "ArgMax", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", 1), attr("select_last_index", 1)}},
			xdims: []int64{2, 4, 2}, x: []float32{1, 5, 3, 5, 3, 1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0}, kernel: "reduce"},
		{name: "argmin-no-keepdims", node: graph.Node{Op: "ArgMin", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", -1), attr("keepdims", 0)}},
			xdims: []int64{3, 5}, kernel: "reduce"},
		// Hardmax's body: CumSum of the maxima along axis 1, first one kept
		{name: "hardmax-ties", node: graph.Node{Op: "Hardmax", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 4, 2}, x: []float32{1, 5, 3, 5, 3, 1, 2, 5, 0, 0, 0, 0, 0, 0, 0, 0}, opset: 13},
		{name: "hardmax-opset11", node: graph.Node{Op: "Hardmax", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 2, 3}, x: []float32{1, 9, 3, 9, 0, 0, 4, 4, 4, 4, 4, 5}, opset: 11},
		// DFT and STFT as one GEMM with the transform's matrix: complex
		// input with dimensions between the axis and the parts (moved
		// next to each other and back), lengths padded and cut, one-sided,
		// inverse, opset 20's axis input; frames that overlap, a window
		{name: "dft-complex-inner", node: graph.Node{Op: "DFT", Inputs: []string{"x"}, Attrs: []graph.Attr{attr("axis", 1)}},
			xdims: []int64{2, 5, 3, 2}, kernel: "gemm"},
		{name: "dft-padded-onesided", node: graph.Node{Op: "DFT", Inputs: []string{"x", "L"}, Attrs: []graph.Attr{attr("onesided", 1)}},
			xdims: []int64{3, 6, 1}, inits: []*graph.Tensor{i64Tensor("L", []int64{}, 8)}, kernel: "gemm"},
		{name: "dft-cut-inverse", node: graph.Node{Op: "DFT", Inputs: []string{"x", "L"}, Attrs: []graph.Attr{attr("inverse", 1)}},
			xdims: []int64{2, 9, 2}, inits: []*graph.Tensor{i64Tensor("L", []int64{}, 5)}, kernel: "gemm"},
		{name: "dft-opset20-axis", node: graph.Node{Op: "DFT", Inputs: []string{"x", "", "a"}},
			xdims: []int64{2, 4, 3, 1}, inits: []*graph.Tensor{i64Tensor("a", []int64{}, -3)}, opset: 20, kernel: "gemm"},
		{name: "stft-complex-twosided", node: graph.Node{Op: "STFT", Inputs: []string{"x", "s", "", "l"}, Attrs: []graph.Attr{attr("onesided", 0)}},
			xdims: []int64{2, 20, 2}, inits: []*graph.Tensor{i64Tensor("s", []int64{}, 3), i64Tensor("l", []int64{}, 6)}, kernel: "gemm"},
		// Resize (opset 18) on negative axes: sizes for H and W only
		{name: "resize-negative-axes", node: graph.Node{Op: "Resize", Inputs: []string{"x", "", "", "s"},
			Attrs: []graph.Attr{str("mode", "linear"), {Name: "axes", Kind: graph.AttrInts, Ints: []int64{-1, -2}}}},
			xdims: []int64{1, 2, 5, 6}, inits: []*graph.Tensor{i64Tensor("s", []int64{2}, 9, 3)}, opset: 18, kernel: "resize"},
		{name: "stft-window", node: graph.Node{Op: "STFT", Inputs: []string{"x", "s", "w"}},
			xdims: []int64{1, 30, 1}, inits: []*graph.Tensor{i64Tensor("s", []int64{}, 4),
				{Name: "w", DType: graph.Float32, Dims: []int64{8}, F32: []float32{0, 0.19, 0.61, 0.95, 0.95, 0.61, 0.19, 0}}}, kernel: "gemm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n := c.node
			n.Name = c.name
			if n.Outputs == nil {
				n.Outputs = []string{"out"}
			}
			opset := c.opset
			if opset == 0 {
				opset = 17
			}
			g := &graph.Graph{Name: c.name, Opset: opset, Nodes: []graph.Node{n}, Initializers: c.inits,
				Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: c.xdims}},
				Outputs: []graph.ValueInfo{{Name: "out"}}}
			x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: c.xdims, F32: c.x}
			if x.F32 == nil {
				x.F32 = make([]float32, x.NumElements())
				for i := range x.F32 {
					x.F32[i] = float32((i*37)%23)/4 - 2.5
				}
			}
			want, err := foldGraph(g, []*graph.Tensor{x})
			if err != nil {
				t.Fatalf("reference: %v", err)
			}
			got, err := be.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": x})
			if err != nil {
				t.Fatalf("kernels: %v", err)
			}
			g0 := got["out"]
			if w := want["out"]; w.DType != graph.Float32 && g0.DType == graph.Float32 {
				// a run-time integer output comes back as float32 values
				asInt := &graph.Tensor{Name: g0.Name, DType: w.DType, Dims: g0.Dims, I64: make([]int64, len(g0.F32))}
				for i, v := range g0.F32 {
					if float32(int64(v)) != v {
						t.Fatalf("out[%d] = %v, not an integer", i, v)
					}
					asInt.I64[i] = int64(v)
				}
				g0 = asInt
			}
			if err := Compare(g0, want["out"]); err != nil {
				t.Errorf("kernels vs reference: %v", err)
			}
			if c.kernel != "" {
				if err := programHas(g, c.xdims, c.kernel); err != nil {
					t.Error(err)
				}
			}
		})
	}
}

// programHas checks that g compiled for input shape xdims runs a kernel of
// the named operation (so the case ran the lowering, not the folder).
func programHas(g *graph.Graph, xdims []int64, kernel string) error {
	m, err := engine.Load(g, engine.Options{})
	if err != nil {
		return err
	}
	p, err := m.Compile(map[string][]int64{"x": xdims})
	if err != nil {
		return err
	}
	for _, k := range p.Kernels {
		if k.Op.String() == kernel {
			return nil
		}
	}
	return fmt.Errorf("the program has no %s kernel:\n%s", kernel, p)
}

// Softmax and LogSoftmax computed in place over their input's buffer (the
// input an intermediate value the kernel is the last to read), along the
// contiguous and a strided axis, agree with the reference: the log form
// once overwrote its input with exponentials before reading it again.
func TestSoftmaxInPlace(t *testing.T) {
	be := cpuBackend(t)
	for _, op := range []string{"Softmax", "LogSoftmax"} {
		for _, axis := range []int64{1, 0} {
			g := &graph.Graph{Name: "sm", Opset: 13,
				Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{3, 5}}},
				Outputs: []graph.ValueInfo{{Name: "y"}},
				Nodes: []graph.Node{{Name: "n", Op: "Neg", Inputs: []string{"x"}, Outputs: []string{"a"}},
					{Name: "s", Op: op, Inputs: []string{"a"}, Outputs: []string{"y"},
						Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: axis}}}}}
			x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{3, 5}, F32: make([]float32, 15)}
			for i := range x.F32 {
				x.F32[i] = float32(i%7)*0.3 - 1
			}
			m, err := engine.Load(g, engine.Options{})
			if err != nil {
				t.Fatal(err)
			}
			p, err := m.Compile(map[string][]int64{"x": {3, 5}})
			if err != nil {
				t.Fatal(err)
			}
			if k := p.Kernels[len(p.Kernels)-1]; k.Op != engine.OpSoftmax || k.Idempotent() {
				t.Fatalf("%s axis %d is not computed in place:\n%s", op, axis, p)
			}
			got, err := be.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": x})
			if err != nil {
				t.Fatal(err)
			}
			want, err := foldGraph(g, []*graph.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			if err := Compare(got["y"], want["y"]); err != nil {
				t.Errorf("%s axis %d in place: %v", op, axis, err)
			}
		}
	}
}

// A Pad of zeros on the spatial dimensions before a Conv folds into the
// Conv's pads (no COPY builds the padded tensor) and gives the unfused
// result; a Pad of another value, or on the channels, stays.
func TestPadFoldsIntoConv(t *testing.T) {
	be := cpuBackend(t)
	w := &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{4, 3, 3, 3}, F32: make([]float32, 108)}
	for i := range w.F32 {
		w.F32[i] = float32((i*7)%13)/6 - 1
	}
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 6, 5}, F32: make([]float32, 90)}
	for i := range x.F32 {
		x.F32[i] = float32((i*11)%17)/8 - 1
	}
	for _, c := range []struct {
		name  string
		pads  []int64
		value float32
		fold  bool
	}{
		{"spatial zeros", []int64{0, 0, 2, 1, 0, 0, 1, 3}, 0, true},
		{"a value of 1", []int64{0, 0, 1, 1, 0, 0, 1, 1}, 1, false},
		{"channels", []int64{0, 1, 1, 1, 0, 0, 1, 1}, 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			cw := w
			if c.pads[1] != 0 {
				cw = &graph.Tensor{Name: "w", DType: graph.Float32, Dims: []int64{4, 4, 3, 3}, F32: make([]float32, 144)}
				copy(cw.F32, w.F32)
			}
			g := &graph.Graph{Name: "padconv", Opset: 13,
				Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
				Outputs: []graph.ValueInfo{{Name: "y"}},
				Initializers: []*graph.Tensor{cw, {Name: "p", DType: graph.Int64, Dims: []int64{8}, I64: c.pads},
					{Name: "v", DType: graph.Float32, Dims: []int64{}, F32: []float32{c.value}}},
				Nodes: []graph.Node{
					{Name: "pad", Op: "Pad", Inputs: []string{"x", "p", "v"}, Outputs: []string{"xp"}},
					{Name: "conv", Op: "Conv", Inputs: []string{"xp", "w"}, Outputs: []string{"y"},
						Attrs: []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: []int64{1, 0, 0, 1}}}},
				}}
			p := compileGraph(t, g, engine.Options{}, map[string][]int64{"x": x.Dims})
			copies := 0
			for _, k := range p.Kernels {
				if k.Op == engine.OpCopy || k.Op == engine.OpGather {
					copies++
				}
			}
			if (copies == 0) != c.fold {
				t.Errorf("folded %v, want %v:\n%s", copies == 0, c.fold, p)
			}
			got, err := be.RunGraph(context.Background(), g, map[string]*graph.Tensor{"x": x})
			if err != nil {
				t.Fatal(err)
			}
			want, err := foldGraph(g, []*graph.Tensor{x})
			if err != nil {
				t.Fatal(err)
			}
			if err := Compare(got["y"], want["y"]); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestMatMulEpilogue checks what folds into a MatMul's GEMM, in the
// order the nodes compute it: a constant scalar Mul (attention's scale,
// the GEMM's alpha), then a bias Add, then a residual Add (a
// transformer's projection and skip connection). Each folded graph is one
// kernel with the bits of the nodes run apart (the same graph with the
// first node's output also a graph output, which keeps it apart). What
// would change the rounding stays apart: the residual before the bias, a
// Mul by a vector, a Mul after the bias.
func TestMatMulEpilogue(t *testing.T) {
	be := cpuBackend(t)
	const rows, k, cols = 8, 40, 40
	fill := func(name string, dims []int64, seed int) *graph.Tensor {
		n := 1
		for _, d := range dims {
			n *= int(d)
		}
		v := &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: make([]float32, n)}
		for i := range v.F32 {
			v.F32[i] = float32((i*seed)%29)/9 - 1.5
		}
		return v
	}
	x := fill("x", []int64{rows, k}, 7)
	w, b := fill("w", []int64{k, cols}, 11), fill("b", []int64{cols}, 5)
	s := &graph.Tensor{Name: "s", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.125}}
	node := func(op, a, b, out string) graph.Node {
		return graph.Node{Name: out, Op: op, Inputs: []string{a, b}, Outputs: []string{out}}
	}
	mm := node("MatMul", "x", "w", "ym")
	for _, c := range []struct {
		name    string
		nodes   []graph.Node // after mm; the last writes y
		kernels int
	}{
		{"bias then residual", []graph.Node{node("Add", "ym", "b", "yb"), node("Add", "x", "yb", "y")}, 1},
		{"residual then bias", []graph.Node{node("Add", "ym", "x", "yb"), node("Add", "b", "yb", "y")}, 2},
		{"scale, bias, residual", []graph.Node{node("Mul", "ym", "s", "ys"), node("Add", "ys", "b", "yb"), node("Add", "yb", "x", "y")}, 1},
		{"scale on the left", []graph.Node{node("Mul", "s", "ym", "y")}, 1},
		{"a vector's scale", []graph.Node{node("Mul", "ym", "b", "y")}, 2},
		{"bias, then scale", []graph.Node{node("Add", "ym", "b", "yb"), node("Mul", "yb", "s", "y")}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			build := func(outs ...string) *graph.Graph {
				g := &graph.Graph{Name: "epilogue", Opset: 13,
					Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
					Initializers: []*graph.Tensor{w, b, s},
					Nodes:        append([]graph.Node{mm}, c.nodes...)}
				for _, o := range outs {
					g.Outputs = append(g.Outputs, graph.ValueInfo{Name: o})
				}
				return g
			}
			g := build("y")
			p := compileGraph(t, g, engine.Options{Units: 2}, map[string][]int64{"x": x.Dims})
			if len(p.Kernels) != c.kernels {
				t.Errorf("%d kernels, want %d:\n%s", len(p.Kernels), c.kernels, p)
			}
			sameBitsApart(t, be, g, build("y", "ym"), x)
		})
	}
}

// compileGraph loads g with opts and compiles it for shapes, failing t on
// an error.
func compileGraph(t *testing.T, g *graph.Graph, opts engine.Options, shapes map[string][]int64) *engine.Program {
	t.Helper()
	m, err := engine.Load(g, opts)
	if err != nil {
		t.Fatal(err)
	}
	p, err := m.Compile(shapes)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestMatMulTransposeViews checks that a batched MatMul reads an operand a
// Transpose would have copied through strides (a transformer's attention:
// Q, K and V split into heads, K transposed), and writes its product
// through strides where a Transpose would have copied it (the heads
// merged back): the Transposes do not run, and the output is bit for bit
// the graph's with the Transposes' inputs and outputs also graph outputs
// (which keeps the copies). A permutation that leaves neither of an
// operand's last two dimensions one element apart, or moves the product's
// last dimension, keeps its copy.
func TestMatMulTransposeViews(t *testing.T) {
	be := cpuBackend(t)
	x := &graph.Tensor{Name: "x", DType: graph.Float32, Dims: []int64{1, 8, 24}, F32: make([]float32, 192)}
	for i := range x.F32 {
		x.F32[i] = float32((i*13)%31)/10 - 1.5
	}
	perm := func(p ...int64) []graph.Attr {
		return []graph.Attr{{Name: "perm", Kind: graph.AttrInts, Ints: p}}
	}
	for _, c := range []struct {
		name   string
		nodes  []graph.Node
		copies int // Transposes left as copy kernels
		views  []string
	}{
		{"attention", []graph.Node{
			{Name: "r", Op: "Reshape", Inputs: []string{"x", "heads"}, Outputs: []string{"xr"}},
			{Name: "tq", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"q"}, Attrs: perm(0, 2, 1, 3)},
			{Name: "tk", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"kt"}, Attrs: perm(0, 2, 3, 1)},
			{Name: "tv", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"v"}, Attrs: perm(0, 2, 1, 3)},
			{Name: "qk", Op: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"s"}},
			{Name: "sv", Op: "MatMul", Inputs: []string{"s", "v"}, Outputs: []string{"o"}},
			{Name: "to", Op: "Transpose", Inputs: []string{"o"}, Outputs: []string{"y"}, Attrs: perm(0, 2, 1, 3)},
		}, 0, []string{"q", "kt", "v", "o"}},
		{"the product's last dimension moved", []graph.Node{
			{Name: "r", Op: "Reshape", Inputs: []string{"x", "heads"}, Outputs: []string{"xr"}},
			{Name: "tq", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"q"}, Attrs: perm(0, 2, 1, 3)},
			{Name: "tk", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"kt"}, Attrs: perm(0, 2, 3, 1)},
			{Name: "qk", Op: "MatMul", Inputs: []string{"q", "kt"}, Outputs: []string{"o"}},
			{Name: "to", Op: "Transpose", Inputs: []string{"o"}, Outputs: []string{"y"}, Attrs: perm(0, 1, 3, 2)},
		}, 1, []string{"q", "kt", "o"}},
		{"no unit stride", []graph.Node{
			{Name: "r", Op: "Reshape", Inputs: []string{"x", "heads"}, Outputs: []string{"xr"}},
			// [1,8,4,6] -> [6,4,8,1] and [6,4,1,8]: each operand's
			// last two dimensions 24 and 192 elements apart, or 192
			// and 24
			{Name: "ta", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"a"}, Attrs: perm(3, 2, 1, 0)},
			{Name: "tb", Op: "Transpose", Inputs: []string{"xr"}, Outputs: []string{"b"}, Attrs: perm(3, 2, 0, 1)},
			{Name: "ab", Op: "MatMul", Inputs: []string{"a", "b"}, Outputs: []string{"y"}},
		}, 2, []string{"a", "b"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			build := func(outs ...string) *graph.Graph {
				g := &graph.Graph{Name: "views", Opset: 13,
					Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: x.Dims}},
					Initializers: []*graph.Tensor{{Name: "heads", DType: graph.Int64, Dims: []int64{4}, I64: []int64{1, 8, 4, 6}}},
					Nodes:        c.nodes}
				for _, o := range outs {
					g.Outputs = append(g.Outputs, graph.ValueInfo{Name: o})
				}
				return g
			}
			g := build("y")
			p := compileGraph(t, g, engine.Options{Units: 2}, map[string][]int64{"x": x.Dims})
			copies := 0
			for _, k := range p.Kernels {
				if k.Op == engine.OpCopy {
					copies++
				}
			}
			if copies != c.copies {
				t.Errorf("%d copies, want %d:\n%s", copies, c.copies, p)
			}
			sameBitsApart(t, be, g, build(append([]string{"y"}, c.views...)...), x)
		})
	}
}

// sameBitsApart runs g and apart (g with more outputs, which keeps the
// nodes that make them apart) on x through the cpu backend: output y must
// have the same bits both ways, and be the reference evaluator's within
// Compare's tolerance.
func sameBitsApart(t *testing.T, be *cpu.Backend, g, apart *graph.Graph, x *graph.Tensor) {
	t.Helper()
	in := map[string]*graph.Tensor{"x": x}
	got, err := be.RunGraph(context.Background(), g, in)
	if err != nil {
		t.Fatal(err)
	}
	sep, err := be.RunGraph(context.Background(), apart, in)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range sep["y"].F32 {
		if math.Float32bits(got["y"].F32[i]) != math.Float32bits(v) {
			t.Fatalf("[%d] = %v, %v with the nodes apart", i, got["y"].F32[i], v)
		}
	}
	want, err := foldGraph(g, []*graph.Tensor{x})
	if err != nil {
		t.Fatal(err)
	}
	if err := Compare(got["y"], want["y"]); err != nil {
		t.Error(err)
	}
}

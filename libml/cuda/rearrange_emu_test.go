package cuda

import (
	"context"
	"errors"
	"testing"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/zoo"
)

// The operators lowered onto COPY views, GATHER index maps and GEMM
// (DepthToSpace, Trilu, CumSum, Hardmax's body, GatherElements, Where on a
// constant condition, SpaceToDepth, Tile) and the fmod BINARY run on the
// emulator as on the cpu backend, chained in one model.
func TestRearrangeOpsEmu(t *testing.T) {
	b, _ := newEmuBackend(t, Options{}, libml.BackendConfig{}, false)
	ref := cpuBackend(t)
	ints := func(name string, dims []int64, v ...int64) *graph.Tensor {
		return &graph.Tensor{Name: name, DType: graph.Int64, Dims: dims, I64: v}
	}
	attr := func(name string, v int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInt, I: v} }
	idx := make([]int64, 2*8*8)
	for i := range idx {
		idx[i] = int64(i*5%8) - 4 // negative ones too
	}
	g := &graph.Graph{Name: "rearrange", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 8, 4, 4}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{ints("ax2", []int64{}, 2), ints("idx", []int64{1, 2, 8, 8}, idx...),
			{Name: "cond", DType: graph.Bool, Dims: []int64{8}, I64: []int64{1, 0, 1, 1, 0, 0, 1, 0}},
			{Name: "d", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.75}},
			ints("reps", []int64{4}, 1, 1, 1, 2)},
		Nodes: []graph.Node{
			{Name: "d2s", Op: "DepthToSpace", Inputs: []string{"x"}, Outputs: []string{"a"}, Attrs: []graph.Attr{attr("blocksize", 2)}},
			{Name: "tri", Op: "Trilu", Inputs: []string{"a"}, Outputs: []string{"b"}},
			{Name: "cs", Op: "CumSum", Inputs: []string{"b", "ax2"}, Outputs: []string{"c"}},
			{Name: "hm", Op: "Hardmax", Inputs: []string{"c"}, Outputs: []string{"h"}},
			{Name: "ge", Op: "GatherElements", Inputs: []string{"c", "idx"}, Outputs: []string{"e"}, Attrs: []graph.Attr{attr("axis", 3)}},
			{Name: "wh", Op: "Where", Inputs: []string{"cond", "e", "h"}, Outputs: []string{"w"}},
			{Name: "md", Op: "Mod", Inputs: []string{"w", "d"}, Outputs: []string{"m"}, Attrs: []graph.Attr{attr("fmod", 1)}},
			{Name: "s2d", Op: "SpaceToDepth", Inputs: []string{"m"}, Outputs: []string{"s"}, Attrs: []graph.Attr{attr("blocksize", 2)}},
			{Name: "tile", Op: "Tile", Inputs: []string{"s", "reps"}, Outputs: []string{"y"}},
		}}
	inst := load(t, b, "rearrange", g, 1)
	defer inst.Close()
	rinst := load(t, ref, "rearrange", g, 1)
	defer rinst.Close()
	in := zoo.Input(5, inst.InputSize())
	got, want := infer(t, b, inst, 1, in), infer(t, ref, rinst, 1, in)
	if len(got) != 8*4*8 {
		t.Fatalf("%d outputs, want %d", len(got), 8*4*8)
	}
	agree(t, "rearranging ops", got, want, tol)

	// the index-map operators, Pad's fill, a scatter with a constant
	// reduction and OneHot's comparisons
	str := func(name, v string) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrString, S: v} }
	nu := make([]float32, 20)
	for i := range nu {
		nu[i] = float32(i) - 9.5
	}
	g2 := &graph.Graph{Name: "indexmaps", Opset: 18,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 5}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{ints("p1", []int64{6}, 0, 1, -1, 0, 2, 3), ints("p2", []int64{6}, 0, 2, 1, 0, 1, 2),
			{Name: "v", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.5}},
			ints("ni", []int64{2, 2}, 0, 1, 0, -2), {Name: "nu", DType: graph.Float32, Dims: []int64{2, 10}, F32: nu},
			ints("gi", []int64{1, 2, 1}, 3, -1), {Name: "cond", DType: graph.Bool, Dims: []int64{4}, I64: []int64{1, 0, 1, 1}},
			ints("si", []int64{1, 1, 2}, 2, 0), {Name: "su", DType: graph.Float32, Dims: []int64{1, 1, 2}, F32: []float32{4, -3}},
			ints("depth", []int64{}, 3), {Name: "vals", DType: graph.Float32, Dims: []int64{2}, F32: []float32{-1, 1}}},
		Nodes: []graph.Node{
			{Name: "pc", Op: "Pad", Inputs: []string{"x", "p1", "v"}, Outputs: []string{"a"}},                                         // [1 6 7]
			{Name: "pr", Op: "Pad", Inputs: []string{"a", "p2"}, Outputs: []string{"b"}, Attrs: []graph.Attr{str("mode", "reflect")}}, // [1 9 10]
			{Name: "sn", Op: "ScatterND", Inputs: []string{"b", "ni", "nu"}, Outputs: []string{"c"}},
			{Name: "gn", Op: "GatherND", Inputs: []string{"c", "gi"}, Outputs: []string{"d"}, Attrs: []graph.Attr{attr("batch_dims", 1)}}, // [1 2 10]
			{Name: "cp", Op: "Compress", Inputs: []string{"d", "cond"}, Outputs: []string{"e"}, Attrs: []graph.Attr{attr("axis", 2)}},     // [1 2 3]
			{Name: "se", Op: "ScatterElements", Inputs: []string{"e", "si", "su"}, Outputs: []string{"f"},
				Attrs: []graph.Attr{attr("axis", 2), str("reduction", "mul")}},
			{Name: "fl", Op: "Floor", Inputs: []string{"f"}, Outputs: []string{"fl"}},
			{Name: "oh", Op: "OneHot", Inputs: []string{"fl", "depth", "vals"}, Outputs: []string{"y"}, Attrs: []graph.Attr{attr("axis", 1)}}, // [1 3 2 3]
		}}
	inst2 := load(t, b, "indexmaps", g2, 1)
	defer inst2.Close()
	rinst2 := load(t, ref, "indexmaps", g2, 1)
	defer rinst2.Close()
	in2 := zoo.Input(6, inst2.InputSize())
	for i := range in2 {
		in2[i] *= 4 // whole parts in and out of OneHot's range
	}
	got2, want2 := infer(t, b, inst2, 1, in2), infer(t, ref, rinst2, 1, in2)
	if len(got2) != 3*2*3 {
		t.Fatalf("%d outputs, want %d", len(got2), 3*2*3)
	}
	agree(t, "index-map ops", got2, want2, 0)

	// Einsum: B read transposed in place, A transposed, an operand copied
	// into order and the product permuted
	eq := func(e string) []graph.Attr { return []graph.Attr{{Name: "equation", Kind: graph.AttrString, S: e}} }
	kv := make([]float32, 2*3*6*5)
	for i := range kv {
		kv[i] = float32(i%11)/5 - 1
	}
	g3 := &graph.Graph{Name: "einsum", Opset: 17,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{2, 3, 4, 5}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "k", DType: graph.Float32, Dims: []int64{2, 3, 6, 5}, F32: kv}},
		Nodes: []graph.Node{
			{Name: "qk", Op: "Einsum", Inputs: []string{"x", "k"}, Outputs: []string{"s"}, Attrs: eq("bhid,bhjd->bhij")}, // [2 3 4 6]
			{Name: "sv", Op: "Einsum", Inputs: []string{"s", "k"}, Outputs: []string{"o"}, Attrs: eq("bhij,bhjd->bihd")}, // [2 4 3 5]
			{Name: "ta", Op: "Einsum", Inputs: []string{"o", "x"}, Outputs: []string{"y"}, Attrs: eq("bihd,bhjd->bhij")}, // [2 3 4 4]
		}}
	inst3 := load(t, b, "einsum", g3, 2)
	defer inst3.Close()
	rinst3 := load(t, ref, "einsum", g3, 2)
	defer rinst3.Close()
	in3 := zoo.Input(7, 2*inst3.InputSize())
	agree(t, "einsum", infer(t, b, inst3, 2, in3), infer(t, ref, rinst3, 2, in3), tol)

	// GridSample, bicubic with reflection and bilinear with zeros, the
	// grid computed at run time from the input
	gs := func(name, mode, pad string, in, out string) graph.Node {
		return graph.Node{Name: name, Op: "GridSample", Inputs: []string{"x", in}, Outputs: []string{out},
			Attrs: []graph.Attr{str("mode", mode), str("padding_mode", pad)}}
	}
	g5 := &graph.Graph{Name: "gridsample", Opset: 16,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 2, 4, 5}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "shape", DType: graph.Int64, Dims: []int64{4}, I64: []int64{1, 4, 5, 2}}},
		Nodes: []graph.Node{
			{Name: "t", Op: "Tanh", Inputs: []string{"x"}, Outputs: []string{"tx"}},
			{Name: "r", Op: "Reshape", Inputs: []string{"tx", "shape"}, Outputs: []string{"grid"}},
			gs("a", "bicubic", "reflection", "grid", "ya"),
			gs("b", "bilinear", "zeros", "grid", "yb"),
			{Name: "s", Op: "Add", Inputs: []string{"ya", "yb"}, Outputs: []string{"y"}},
		}}
	inst5 := load(t, b, "gridsample", g5, 1)
	defer inst5.Close()
	rinst5 := load(t, ref, "gridsample", g5, 1)
	defer rinst5.Close()
	in5 := zoo.Input(9, inst5.InputSize())
	for i := range in5 {
		in5[i] *= 3 // grid points past the borders too
	}
	agree(t, "gridsample", infer(t, b, inst5, 1, in5), infer(t, ref, rinst5, 1, in5), tol)

	// TopK: values plus indices (as float32), ties among them
	g6 := &graph.Graph{Name: "topk", Opset: 11,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 50}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{ints("k", []int64{1}, 7)},
		Nodes: []graph.Node{
			{Name: "fl", Op: "Floor", Inputs: []string{"x"}, Outputs: []string{"xf"}},
			{Name: "tk", Op: "TopK", Inputs: []string{"xf", "k"}, Outputs: []string{"v", "i"}},
			{Name: "c", Op: "Cast", Inputs: []string{"i"}, Outputs: []string{"fi"},
				Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}},
			{Name: "s", Op: "Mul", Inputs: []string{"v", "fi"}, Outputs: []string{"y"}},
		}}
	inst6 := load(t, b, "topk", g6, 2)
	defer inst6.Close()
	rinst6 := load(t, ref, "topk", g6, 2)
	defer rinst6.Close()
	in6 := zoo.Input(10, 2*inst6.InputSize())
	for i := range in6 {
		in6[i] *= 8 // Floor makes ties
	}
	agree(t, "topk", infer(t, b, inst6, 2, in6), infer(t, ref, rinst6, 2, in6), 0)

	// RoiAlign: rois computed at run time, avg and max
	g7 := &graph.Graph{Name: "roialign", Opset: 16,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 8, 9}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{
			{Name: "rois", DType: graph.Float32, Dims: []int64{3, 4}, F32: []float32{0, 0, 8, 7, 1.5, 2.25, 6, 5, -2, 3, 4, 9.5}},
			{Name: "half", DType: graph.Float32, Dims: []int64{}, F32: []float32{0.5}},
			ints("bi", []int64{3}, 0, 0, 0)},
		Nodes: []graph.Node{
			{Name: "rs", Op: "Mul", Inputs: []string{"rois", "half"}, Outputs: []string{"r0"}},
			{Name: "mx", Op: "ReduceMax", Inputs: []string{"x"}, Outputs: []string{"m"}, Attrs: []graph.Attr{attr("keepdims", 0)}},
			{Name: "sh", Op: "Add", Inputs: []string{"r0", "m"}, Outputs: []string{"r"}}, // run-time rois
			{Name: "avg", Op: "RoiAlign", Inputs: []string{"x", "r", "bi"}, Outputs: []string{"ya"},
				Attrs: []graph.Attr{attr("output_height", 3), attr("output_width", 2), {Name: "spatial_scale", Kind: graph.AttrFloat, F: 2}}},
			{Name: "max", Op: "RoiAlign", Inputs: []string{"x", "r", "bi"}, Outputs: []string{"yb"},
				Attrs: []graph.Attr{attr("output_height", 3), attr("output_width", 2), attr("sampling_ratio", 2), str("mode", "max")}},
			{Name: "y", Op: "Sub", Inputs: []string{"ya", "yb"}, Outputs: []string{"y"}},
		}}
	inst7 := load(t, b, "roialign", g7, 1)
	defer inst7.Close()
	rinst7 := load(t, ref, "roialign", g7, 1)
	defer rinst7.Close()
	in7 := zoo.Input(11, inst7.InputSize())
	agree(t, "roialign", infer(t, b, inst7, 1, in7), infer(t, ref, rinst7, 1, in7), tol)

	// Det: a matrix that needs a row swap, a singular one, 32 x 32 ones
	mask := make([]float32, 3*5*5)
	for i := range mask {
		mask[i] = 1
	}
	mask[0] = 0 // matrix 0: a zero pivot in the first column's first row
	for r := 0; r < 5; r++ {
		mask[25+r*5+2] = 0 // matrix 1: a zero column
	}
	g8 := &graph.Graph{Name: "det", Opset: 17,
		Inputs:       []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 3, 5, 5}}},
		Outputs:      []graph.ValueInfo{{Name: "y"}},
		Initializers: []*graph.Tensor{{Name: "mask", DType: graph.Float32, Dims: []int64{3, 5, 5}, F32: mask}},
		Nodes: []graph.Node{
			{Name: "m", Op: "Mul", Inputs: []string{"x", "mask"}, Outputs: []string{"xm"}},
			{Name: "det", Op: "Det", Inputs: []string{"xm"}, Outputs: []string{"y"}},
		}}
	g9 := &graph.Graph{Name: "det32", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{2, 32, 32}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes:   []graph.Node{{Name: "det", Op: "Det", Inputs: []string{"x"}, Outputs: []string{"y"}}}}
	for _, c := range []struct {
		g     *graph.Graph
		batch int
	}{{g8, 2}, {g9, 1}} {
		inst8 := load(t, b, c.g.Name, c.g, c.batch)
		rinst8 := load(t, ref, c.g.Name, c.g, c.batch)
		in8 := zoo.Input(12, c.batch*inst8.InputSize())
		got := infer(t, b, inst8, c.batch, in8)
		agree(t, c.g.Name, got, infer(t, ref, rinst8, c.batch, in8), tol)
		if c.g == g8 && (got[1] != 0 || got[4] != 0 || got[0] == 0) {
			t.Errorf("det: %v, want the second matrix of each item singular (0) and the first not", got)
		}
		inst8.Close()
		rinst8.Close()
	}

	// Det of 33 x 33 matrices: more than the kernel's shared memory holds.
	// The device refuses it at load as an operator use the engine lacks,
	// which is where the appliance's ONNX Runtime fallback takes over.
	g10 := &graph.Graph{Name: "det33", Opset: 17,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 33, 33}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes:   []graph.Node{{Name: "det", Op: "Det", Inputs: []string{"x"}, Outputs: []string{"y"}}}}
	inst10, err := b.LoadModel(context.Background(), "det33", g10)
	if err == nil {
		inst10.Close()
	}
	var ue *engine.UnsupportedError
	if !errors.As(err, &ue) || ue.Op != "Det" {
		t.Errorf("Det of 33x33 on cuda: %v, want an *engine.UnsupportedError for Det", err)
	}
	rinst10 := load(t, ref, "det33", g10, 1) // the cpu takes it
	rinst10.Close()

	// ArgMax at run time: its int64 indices come back as float32 values
	g4 := &graph.Graph{Name: "argmax", Opset: 13,
		Inputs:  []graph.ValueInfo{{Name: "x", DType: graph.Float32, Dims: []int64{1, 4, 6}}},
		Outputs: []graph.ValueInfo{{Name: "y"}},
		Nodes: []graph.Node{{Name: "am", Op: "ArgMax", Inputs: []string{"x"}, Outputs: []string{"y"},
			Attrs: []graph.Attr{attr("axis", 2), attr("keepdims", 0)}}}}
	inst4 := load(t, b, "argmax", g4, 2)
	defer inst4.Close()
	rinst4 := load(t, ref, "argmax", g4, 2)
	defer rinst4.Close()
	in4 := zoo.Input(8, 2*inst4.InputSize())
	got4, want4 := infer(t, b, inst4, 2, in4), infer(t, ref, rinst4, 2, in4)
	agree(t, "argmax", got4, want4, 0)
	for r := 0; r < 8; r++ {
		best := 0
		for i := 1; i < 6; i++ {
			if in4[r*6+i] > in4[r*6+best] {
				best = i
			}
		}
		if got4[r] != float32(best) {
			t.Errorf("row %d: ArgMax %v, want %d", r, got4[r], best)
		}
	}
}

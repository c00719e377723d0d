package conformance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/pack"
	"sluice/libml/zoo"
)

// kwsBindings are the zoo's streaming model's state bindings.
var kwsBindings = []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}}

// TestPackedStateORT runs the zoo's stateful model (an LSTM keyword
// spotter) packed into one input and one output, on the engine and on ONNX
// Runtime, step after step for a batch of flows, each carrying its own
// state from the packed output to the next packed input; ONNX Runtime runs
// the original model with its three inputs and outputs, as the oracle.
// Every step's result and state agree.
func TestPackedStateORT(t *testing.T) {
	ctx := context.Background()
	ob := ortBackend(t)
	opt := zoo.Options{Seed: 3, Features: 10, Hidden: 6, Classes: 4}
	orig := zoo.KWS(opt)
	data, err := onnx.Encode(orig)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := ob.NewSession(data)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	packed := zoo.KWS(opt)
	l, err := pack.Pack(packed, pack.Spec{State: kwsBindings})
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Data) != 1 || l.Data[0].Name != "input" || !slices.Equal(l.Results, []string{"logits"}) || l.DataElems != 10 || l.StateElems != 12 ||
		l.States[0].Axis != 1 || l.States[1].Offset != 6 {
		t.Fatalf("layout %+v", l)
	}
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer be.Deinit()
	inst, err := be.LoadModel(ctx, "kws", packed)
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close()
	// The packed model through ONNX Runtime too: the appliance's ort
	// backend and its fallback load it from these bytes.
	pdata, err := onnx.Encode(packed)
	if err != nil {
		t.Fatal(err)
	}
	oinst, err := ob.LoadModelBytes(ctx, "kws-packed", pdata, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer oinst.Close()
	const batch, steps = 3, 6
	for _, in := range []libml.Instance{inst, oinst} {
		if in.InputSize() != 22 || in.OutputSize() != 16 {
			t.Fatalf("packed instance takes %d and gives %d floats, want 22 and 16", in.InputSize(), in.OutputSize())
		}
	}
	if err := be.ConfigureBatch(inst, batch); err != nil {
		t.Fatal(err)
	}
	if err := ob.ConfigureBatch(oinst, batch); err != nil {
		t.Fatal(err)
	}
	h, c := make([]float32, batch*6), make([]float32, batch*6)
	rows := make([]float32, batch*22)
	for i := range batch { // flows start from different states
		for j := range 6 {
			h[i*6+j] = float32(i-j) * 0.1
		}
	}
	eng, ort := make([]float32, batch*16), make([]float32, batch*16)
	for step := range steps {
		x := zoo.Input(uint64(step), batch*10)
		for i := range batch {
			copy(rows[i*22:], x[i*10:(i+1)*10])
			copy(rows[i*22+10:], h[i*6:(i+1)*6])
			copy(rows[i*22+16:], c[i*6:(i+1)*6])
		}
		if err := be.InferBatch(ctx, inst, batch, rows, eng); err != nil {
			t.Fatal(err)
		}
		if err := ob.InferBatch(ctx, oinst, batch, rows, ort); err != nil {
			t.Fatal(err)
		}
		outs, err := sess.Run(ctx, []*graph.Tensor{
			{Name: "input", DType: graph.Float32, Dims: []int64{batch, 10}, F32: x},
			{Name: "h", DType: graph.Float32, Dims: []int64{1, batch, 6}, F32: h},
			{Name: "c", DType: graph.Float32, Dims: []int64{1, batch, 6}, F32: c},
		})
		if err != nil {
			t.Fatal(err)
		}
		for i := range batch {
			want := append(append(append([]float32{}, outs[0].F32[i*4:(i+1)*4]...), outs[1].F32[i*6:(i+1)*6]...), outs[2].F32[i*6:(i+1)*6]...)
			for what, got := range map[string][]float32{"engine": eng[i*16 : (i+1)*16], "packed in ONNX Runtime": ort[i*16 : (i+1)*16]} {
				if err := closeTo(got, want); err != nil {
					t.Fatalf("step %d, flow %d, %s: %v", step, i, what, err)
				}
			}
		}
		// the next step starts from the engine's states, the oracle's
		// from its own
		for i := range batch {
			copy(h[i*6:], eng[i*16+4:i*16+10])
			copy(c[i*6:], eng[i*16+10:i*16+16])
		}
	}
}

func closeTo(got, want []float32) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d values, want %d", len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i] - want[i])); d > 1e-5*(1+math.Abs(float64(want[i]))) {
			return fmt.Errorf("value %d: %v, want %v", i, got[i], want[i])
		}
	}
	return nil
}

// TestPackErrors: what does not fit the model is refused with the
// reason.
func TestPackErrors(t *testing.T) {
	for _, tc := range []struct {
		spec pack.Spec
		edit func(g *graph.Graph)
		want string
	}{
		{want: "3 data inputs [c h input] and 3 outputs [c_out h_out logits] beside its states, want one of each (or name them: inputs, outputs)"},
		{spec: pack.Spec{State: []pack.Binding{{Input: "x", Output: "h_out"}}}, want: `input "x": the model has no such input (inputs: [c h input])`},
		{spec: pack.Spec{State: []pack.Binding{{Input: "h", Output: "y"}}}, want: `output "y": the model has no such output`},
		{spec: pack.Spec{State: []pack.Binding{{Input: "h", Output: "h_out"}, {Input: "h", Output: "c_out"}}}, want: `input "h" is named twice`},
		{spec: pack.Spec{State: []pack.Binding{{Input: "h", Output: "h_out"}}}, want: "2 data inputs [c input] and 2 outputs [c_out logits]"},
		{spec: pack.Spec{Inputs: []string{"input", "h"}, State: kwsBindings}, want: `input "h" is named twice`},
		{spec: pack.Spec{Inputs: []string{"input"}, State: kwsBindings[:1]}, want: `the model's inputs [c] are neither data inputs nor states`},
		{spec: pack.Spec{State: kwsBindings}, edit: func(g *graph.Graph) { g.Inputs[1].DimParams = nil; g.Inputs[1].Dims = []int64{-1, -1, 6} },
			want: `state input "h" [-1 -1 6] []: cannot tell its batch dimension`},
		{spec: pack.Spec{State: kwsBindings}, edit: func(g *graph.Graph) { g.Inputs[0].Dims = []int64{-1, -1} }, want: "has a dynamic dimension"},
		{spec: pack.Spec{State: kwsBindings}, edit: func(g *graph.Graph) { g.Inputs[2].DType = graph.Int64 }, want: `state input "c" is int64, want float32`},
	} {
		g := zoo.KWS(zoo.Options{Features: 10, Hidden: 6, Classes: 4})
		if tc.edit != nil {
			tc.edit(g)
		}
		_, err := pack.Pack(g, tc.spec)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want %q", tc.spec, err, tc.want)
		}
	}
}

// TestPackedInputsORT: a model of three data inputs (two of them int64)
// and two outputs (one int64), packed with its inputs and outputs named in
// an order of their own, runs in ONNX Runtime as the original model does:
// the payload row holds x, then ids, then mask, as float32; the answer row
// out2 (cast to float32), then out1. The engine, which keeps no int64
// values at run time, refuses it as unsupported (so the appliance falls
// back to ONNX Runtime).
func TestPackedInputsORT(t *testing.T) {
	ctx := context.Background()
	ob := ortBackend(t)
	build := func() *graph.Graph {
		return &graph.Graph{Name: "multi", Opset: 13,
			Inputs: []graph.ValueInfo{
				{Name: "ids", DType: graph.Int64, Dims: []int64{-1, 4}, DimParams: []string{"batch", ""}},
				{Name: "x", DType: graph.Float32, Dims: []int64{-1, 3}, DimParams: []string{"batch", ""}},
				{Name: "mask", DType: graph.Int64, Dims: []int64{-1, 4}, DimParams: []string{"batch", ""}}},
			Outputs: []graph.ValueInfo{{Name: "out1", DType: graph.Float32, Dims: []int64{-1, 2}}, {Name: "out2", DType: graph.Int64, Dims: []int64{-1, 1}}},
			Initializers: []*graph.Tensor{{Name: "w", DType: graph.Float32, Dims: []int64{3, 2}, F32: []float32{0.5, -1, 2, 0.25, -0.75, 1.5}},
				{Name: "axes", DType: graph.Int64, Dims: []int64{1}, I64: []int64{1}}},
			Nodes: []graph.Node{
				{Name: "c1", Op: "Cast", Inputs: []string{"ids"}, Outputs: []string{"fids"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}},
				{Name: "c2", Op: "Cast", Inputs: []string{"mask"}, Outputs: []string{"fmask"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}},
				{Name: "mul", Op: "Mul", Inputs: []string{"fids", "fmask"}, Outputs: []string{"prod"}},
				{Name: "sum", Op: "ReduceSum", Inputs: []string{"prod", "axes"}, Outputs: []string{"s1"}},
				{Name: "mm", Op: "MatMul", Inputs: []string{"x", "w"}, Outputs: []string{"y"}},
				{Name: "add", Op: "Add", Inputs: []string{"y", "s1"}, Outputs: []string{"out1"}},
				{Name: "mx", Op: "ReduceMax", Inputs: []string{"prod"}, Outputs: []string{"m"}, Attrs: []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{1}}}},
				{Name: "c3", Op: "Cast", Inputs: []string{"m"}, Outputs: []string{"out2"}, Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Int64)}}},
			}}
	}
	data, err := onnx.Encode(build())
	if err != nil {
		t.Fatal(err)
	}
	sess, err := ob.NewSession(data)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	g := build()
	l, err := pack.Pack(g, pack.Spec{Inputs: []string{"x", "ids", "mask"}, Outputs: []string{"out2", "out1"}})
	if err != nil {
		t.Fatal(err)
	}
	if l.DataElems != 11 || !slices.Equal(l.DataShape, []int64{11}) || l.Data[1].Offset != 3 || l.Data[1].DType != graph.Int64 {
		t.Fatalf("layout %+v", l)
	}
	pdata, err := onnx.Encode(g)
	if err != nil {
		t.Fatal(err)
	}
	be := cpu.New()
	if err := be.Init(ctx, libml.BackendConfig{Units: 2}); err != nil {
		t.Fatal(err)
	}
	defer be.Deinit()
	const batch = 3
	ids := []int64{3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}
	mask := []int64{1, 1, 0, 1, 1, 0, 1, 1, 1, 1, 1, 0}
	x := zoo.Input(4, batch*3)
	outs, err := sess.Run(ctx, []*graph.Tensor{
		{Name: "ids", DType: graph.Int64, Dims: []int64{batch, 4}, I64: ids},
		{Name: "x", DType: graph.Float32, Dims: []int64{batch, 3}, F32: x},
		{Name: "mask", DType: graph.Int64, Dims: []int64{batch, 4}, I64: mask},
	})
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]float32, 0, batch*11)
	for r := range batch {
		rows = append(rows, x[r*3:(r+1)*3]...)
		for _, v := range ids[r*4 : (r+1)*4] {
			rows = append(rows, float32(v))
		}
		for _, v := range mask[r*4 : (r+1)*4] {
			rows = append(rows, float32(v))
		}
	}
	var ue *engine.UnsupportedError
	if _, err := be.LoadModel(ctx, "multi", g); !errors.As(err, &ue) || ue.Op != "Cast" {
		t.Fatalf("the engine on run-time int64 inputs: %v, want an UnsupportedError", err)
	}
	ortInst, err := ob.LoadModelBytes(ctx, "multi", pdata, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ortInst.Close()
	for _, c := range []struct {
		what string
		be   libml.Backend
		inst libml.Instance
	}{{"ONNX Runtime, packed", ob, ortInst}} {
		if c.inst.InputSize() != 11 || c.inst.OutputSize() != 3 {
			t.Fatalf("%s: %d in, %d out; want 11 and 3", c.what, c.inst.InputSize(), c.inst.OutputSize())
		}
		if err := c.be.ConfigureBatch(c.inst, batch); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, batch*3)
		if err := c.be.InferBatch(ctx, c.inst, batch, rows, got); err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		for r := range batch {
			want := []float32{float32(outs[1].I64[r]), outs[0].F32[2*r], outs[0].F32[2*r+1]}
			if err := closeTo(got[3*r:3*r+3], want); err != nil {
				t.Fatalf("%s, request %d: %v (got %v, want %v)", c.what, r, err, got[3*r:3*r+3], want)
			}
		}
	}
}

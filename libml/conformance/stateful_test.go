package conformance

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/onnx"
	"sluice/libml/stateful"
	"sluice/libml/zoo"
)

// kwsBindings are the zoo's streaming model's state bindings.
var kwsBindings = []stateful.Binding{{Input: "h", Output: "h_out"}, {Input: "c", Output: "c_out"}}

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
	l, err := stateful.Pack(packed, kwsBindings)
	if err != nil {
		t.Fatal(err)
	}
	if l.Data != "input" || l.Result != "logits" || l.DataElems != 10 || l.StateElems != 12 ||
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

// TestPackErrors: bindings that do not fit the model are refused with
// the reason.
func TestPackErrors(t *testing.T) {
	for _, tc := range []struct {
		binds []stateful.Binding
		edit  func(g *graph.Graph)
		want  string
	}{
		{binds: nil, want: "no state bindings"},
		{binds: []stateful.Binding{{Input: "x", Output: "h_out"}}, want: `state input "x": the model has no such data input`},
		{binds: []stateful.Binding{{Input: "h", Output: "y"}}, want: `state output "y": the model has no such output`},
		{binds: []stateful.Binding{{Input: "h", Output: "h_out"}, {Input: "h", Output: "c_out"}}, want: "bound twice"},
		{binds: []stateful.Binding{{Input: "h", Output: "h_out"}}, want: "2 data inputs [c input] and 2 outputs [c_out logits]"},
		{binds: kwsBindings, edit: func(g *graph.Graph) { g.Inputs[1].DimParams = nil; g.Inputs[1].Dims = []int64{-1, -1, 6} },
			want: `state input "h" [-1 -1 6] []: cannot tell its batch dimension`},
		{binds: kwsBindings, edit: func(g *graph.Graph) { g.Inputs[0].Dims = []int64{-1, -1} }, want: "has a dynamic dimension"},
		{binds: kwsBindings, edit: func(g *graph.Graph) { g.Inputs[2].DType = graph.Int64 }, want: `state input "c" is int64, want float32`},
	} {
		g := zoo.KWS(zoo.Options{Features: 10, Hidden: 6, Classes: 4})
		if tc.edit != nil {
			tc.edit(g)
		}
		_, err := stateful.Pack(g, tc.binds)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bindings %v: error %v, want %q", tc.binds, err, tc.want)
		}
	}
}

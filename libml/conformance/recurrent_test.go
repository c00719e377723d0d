package conformance

import (
	"context"
	"fmt"
	"testing"

	"sluice/libml/graph"
)

// recurrentCase is one RNN, GRU or LSTM configuration.
type recurrentCase struct {
	op         string
	dir        string
	layout     int64
	clip       float32
	lbr        bool // GRU linear_before_reset
	bias, init bool // B; initial_h (and initial_c)
	peep       bool // LSTM P
	acts       []string
	alpha      []float32
}

func (c recurrentCase) String() string {
	s := fmt.Sprintf("%s_%s_layout%d", c.op, c.dir, c.layout)
	if c.clip > 0 {
		s += "_clip"
	}
	if c.lbr {
		s += "_lbr"
	}
	if c.bias {
		s += "_bias"
	}
	if c.init {
		s += "_init"
	}
	if c.peep {
		s += "_peep"
	}
	for _, a := range c.acts {
		s += "_" + a
	}
	return s
}

// recurrentGraph is c as a one-node graph over X [seq 5, batch 3, input
// 4] (or [batch, seq, input]), hidden size 6, seeded weights as
// initializers, with the node's output out (0 Y, 1 Y_h, 2 Y_c) as the
// graph's output.
func recurrentGraph(c recurrentCase, out int) (*graph.Graph, *graph.Tensor) {
	const T, B, I, H = 5, 3, 4, 6
	gates := map[string]int64{"RNN": 1, "GRU": 3, "LSTM": 4}[c.op]
	D := int64(1)
	if c.dir == "bidirectional" {
		D = 2
	}
	c0 := c
	c0.layout = 0
	seed := uint64(len(c0.String())) // the same values in either layout
	w := func(name string, scale float32, dims ...int64) *graph.Tensor {
		n := int64(1)
		for _, d := range dims {
			n *= d
		}
		v := Deterministic(int(n), seed)
		seed++
		for i := range v {
			v[i] *= scale
		}
		return &graph.Tensor{Name: name, DType: graph.Float32, Dims: dims, F32: v}
	}
	xd := []int64{T, B, I}
	hd := []int64{D, B, H}
	yd := []int64{T, D, B, H}
	// layout 1 swaps the first two dimensions of X, the states and Y_h,
	// and moves Y's batch first: the data are generated in layout 0
	swap := func(t *graph.Tensor) *graph.Tensor {
		if c.layout == 1 {
			t = swap01(t)
		}
		return t
	}
	if c.layout == 1 {
		hd, yd = []int64{B, D, H}, []int64{B, T, D, H}
	}
	x := swap(w("X", 2, T, B, I))
	xd = x.Dims
	inits := []*graph.Tensor{w("W", 0.6, D, gates*H, I), w("R", 0.6, D, gates*H, H)}
	ins := []string{"X", "W", "R", "", "", "", "", ""}
	if c.bias {
		inits = append(inits, w("B", 0.5, D, 2*gates*H))
		ins[3] = "B"
	}
	if c.init {
		inits = append(inits, swap(w("h0", 1, D, B, H)))
		ins[5] = "h0"
		if c.op == "LSTM" {
			inits = append(inits, swap(w("c0", 1, D, B, H)))
			ins[6] = "c0"
		}
	}
	if c.peep {
		inits = append(inits, w("P", 0.5, D, 3*H))
		ins[7] = "P"
	}
	for len(ins) > 3 && ins[len(ins)-1] == "" {
		ins = ins[:len(ins)-1]
	}
	outs := []string{"Y", "Y_h", "Y_c"}[:out+1]
	for i := 0; i < out; i++ {
		outs[i] = ""
	}
	attrs := []graph.Attr{
		{Name: "hidden_size", Kind: graph.AttrInt, I: H},
		{Name: "direction", Kind: graph.AttrString, S: c.dir},
		{Name: "layout", Kind: graph.AttrInt, I: c.layout},
	}
	if c.clip > 0 {
		attrs = append(attrs, graph.Attr{Name: "clip", Kind: graph.AttrFloat, F: c.clip})
	}
	if c.lbr {
		attrs = append(attrs, graph.Attr{Name: "linear_before_reset", Kind: graph.AttrInt, I: 1})
	}
	if c.acts != nil {
		attrs = append(attrs, graph.Attr{Name: "activations", Kind: graph.AttrStrings, Strings: c.acts})
	}
	if c.alpha != nil {
		attrs = append(attrs, graph.Attr{Name: "activation_alpha", Kind: graph.AttrFloats, Floats: c.alpha})
	}
	od := yd
	if out > 0 {
		od = hd
	}
	g := &graph.Graph{
		Name:         c.String(),
		Opset:        14,
		Nodes:        []graph.Node{{Name: "rnn", Op: c.op, Inputs: ins, Outputs: outs, Attrs: attrs}},
		Inputs:       []graph.ValueInfo{{Name: "X", DType: graph.Float32, Dims: xd}},
		Outputs:      []graph.ValueInfo{{Name: outs[out], DType: graph.Float32, Dims: od}},
		Initializers: inits,
	}
	return g, x
}

// TestRecurrentORT runs RNN, GRU and LSTM in the configurations ONNX's
// node tests leave out (reverse and bidirectional, layout 1, clip, GRU's
// linear_before_reset, initial states, peepholes, other activations)
// through the cpu engine and through ONNX Runtime, every output: they
// must agree within 1e-4·(1+|ORT|).
func TestRecurrentORT(t *testing.T) {
	ob := ortBackend(t)
	cb := cpuBackend(t)
	var cases []recurrentCase
	for _, op := range []string{"RNN", "GRU", "LSTM"} {
		for _, dir := range []string{"forward", "reverse", "bidirectional"} {
			for _, layout := range []int64{0, 1} {
				cases = append(cases, recurrentCase{op: op, dir: dir, layout: layout, bias: true, init: layout == 1})
			}
		}
		cases = append(cases,
			recurrentCase{op: op, dir: "forward", clip: 0.7, bias: true, init: true},
			recurrentCase{op: op, dir: "bidirectional"},
		)
	}
	cases = append(cases,
		recurrentCase{op: "GRU", dir: "forward", lbr: true, bias: true, init: true},
		recurrentCase{op: "GRU", dir: "bidirectional", lbr: true, bias: true},
		recurrentCase{op: "GRU", dir: "forward", lbr: true},
		recurrentCase{op: "LSTM", dir: "bidirectional", bias: true, init: true, peep: true},
		recurrentCase{op: "LSTM", dir: "forward", peep: true},
		recurrentCase{op: "RNN", dir: "forward", bias: true, acts: []string{"Relu"}},
		recurrentCase{op: "GRU", dir: "forward", bias: true, init: true, acts: []string{"HardSigmoid", "LeakyRelu"}, alpha: []float32{0.3, 0.05}},
		recurrentCase{op: "LSTM", dir: "forward", bias: true, acts: []string{"Sigmoid", "Elu", "Softplus"}, alpha: []float32{0, 0.8}},
	)
	ctx := context.Background()
	for _, c := range cases {
		outs := 2
		if c.op == "LSTM" {
			outs = 3
		}
		for out := 0; out < outs; out++ {
			g, x := recurrentGraph(c, out)
			name := fmt.Sprintf("%s/%s", c, []string{"Y", "Y_h", "Y_c"}[out])
			want := &graph.Tensor{Name: g.Outputs[0].Name, DType: graph.Float32, Dims: g.Outputs[0].Dims}
			n := int64(1)
			for _, d := range want.Dims {
				n *= d
			}
			want.F32 = make([]float32, n)
			// ONNX Runtime has no layout 1: it runs the layout-0 graph,
			// whose output is then put in layout 1
			c0 := c
			c0.layout = 0
			g0, x0 := recurrentGraph(c0, out)
			want0 := &graph.Tensor{Name: want.Name, DType: graph.Float32, Dims: g0.Outputs[0].Dims, F32: want.F32}
			ref, err := runOnBackend(ctx, ob, name, g0, x0, want0)
			if err != nil {
				t.Fatalf("%s: ONNX Runtime: %v", name, err)
			}
			if c.layout == 1 {
				if out == 0 {
					ref = yLayout1(ref)
				} else {
					ref = swap01(ref)
				}
			}
			got, err := runOnBackend(ctx, cb, name, g, x, want)
			if err != nil {
				t.Errorf("%s: cpu engine: %v", name, err)
				continue
			}
			if err := Compare(got, ref); err != nil {
				t.Errorf("%s: cpu engine vs ONNX Runtime: %v", name, err)
			}
		}
	}
	t.Logf("%d configurations, every output, agree with ONNX Runtime", len(cases))
}

// swap01 swaps the first two dimensions of t.
func swap01(t *graph.Tensor) *graph.Tensor {
	d := t.Dims
	inner := int64(1)
	for _, v := range d[2:] {
		inner *= v
	}
	out := &graph.Tensor{Name: t.Name, DType: t.DType, Dims: append([]int64{d[1], d[0]}, d[2:]...), F32: make([]float32, len(t.F32))}
	for a := int64(0); a < d[0]; a++ {
		for b := int64(0); b < d[1]; b++ {
			copy(out.F32[(b*d[0]+a)*inner:(b*d[0]+a+1)*inner], t.F32[(a*d[1]+b)*inner:(a*d[1]+b+1)*inner])
		}
	}
	return out
}

// yLayout1 puts Y [seq, dirs, batch, hidden] in layout 1: [batch, seq,
// dirs, hidden].
func yLayout1(t *graph.Tensor) *graph.Tensor {
	T, D, B, H := t.Dims[0], t.Dims[1], t.Dims[2], t.Dims[3]
	out := &graph.Tensor{Name: t.Name, DType: t.DType, Dims: []int64{B, T, D, H}, F32: make([]float32, len(t.F32))}
	for ti := int64(0); ti < T; ti++ {
		for d := int64(0); d < D; d++ {
			for b := int64(0); b < B; b++ {
				copy(out.F32[((b*T+ti)*D+d)*H:((b*T+ti)*D+d+1)*H], t.F32[((ti*D+d)*B+b)*H:((ti*D+d)*B+b+1)*H])
			}
		}
	}
	return out
}

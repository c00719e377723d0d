// Package stateful turns a model with recurrent state (inputs that take
// the state a flow's previous request left, outputs that give the state
// its next request starts from, as an LSTM's h and c) into the form every
// backend serves: one input and one output per request. Pack rewrites the
// graph so that its one input is a row holding the request's data and
// then each state, and its one output a row holding the result and then
// each new state. The IF manager keeps each flow's state between its
// requests (ifmanager's stateful IFs) and fills and splits the rows; the
// kernels and every backend (cpu, cuda, ort, the scheduler) see an
// ordinary model.
package stateful

import (
	"fmt"
	"slices"

	"sluice/libml/graph"
)

// Binding pairs a state input with the output that feeds it: the value
// Output takes for a flow's request is what Input gets for the flow's next
// request.
type Binding struct {
	Input  string `toml:"input" json:"input"`
	Output string `toml:"output" json:"output"`
}

// Names of the packed model's input and output.
const (
	PackedInput  = "sluice_packed_input"
	PackedOutput = "sluice_packed_output"
)

// State is one bound state in the packed rows.
type State struct {
	Binding
	// Shape is the state's per-request shape (the batch dimension
	// removed); Axis is where the model keeps the batch dimension (1 for
	// an LSTM's [directions, batch, hidden]).
	Shape []int64
	Axis  int
	// Offset is where the state starts in the state block (float32
	// elements, after the data in an input row and after the result in an
	// output row); Elems its size.
	Offset, Elems int
}

// Layout says how the packed rows are laid out.
type Layout struct {
	// Data is the model's data input (the request's payload) and
	// DataShape its per-request shape; DataElems its element count, which
	// starts every input row.
	Data      string
	DataShape []int64
	DataElems int
	// Result is the output answered to the client; it starts every output
	// row (the instance's OutputSize less StateElems).
	Result string
	// States are the bound states, in the order of the bindings;
	// StateElems is their total size, the rest of each row.
	States     []State
	StateElems int
}

// Pack rewrites g (in place) so that the inputs and outputs binds names
// become part of one packed input and one packed output, and returns
// their layout. g must have exactly one data input beside the bound ones
// and one output beside the bound ones, all float32, the data input's
// batch dimension first and every other dimension fixed; a state's batch
// dimension is the one named like the data input's (its dim_param), or
// else its only dynamic one.
func Pack(g *graph.Graph, binds []Binding) (*Layout, error) {
	if len(binds) == 0 {
		return nil, fmt.Errorf("stateful: no state bindings")
	}
	inputs := map[string]int{}
	for i, in := range g.Inputs {
		if g.Initializer(in.Name) == nil {
			inputs[in.Name] = i
		}
	}
	outputs := map[string]int{}
	for i, o := range g.Outputs {
		outputs[o.Name] = i
	}
	bound := map[string]bool{}
	for _, b := range binds {
		if _, ok := inputs[b.Input]; !ok {
			return nil, fmt.Errorf("stateful: state input %q: the model has no such data input (inputs: %v)", b.Input, sortedKeys(inputs))
		}
		if _, ok := outputs[b.Output]; !ok {
			return nil, fmt.Errorf("stateful: state output %q: the model has no such output (outputs: %v)", b.Output, sortedKeys(outputs))
		}
		if bound["in:"+b.Input] || bound["out:"+b.Output] {
			return nil, fmt.Errorf("stateful: state %q → %q: an input or output is bound twice", b.Input, b.Output)
		}
		bound["in:"+b.Input], bound["out:"+b.Output] = true, true
	}
	var data, result []string
	for name := range inputs {
		if !bound["in:"+name] {
			data = append(data, name)
		}
	}
	for name := range outputs {
		if !bound["out:"+name] {
			result = append(result, name)
		}
	}
	slices.Sort(data)
	slices.Sort(result)
	if len(data) != 1 || len(result) != 1 {
		return nil, fmt.Errorf("stateful: the model has %d data inputs %v and %d outputs %v beside its states, want one of each", len(data), data, len(result), result)
	}
	for _, n := range []string{PackedInput, PackedOutput} {
		if producedOrRead(g, n) {
			return nil, fmt.Errorf("stateful: the model already uses the value name %q", n)
		}
	}
	din := g.Inputs[inputs[data[0]]]
	if din.DType != graph.Float32 {
		return nil, fmt.Errorf("stateful: data input %q is %v, want float32", din.Name, din.DType)
	}
	if len(din.Dims) < 1 {
		return nil, fmt.Errorf("stateful: data input %q has no batch dimension", din.Name)
	}
	l := &Layout{Data: din.Name, DataShape: slices.Clone(din.Dims[1:]), Result: result[0]}
	n, err := elems(din.Name, l.DataShape)
	if err != nil {
		return nil, err
	}
	l.DataElems = n
	batchParam := ""
	if len(din.DimParams) > 0 {
		batchParam = din.DimParams[0]
	}
	for _, b := range binds {
		vi := g.Inputs[inputs[b.Input]]
		if vi.DType != graph.Float32 {
			return nil, fmt.Errorf("stateful: state input %q is %v, want float32", vi.Name, vi.DType)
		}
		axis, err := batchAxis(vi, batchParam)
		if err != nil {
			return nil, err
		}
		shape := slices.Delete(slices.Clone(vi.Dims), axis, axis+1)
		k, err := elems(vi.Name, shape)
		if err != nil {
			return nil, err
		}
		if ov := g.Outputs[outputs[b.Output]]; ov.DType != graph.Float32 && ov.DType != graph.Undefined {
			return nil, fmt.Errorf("stateful: state output %q is %v, want float32", ov.Name, ov.DType)
		}
		l.States = append(l.States, State{Binding: b, Shape: shape, Axis: axis, Offset: l.StateElems, Elems: k})
		l.StateElems += k
	}
	l.rewrite(g, batchParam)
	return l, nil
}

// rewrite replaces g's data and state inputs by slices of the packed
// input, and its outputs by the packed output.
func (l *Layout) rewrite(g *graph.Graph, batchParam string) {
	p := &packer{g: g}
	var pre []graph.Node
	unpack := func(name string, off, n int, shape []int64, axis int) {
		sl := p.name("slice")
		pre = append(pre, p.slice(sl, off, off+n))
		if axis == 0 {
			pre = append(pre, p.reshape(sl, name, append([]int64{-1}, shape...)))
			return
		}
		rs := p.name("reshape")
		pre = append(pre, p.reshape(sl, rs, append([]int64{-1}, shape...)))
		// [N, s0, s1, ...] → the batch dimension at axis
		perm := make([]int64, len(shape)+1)
		for j := range perm {
			switch {
			case j < axis:
				perm[j] = int64(j + 1)
			case j == axis:
				perm[j] = 0
			default:
				perm[j] = int64(j)
			}
		}
		pre = append(pre, graph.Node{Name: p.name("transpose"), Op: "Transpose", Inputs: []string{rs}, Outputs: []string{name},
			Attrs: []graph.Attr{{Name: "perm", Kind: graph.AttrInts, Ints: perm}}})
	}
	unpack(l.Data, 0, l.DataElems, l.DataShape, 0)
	for _, s := range l.States {
		unpack(s.Input, l.DataElems+s.Offset, s.Elems, s.Shape, s.Axis)
	}
	var post []graph.Node
	flat := func(name string, axis, rank int) string {
		if axis != 0 {
			// the batch dimension first: [a, 0, .., a-1, a+1, ..]
			perm := []int64{int64(axis)}
			for j := 0; j < rank; j++ {
				if j != axis {
					perm = append(perm, int64(j))
				}
			}
			t := p.name("transpose")
			post = append(post, graph.Node{Name: t, Op: "Transpose", Inputs: []string{name}, Outputs: []string{t},
				Attrs: []graph.Attr{{Name: "perm", Kind: graph.AttrInts, Ints: perm}}})
			name = t
		}
		f := p.name("flatten")
		post = append(post, graph.Node{Name: f, Op: "Flatten", Inputs: []string{name}, Outputs: []string{f},
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}})
		return f
	}
	parts := []string{flat(l.Result, 0, 0)}
	for _, s := range l.States {
		parts = append(parts, flat(s.Output, s.Axis, len(s.Shape)+1))
	}
	post = append(post, graph.Node{Name: p.name("concat"), Op: "Concat", Inputs: parts, Outputs: []string{PackedOutput},
		Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}})

	g.Nodes = append(append(pre, g.Nodes...), post...)
	drop := map[string]bool{l.Data: true}
	for _, s := range l.States {
		drop[s.Input] = true
	}
	ins := []graph.ValueInfo{{Name: PackedInput, DType: graph.Float32, Dims: []int64{-1, int64(l.DataElems + l.StateElems)},
		DimParams: []string{batchParam, ""}}}
	for _, in := range g.Inputs {
		if !drop[in.Name] {
			ins = append(ins, in) // initializers listed as inputs
		}
	}
	g.Inputs = ins
	g.Outputs = []graph.ValueInfo{{Name: PackedOutput, DType: graph.Float32, Dims: []int64{-1, -1}, DimParams: []string{batchParam, ""}}}
}

// packer names the nodes and constants the rewrite adds.
type packer struct {
	g *graph.Graph
	n int
}

func (p *packer) name(kind string) string {
	p.n++
	return fmt.Sprintf("sluice_pack_%s_%d", kind, p.n)
}

func (p *packer) ints(v ...int64) string {
	name := p.name("const")
	p.g.Initializers = append(p.g.Initializers, &graph.Tensor{Name: name, DType: graph.Int64, Dims: []int64{int64(len(v))}, I64: v})
	return name
}

// slice is columns [from, to) of the packed input.
func (p *packer) slice(out string, from, to int) graph.Node {
	n := graph.Node{Name: out, Op: "Slice", Outputs: []string{out}}
	if p.g.Opset > 0 && p.g.Opset < 10 { // starts, ends and axes were attributes
		n.Inputs = []string{PackedInput}
		n.Attrs = []graph.Attr{{Name: "starts", Kind: graph.AttrInts, Ints: []int64{int64(from)}},
			{Name: "ends", Kind: graph.AttrInts, Ints: []int64{int64(to)}}, {Name: "axes", Kind: graph.AttrInts, Ints: []int64{1}}}
		return n
	}
	n.Inputs = []string{PackedInput, p.ints(int64(from)), p.ints(int64(to)), p.ints(1)}
	return n
}

func (p *packer) reshape(in, out string, shape []int64) graph.Node {
	return graph.Node{Name: out, Op: "Reshape", Inputs: []string{in, p.ints(shape...)}, Outputs: []string{out}}
}

// batchAxis finds where a state keeps the batch dimension: the dimension
// named batchParam, or else its only dynamic one.
func batchAxis(vi graph.ValueInfo, batchParam string) (int, error) {
	var named, dynamic []int
	for i, d := range vi.Dims {
		if batchParam != "" && i < len(vi.DimParams) && vi.DimParams[i] == batchParam {
			named = append(named, i)
		}
		if d < 0 {
			dynamic = append(dynamic, i)
		}
	}
	switch {
	case len(named) == 1:
		return named[0], nil
	case len(named) == 0 && len(dynamic) == 1:
		return dynamic[0], nil
	}
	return 0, fmt.Errorf("stateful: state input %q %v %v: cannot tell its batch dimension (name it %q as the data input does, or leave it the only dynamic one)",
		vi.Name, vi.Dims, vi.DimParams, batchParam)
}

// elems is the element count of a per-request shape whose dimensions must
// all be fixed.
func elems(name string, shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 1 {
			return 0, fmt.Errorf("stateful: %q: per-request shape %v has a dynamic dimension (fix it with input_shape or in the model)", name, shape)
		}
		n *= d
		if n > 1<<28 {
			return 0, fmt.Errorf("stateful: %q: per-request shape %v is too large", name, shape)
		}
	}
	return int(n), nil
}

func producedOrRead(g *graph.Graph, name string) bool {
	for _, n := range g.Nodes {
		if slices.Contains(n.Inputs, name) || slices.Contains(n.Outputs, name) {
			return true
		}
	}
	return g.Initializer(name) != nil
}

func sortedKeys(m map[string]int) []string {
	k := make([]string, 0, len(m))
	for n := range m {
		k = append(k, n)
	}
	slices.Sort(k)
	return k
}

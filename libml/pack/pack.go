// Package pack turns a model with several inputs and outputs into the
// form every backend serves: one input and one output per request. Pack
// rewrites the graph so that its one input is a row holding each data
// input's values (the request's payload) and then each recurrent state
// (inputs that take the state a flow's previous request left, as an
// LSTM's h and c), and its one output a row holding each result output
// and then each new state. The IF manager fills and splits the rows and
// keeps each flow's state between its requests (ifmanager's stateful
// IFs); the kernels and every backend (cpu, cuda, ort, the scheduler)
// see an ordinary model.
package pack

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

// Spec says what Pack packs.
type Spec struct {
	// Inputs are the data inputs, in the order their values follow each
	// other in a request's payload; empty: the model's one input beside
	// the states. A data input of another element type than float32
	// takes float32 values in the payload (integers exactly, up to 2^24)
	// and is cast to its type in the model.
	Inputs []string
	// Outputs are the outputs answered, in the order they follow each
	// other in the answer; empty: the model's one output beside the
	// states. Outputs of other types are cast to float32.
	Outputs []string
	// State binds recurrent state.
	State []Binding
}

// Names of the packed model's input and output.
const (
	PackedInput  = "sluice_packed_input"
	PackedOutput = "sluice_packed_output"
)

// Slot is one data input or state in the packed input row.
type Slot struct {
	Name string
	// Shape is the per-request shape (the batch dimension removed); Axis
	// is where the model keeps the batch dimension (1 for an LSTM's
	// state [directions, batch, hidden]); DType the model's element type.
	Shape []int64
	Axis  int
	DType graph.DType
	// Offset is where the values start (float32 elements, from the
	// start of the data or of the state block); Elems their count.
	Offset, Elems int
}

// State is one bound state in the packed rows.
type State struct {
	Binding
	Slot
}

// Layout says how the packed rows are laid out.
type Layout struct {
	// Data are the data inputs, in the payload's order; DataElems their
	// total, which starts every input row. DataShape is the payload's
	// shape: the one data input's per-request shape, or [DataElems] for
	// several.
	Data      []Slot
	DataElems int
	DataShape []int64
	// Results are the outputs answered, in order; they start every
	// output row (the instance's OutputSize less StateElems).
	Results []string
	// States are the bound states, in the order of the bindings;
	// StateElems is their total size, the rest of each row.
	States     []State
	StateElems int
}

// Pack rewrites g (in place) as s says and returns the layout of its
// packed input and output. Every data input's batch dimension is its
// first and its other dimensions are fixed; a state's batch dimension is
// the one named like the first data input's (its dim_param), or else its
// only dynamic one; states are float32.
func Pack(g *graph.Graph, s Spec) (*Layout, error) {
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
	used := map[string]bool{}
	use := func(kind, name string, have map[string]int) error {
		if _, ok := have[name]; !ok {
			return fmt.Errorf("pack: %s %q: the model has no such %s (%ss: %v)", kind, name, kind, kind, sortedKeys(have))
		}
		key := kind + ":" + name
		if used[key] {
			return fmt.Errorf("pack: %s %q is named twice", kind, name)
		}
		used[key] = true
		return nil
	}
	for _, b := range s.State {
		if err := use("input", b.Input, inputs); err != nil {
			return nil, err
		}
		if err := use("output", b.Output, outputs); err != nil {
			return nil, err
		}
	}
	for _, n := range s.Inputs {
		if err := use("input", n, inputs); err != nil {
			return nil, err
		}
	}
	for _, n := range s.Outputs {
		if err := use("output", n, outputs); err != nil {
			return nil, err
		}
	}
	data, results := s.Inputs, s.Outputs
	rest := func(kind string, have map[string]int) []string {
		var r []string
		for name := range have {
			if !used[kind+":"+name] {
				r = append(r, name)
			}
		}
		slices.Sort(r)
		return r
	}
	if left := rest("input", inputs); len(data) == 0 {
		data = left
	} else if len(left) > 0 {
		return nil, fmt.Errorf("pack: the model's inputs %v are neither data inputs nor states", left)
	}
	if len(results) == 0 {
		results = rest("output", outputs)
	}
	if len(data) != 1 && len(s.Inputs) == 0 || len(results) != 1 && len(s.Outputs) == 0 {
		return nil, fmt.Errorf("pack: the model has %d data inputs %v and %d outputs %v beside its states, want one of each (or name them: inputs, outputs)", len(data), data, len(results), results)
	}
	for _, n := range []string{PackedInput, PackedOutput} {
		if producedOrRead(g, n) {
			return nil, fmt.Errorf("pack: the model already uses the value name %q", n)
		}
	}
	l := &Layout{Results: results}
	batchParam := ""
	for i, name := range data {
		vi := g.Inputs[inputs[name]]
		if len(vi.Dims) < 1 {
			return nil, fmt.Errorf("pack: data input %q has no batch dimension", name)
		}
		if i == 0 && len(vi.DimParams) > 0 {
			batchParam = vi.DimParams[0]
		}
		switch vi.DType {
		case graph.Float32, graph.Float16, graph.Float64, graph.Int64, graph.Int32, graph.Int8, graph.Uint8, graph.Bool:
		default:
			return nil, fmt.Errorf("pack: data input %q is %v: a payload carries numbers", name, vi.DType)
		}
		shape := slices.Clone(vi.Dims[1:])
		n, err := elems(name, shape)
		if err != nil {
			return nil, err
		}
		l.Data = append(l.Data, Slot{Name: name, Shape: shape, DType: vi.DType, Offset: l.DataElems, Elems: n})
		l.DataElems += n
	}
	l.DataShape = []int64{int64(l.DataElems)}
	if len(l.Data) == 1 {
		l.DataShape = l.Data[0].Shape
	}
	for _, b := range s.State {
		vi := g.Inputs[inputs[b.Input]]
		if vi.DType != graph.Float32 {
			return nil, fmt.Errorf("pack: state input %q is %v, want float32", vi.Name, vi.DType)
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
			return nil, fmt.Errorf("pack: state output %q is %v, want float32", ov.Name, ov.DType)
		}
		l.States = append(l.States, State{Binding: b, Slot: Slot{Name: b.Input, Shape: shape, Axis: axis, DType: graph.Float32, Offset: l.StateElems, Elems: k}})
		l.StateElems += k
	}
	l.rewrite(g, batchParam, outputs)
	return l, nil
}

// rewrite replaces g's data and state inputs by slices of the packed
// input, and its outputs by the packed output.
func (l *Layout) rewrite(g *graph.Graph, batchParam string, outputs map[string]int) {
	p := &packer{g: g}
	var pre []graph.Node
	unpack := func(s Slot, off int) {
		sl := p.name("slice")
		pre = append(pre, p.slice(sl, off, off+s.Elems))
		cast := s.DType != graph.Float32
		// each step writes the input's own name if it is the last
		out := func(kind string, last bool) string {
			if last {
				return s.Name
			}
			return p.name(kind)
		}
		rs := out("reshape", s.Axis == 0 && !cast)
		pre = append(pre, p.reshape(sl, rs, append([]int64{-1}, s.Shape...)))
		if s.Axis != 0 {
			// [N, s0, s1, ...] → the batch dimension at axis
			perm := make([]int64, len(s.Shape)+1)
			for j := range perm {
				switch {
				case j < s.Axis:
					perm[j] = int64(j + 1)
				case j == s.Axis:
					perm[j] = 0
				default:
					perm[j] = int64(j)
				}
			}
			t := out("transpose", !cast)
			pre = append(pre, graph.Node{Name: p.name("transpose"), Op: "Transpose", Inputs: []string{rs}, Outputs: []string{t},
				Attrs: []graph.Attr{{Name: "perm", Kind: graph.AttrInts, Ints: perm}}})
			rs = t
		}
		if cast {
			pre = append(pre, graph.Node{Name: p.name("cast"), Op: "Cast", Inputs: []string{rs}, Outputs: []string{s.Name},
				Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(s.DType)}}})
		}
	}
	for _, s := range l.Data {
		unpack(s, s.Offset)
	}
	for _, s := range l.States {
		unpack(s.Slot, l.DataElems+s.Offset)
	}
	var post []graph.Node
	flat := func(name string, axis, rank int, dt graph.DType) string {
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
		if dt != graph.Float32 && dt != graph.Undefined {
			c := p.name("cast")
			post = append(post, graph.Node{Name: c, Op: "Cast", Inputs: []string{name}, Outputs: []string{c},
				Attrs: []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}})
			name = c
		}
		f := p.name("flatten")
		post = append(post, graph.Node{Name: f, Op: "Flatten", Inputs: []string{name}, Outputs: []string{f},
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}})
		return f
	}
	var parts []string
	for _, r := range l.Results {
		parts = append(parts, flat(r, 0, 0, g.Outputs[outputs[r]].DType))
	}
	for _, s := range l.States {
		parts = append(parts, flat(s.Output, s.Axis, len(s.Shape)+1, graph.Float32))
	}
	post = append(post, graph.Node{Name: p.name("concat"), Op: "Concat", Inputs: parts, Outputs: []string{PackedOutput},
		Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}})

	g.Nodes = append(append(pre, g.Nodes...), post...)
	drop := map[string]bool{}
	for _, s := range l.Data {
		drop[s.Name] = true
	}
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
	return 0, fmt.Errorf("pack: state input %q %v %v: cannot tell its batch dimension (name it %q as the data input does, or leave it the only dynamic one)",
		vi.Name, vi.Dims, vi.DimParams, batchParam)
}

// elems is the element count of a per-request shape whose dimensions must
// all be fixed.
func elems(name string, shape []int64) (int, error) {
	n := int64(1)
	for _, d := range shape {
		if d < 1 {
			return 0, fmt.Errorf("pack: %q: per-request shape %v has a dynamic dimension (fix it with input_shape or in the model)", name, shape)
		}
		n *= d
		if n > 1<<28 {
			return 0, fmt.Errorf("pack: %q: per-request shape %v is too large", name, shape)
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

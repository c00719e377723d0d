package engine

import (
	"fmt"
	"slices"

	"sluice/libml/graph"
)

// Scan (opset 9 and later): the engine unrolls it at load, like a Loop,
// when the length of its scan inputs is known there: each scan input is a
// constant, or a graph input whose declared shape gives the scanned axis a
// fixed size. Iteration t reads element t of each scan input (counted from
// the end for scan_input_directions = 1) with a Gather, runs the body
// inlined in a scope of its own on the state the iteration before left,
// and hands its scan output elements on; after the last, the states are
// the Scan's first outputs and each scan output is its elements stacked
// along its scan_output_axes (in reverse for scan_output_directions = 1).
// The batch axis of a run-time input (axis 0) is never scanned: the
// engine batches requests along it, and a request's output must not
// depend on the batch it runs in.

// scanArgs are a Scan node's attributes and its sequence length.
type scanArgs struct {
	body              *graph.Graph
	nState, nIn, nOut int
	inAxes, inDirs    []int64
	outAxes, outDirs  []int64
	length            int64
}

// scanInts reads an INTS attribute of count values (default 0s).
func scanInts(n *graph.Node, name string, count int) ([]int64, error) {
	v := make([]int64, count)
	a := n.Attr(name)
	if a == nil {
		return v, nil
	}
	if len(a.Ints) != count {
		return nil, fmt.Errorf("Scan %q: %s has %d values for %d", n.Name, name, len(a.Ints), count)
	}
	copy(v, a.Ints)
	return v, nil
}

// loadShapes infers the shapes of the values known so far at load, with
// batch as the size of every run-time input's axis 0: constants' shapes,
// declared graph inputs', and those of the run-time nodes loaded so far
// (the reference evaluator on shape-only inputs). A value it cannot infer
// (a symbolic dimension, a node that needs more) is absent. runtime
// reports the values computed at run time.
func (m *Model) loadShapes(batch int64) (shapes map[string][]int64, runtime map[string]bool) {
	shapes, runtime = map[string][]int64{}, map[string]bool{}
	vals := map[string]*Tensor{}
	for _, in := range m.inputs {
		runtime[in.Name] = true
		if len(in.Dims) == 0 {
			continue
		}
		d := append([]int64{batch}, in.Dims[1:]...)
		if slices.ContainsFunc(d, func(v int64) bool { return v < 1 }) {
			continue
		}
		vals[in.Name] = &Tensor{DType: in.DType, Shape: d}
	}
	for _, n := range m.nodes {
		ins := make([]*Tensor, len(n.Inputs))
		ok := true
		for j, name := range n.Inputs {
			if name == "" {
				continue
			}
			if c, known := m.consts[name]; known {
				ins[j] = c
			} else if v, known := vals[name]; known {
				ins[j] = v
			} else {
				ok = false
			}
		}
		for _, o := range n.Outputs {
			runtime[o] = true
		}
		if !ok {
			continue
		}
		outs, err := Eval(&n, m.opset, ins)
		if err != nil {
			continue
		}
		for j, o := range n.Outputs {
			if o != "" && j < len(outs) {
				vals[o] = &Tensor{DType: outs[j].DType, Shape: outs[j].Shape}
			}
		}
	}
	for name, t := range m.consts {
		shapes[name] = t.Shape
	}
	for name, t := range vals {
		shapes[name] = t.Shape
	}
	return shapes, runtime
}

// newScan checks Scan n and finds its length from the shapes of its scan
// inputs, inferred at load for two batch sizes (shapesAt: loadShapes): a
// length that depends on the batch is refused.
func newScan(n *graph.Node, opset int64, shapesAt func(batch int64) (map[string][]int64, map[string]bool)) (*scanArgs, error) {
	if opset < 9 {
		return nil, &UnsupportedError{Op: "Scan", Node: n.Name, Why: "opset 8's Scan (a batch axis and sequence_lens) is not unrolled; opset 9 and later are"}
	}
	a := n.Attr("body")
	if a == nil || a.G == nil {
		return nil, fmt.Errorf("Scan %q: no body", n.Name)
	}
	s := &scanArgs{body: a.G, nIn: int(n.AttrInt("num_scan_inputs", 0))}
	s.nState = len(n.Inputs) - s.nIn
	s.nOut = len(n.Outputs) - s.nState
	if s.nIn < 1 || s.nState < 0 || s.nOut < 0 || len(s.body.Inputs) != len(n.Inputs) || len(s.body.Outputs) != len(n.Outputs) {
		return nil, fmt.Errorf("Scan %q: %d inputs (%d scanned), %d outputs, a body of %d inputs and %d outputs",
			n.Name, len(n.Inputs), s.nIn, len(n.Outputs), len(s.body.Inputs), len(s.body.Outputs))
	}
	var err error
	if s.inAxes, err = scanInts(n, "scan_input_axes", s.nIn); err != nil {
		return nil, err
	}
	if s.inDirs, err = scanInts(n, "scan_input_directions", s.nIn); err != nil {
		return nil, err
	}
	if s.outAxes, err = scanInts(n, "scan_output_axes", s.nOut); err != nil {
		return nil, err
	}
	if s.outDirs, err = scanInts(n, "scan_output_directions", s.nOut); err != nil {
		return nil, err
	}
	s.length = -1
	shapes, runtime := shapesAt(1)
	other, _ := shapesAt(2)
	for j := range s.nIn {
		name := n.Inputs[s.nState+j]
		shape, ok := shapes[name]
		if !ok {
			return nil, &UnsupportedError{Op: "Scan", Node: n.Name,
				Why: fmt.Sprintf("the length of scan input %q is not known at load", name)}
		}
		axis, err := normAxis(s.inAxes[j], int64(len(shape)))
		if err != nil {
			return nil, fmt.Errorf("Scan %q: scan input %q: %w", n.Name, name, err)
		}
		s.inAxes[j] = axis
		if runtime[name] && axis == 0 {
			return nil, batchAxisUnsupported(n, fmt.Sprintf("it scans axis 0 of run-time input %q", name))
		}
		l := shape[axis]
		if o, ok := other[name]; !ok || len(o) != len(shape) || o[axis] != l {
			return nil, &UnsupportedError{Op: "Scan", Node: n.Name,
				Why: fmt.Sprintf("the length of scan input %q depends on the batch size", name)}
		}
		switch {
		case l < 1:
			return nil, &UnsupportedError{Op: "Scan", Node: n.Name,
				Why: fmt.Sprintf("scan input %q has no fixed length on axis %d (shape %v)", name, axis, shape)}
		case s.length >= 0 && l != s.length:
			return nil, fmt.Errorf("Scan %q: scan inputs of lengths %d and %d", n.Name, s.length, l)
		}
		s.length = l
	}
	if s.length > maxLoopIterations {
		return nil, fmt.Errorf("Scan %q: %d iterations, more than the %d the engine unrolls", n.Name, s.length, maxLoopIterations)
	}
	for k, d := range append(append([]int64{}, s.inDirs...), s.outDirs...) {
		if d != 0 && d != 1 {
			return nil, fmt.Errorf("Scan %q: direction %d of %d: want 0 (forward) or 1 (reverse)", n.Name, d, k)
		}
	}
	return s, nil
}

// unroll returns the nodes and initializers that compute Scan n's outputs
// (scope prefixes every value they define).
func (s *scanArgs) unroll(n *graph.Node, scope string, opset int64) ([]graph.Node, []*graph.Tensor) {
	var nodes []graph.Node
	var inits []*graph.Tensor
	state := append([]string(nil), n.Inputs[:s.nState]...)
	elems := make([][]string, s.nOut) // each scan output's element per iteration
	for t := range s.length {
		it := fmt.Sprintf("%s%d/", scope, t)
		bind := map[string]string{}
		for i, v := range state {
			bind[s.body.Inputs[i].Name] = v
		}
		for j := range s.nIn {
			idx := t
			if s.inDirs[j] == 1 {
				idx = s.length - 1 - t
			}
			iname, ename := fmt.Sprintf("%sidx%d", it, j), fmt.Sprintf("%sin%d", it, j)
			inits = append(inits, &graph.Tensor{Name: iname, DType: graph.Int64, Dims: []int64{}, I64: []int64{idx}})
			nodes = append(nodes, graph.Node{Name: ename, Op: "Gather", Inputs: []string{n.Inputs[s.nState+j], iname},
				Outputs: []string{ename}, Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: s.inAxes[j]}}})
			bind[s.body.Inputs[s.nState+j].Name] = ename
		}
		bn, bi, outs := inlineGraph(s.body, it, bind)
		nodes, inits = append(nodes, bn...), append(inits, bi...)
		state = outs[:s.nState]
		for k := range s.nOut {
			elems[k] = append(elems[k], outs[s.nState+k])
		}
	}
	for i, v := range state {
		if o := n.Outputs[i]; o != "" {
			nodes = append(nodes, graph.Node{Name: fmt.Sprintf("%sstate%d", scope, i), Op: "Identity",
				Inputs: []string{v}, Outputs: []string{o}})
		}
	}
	for k, vals := range elems {
		o := n.Outputs[s.nState+k]
		if o == "" {
			continue
		}
		// an element of rank r stacks along axis a of r+1 (negative: from
		// the end of r+1), as Unsqueeze and Concat count it
		axis := s.outAxes[k]
		axesName := fmt.Sprintf("%saxes%d", scope, k)
		if opset >= 13 {
			inits = append(inits, &graph.Tensor{Name: axesName, DType: graph.Int64, Dims: []int64{1}, I64: []int64{axis}})
		}
		stacked := make([]string, len(vals))
		for t, v := range vals {
			u := graph.Node{Name: fmt.Sprintf("%sout%d/%d", scope, k, t), Op: "Unsqueeze", Inputs: []string{v},
				Outputs: []string{fmt.Sprintf("%sout%d/%d", scope, k, t)}}
			if opset >= 13 {
				u.Inputs = append(u.Inputs, axesName)
			} else {
				u.Attrs = []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{axis}}}
			}
			nodes = append(nodes, u)
			pos := t
			if s.outDirs[k] == 1 {
				pos = len(vals) - 1 - t
			}
			stacked[pos] = u.Outputs[0]
		}
		nodes = append(nodes, graph.Node{Name: fmt.Sprintf("%sout%d", scope, k), Op: "Concat",
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: axis}}, Inputs: stacked, Outputs: []string{o}})
	}
	return nodes, inits
}

package engine

import (
	"fmt"

	"sluice/libml/graph"
)

// Loop: the engine unrolls a Loop whose iterations are known when the
// model is loaded: its trip count is a constant (or computed from
// constants), and the condition the body computes after each iteration
// folds to a constant too (the usual `cond_out = cond_in`, or a counter
// against a constant). Each iteration's body takes the Loop's place in
// turn, its values renamed into a scope of their own, fed the iteration
// number, the condition and the loop-carried values of the iteration
// before; after the last, the carried values are the Loop's outputs and
// each scan output is its iterations' values stacked on a new first axis.
// A trip count or a condition computed from the input at run time is
// refused (UnsupportedError, so that the appliance can fall back to ONNX
// Runtime).

// loopNextOp marks the end of one unrolled iteration in the load queue:
// the loader decides there whether another follows (loopState).
const loopNextOp = "sluice#LoopNext"

// maxLoopIterations bounds an unrolled Loop: a model cannot make the
// loader run (or grow) without end.
const maxLoopIterations = 4096

// loopState is an unrolled Loop between iterations.
type loopState struct {
	n       graph.Node
	body    *graph.Graph
	trips   int64 // the trip count (-1: none, the condition alone ends it)
	iter    int64 // iterations unrolled so far
	cond    string
	carried []string   // the loop-carried values after iteration iter
	scans   [][]string // each scan output's value per iteration
}

// newLoop checks Loop n's trip count and condition (consts: the values
// known at load) and returns its state before the first iteration.
func newLoop(n *graph.Node, consts map[string]*Tensor) (*loopState, error) {
	a := n.Attr("body")
	if a == nil || a.G == nil {
		return nil, fmt.Errorf("Loop %q: no body", n.Name)
	}
	b := a.G
	if len(n.Inputs) < 2 {
		return nil, fmt.Errorf("Loop %q: %d inputs, want the trip count and the condition", n.Name, len(n.Inputs))
	}
	nc := len(n.Inputs) - 2
	if len(b.Inputs) != nc+2 || len(b.Outputs) < nc+1 || len(n.Outputs) != len(b.Outputs)-1 {
		return nil, fmt.Errorf("Loop %q: %d carried values, a body of %d inputs and %d outputs, %d node outputs",
			n.Name, nc, len(b.Inputs), len(b.Outputs), len(n.Outputs))
	}
	s := &loopState{n: *n, body: b, trips: -1, carried: append([]string(nil), n.Inputs[2:]...),
		scans: make([][]string, len(b.Outputs)-1-nc)}
	known := func(i int, what string) (*Tensor, error) {
		if n.Inputs[i] == "" {
			return nil, nil
		}
		t, ok := consts[n.Inputs[i]]
		if !ok || t.Len() != 1 {
			return nil, &UnsupportedError{Op: "Loop", Node: n.Name,
				Why: "its " + what + " is computed from the input at run time (the engine unrolls a Loop whose iterations are known at load)"}
		}
		return t, nil
	}
	trips, err := known(0, "trip count")
	if err != nil {
		return nil, err
	}
	cond, err := known(1, "condition")
	if err != nil {
		return nil, err
	}
	if trips != nil {
		s.trips = int64(trips.at(0))
	}
	if trips == nil && cond == nil {
		return nil, fmt.Errorf("Loop %q: neither a trip count nor a condition: it would not end", n.Name)
	}
	if s.trips > maxLoopIterations {
		return nil, fmt.Errorf("Loop %q: %d iterations, more than the %d the engine unrolls", n.Name, s.trips, maxLoopIterations)
	}
	if s.trips == 0 || (cond != nil && cond.at(0) == 0) {
		s.trips = 0
	}
	return s, nil
}

// next returns the nodes and initializers of the loop's next iteration
// (scope names its values), ending with a loopNextOp marker called
// marker; the iteration number and the condition are the initializers
// scope+"iter" and scope+"cond".
func (s *loopState) next(scope, marker string) ([]graph.Node, []*graph.Tensor) {
	bind := map[string]string{
		s.body.Inputs[0].Name: scope + "iter",
		s.body.Inputs[1].Name: scope + "cond",
	}
	for j, v := range s.carried {
		bind[s.body.Inputs[2+j].Name] = v
	}
	nodes, inits, outs := inlineGraph(s.body, scope, bind)
	inits = append(inits,
		&graph.Tensor{Name: scope + "iter", DType: graph.Int64, Dims: []int64{}, I64: []int64{s.iter}},
		&graph.Tensor{Name: scope + "cond", DType: graph.Bool, Dims: []int64{}, I64: []int64{1}})
	nc := len(s.carried)
	s.cond = outs[0]
	s.carried = outs[1 : 1+nc]
	for k := range s.scans {
		s.scans[k] = append(s.scans[k], outs[1+nc+k])
	}
	s.iter++
	return append(nodes, graph.Node{Name: marker, Op: loopNextOp}), inits
}

// more reports, at the end of an iteration, whether another follows
// (consts: the values known at load).
func (s *loopState) more(consts map[string]*Tensor) (bool, error) {
	if s.trips >= 0 && s.iter >= s.trips {
		return false, nil
	}
	c, ok := consts[s.cond]
	if !ok || c.Len() != 1 {
		return false, &UnsupportedError{Op: "Loop", Node: s.n.Name,
			Why: "the condition its body computes depends on the input at run time (the engine unrolls a Loop whose iterations are known at load)"}
	}
	if c.at(0) == 0 {
		return false, nil
	}
	if s.iter >= maxLoopIterations {
		return false, fmt.Errorf("Loop %q: still running after %d iterations, the most the engine unrolls", s.n.Name, maxLoopIterations)
	}
	return true, nil
}

// finish returns the nodes that give the Loop's outputs their values: the
// last carried values, and each scan output's iterations stacked on a new
// first axis (Unsqueeze, then Concat). axes is a constant int64 [0]
// initializer for opsets that take Unsqueeze's axes as an input.
func (s *loopState) finish(scope string, opset int64) ([]graph.Node, []*graph.Tensor, error) {
	var nodes []graph.Node
	var inits []*graph.Tensor
	for j, v := range s.carried {
		if o := s.n.Outputs[j]; o != "" {
			nodes = append(nodes, graph.Node{Name: scope + "carried" + fmt.Sprint(j), Op: "Identity",
				Inputs: []string{v}, Outputs: []string{o}})
		}
	}
	axes := scope + "axes"
	if opset >= 13 {
		inits = append(inits, &graph.Tensor{Name: axes, DType: graph.Int64, Dims: []int64{1}, I64: []int64{0}})
	}
	for k, vals := range s.scans {
		o := s.n.Outputs[len(s.carried)+k]
		if o == "" {
			continue
		}
		if len(vals) == 0 {
			return nil, nil, fmt.Errorf("Loop %q: scan output %q of zero iterations", s.n.Name, o)
		}
		var stacked []string
		for i, v := range vals {
			u := graph.Node{Name: fmt.Sprintf("%sscan%d/%d", scope, k, i), Op: "Unsqueeze",
				Inputs: []string{v}, Outputs: []string{fmt.Sprintf("%sscan%d/%d", scope, k, i)}}
			if opset >= 13 {
				u.Inputs = append(u.Inputs, axes)
			} else {
				u.Attrs = []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{0}}}
			}
			nodes = append(nodes, u)
			stacked = append(stacked, u.Outputs[0])
		}
		nodes = append(nodes, graph.Node{Name: fmt.Sprintf("%sscan%d", scope, k), Op: "Concat",
			Attrs: []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 0}}, Inputs: stacked, Outputs: []string{o}})
	}
	return nodes, inits, nil
}

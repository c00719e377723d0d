package engine

import (
	"fmt"

	"sluice/libml/graph"
)

// If: an If whose condition is known when the model is loaded (a
// constant, or computed from constants only) gives way to the chosen
// branch's nodes, its values renamed into a scope of their own, and
// everything else proceeds as if the graph had been written without the
// If. Exported models often branch on what a fixed input shape makes
// constant.
//
// An If on a condition computed at run time runs both branches, each in a
// scope of its own, and a Select per output (a COPY that reads the
// condition) keeps the taken branch's value. That costs both branches,
// every time: a predictable cost, and a program that stays one straight
// sequence of kernels (so preemption, restore and padding apply as
// anywhere). The branches' outputs must have the same shapes; when they
// do not, the model is refused (UnsupportedError, so that the appliance
// can fall back to ONNX Runtime).

// ifBranch returns the branch an If takes for condition cond.
func ifBranch(n *graph.Node, cond *Tensor) (*graph.Graph, error) {
	if cond == nil || !cond.known() || cond.Len() != 1 {
		return nil, fmt.Errorf("If %q: the condition must be one known value", n.Name)
	}
	name := "else_branch"
	if cond.at(0) != 0 {
		name = "then_branch"
	}
	a := n.Attr(name)
	if a == nil || a.G == nil {
		return nil, fmt.Errorf("If %q: no %s", n.Name, name)
	}
	if len(a.G.Outputs) != len(n.Outputs) {
		return nil, fmt.Errorf("If %q: %s has %d outputs, the node %d", n.Name, name, len(a.G.Outputs), len(n.Outputs))
	}
	return a.G, nil
}

// inlineIf returns the nodes that replace If n taking branch b, and the
// branch's initializers, renamed (inlineGraph); an Identity per output
// gives the If's outputs their values.
func inlineIf(n *graph.Node, b *graph.Graph, scope string) ([]graph.Node, []*graph.Tensor) {
	nodes, inits, outs := inlineGraph(b, scope, nil)
	for i, o := range outs {
		if n.Outputs[i] == "" {
			continue
		}
		nodes = append(nodes, graph.Node{Name: scope + "out" + fmt.Sprint(i), Op: "Identity",
			Inputs: []string{o}, Outputs: []string{n.Outputs[i]}})
	}
	return nodes, inits
}

// inlineGraph returns sub-graph b's nodes and initializers renamed for
// the enclosing graph, and the names its outputs then have: every value
// b defines gets prefix scope; b's inputs read the values bind names;
// values it reads from the enclosing graph keep their names.
func inlineGraph(b *graph.Graph, scope string, bind map[string]string) ([]graph.Node, []*graph.Tensor, []string) {
	local := map[string]string{}
	for name, v := range bind {
		local[name] = v
	}
	for _, t := range b.Initializers {
		local[t.Name] = scope + t.Name
	}
	for _, bn := range b.Nodes {
		for _, o := range bn.Outputs {
			if o != "" {
				local[o] = scope + o
			}
		}
	}
	rename := func(v string) string {
		if r, ok := local[v]; ok {
			return r
		}
		return v
	}
	var nodes []graph.Node
	for _, bn := range b.Nodes {
		c := bn
		c.Name = scope + bn.Name
		// a nested sub-graph reads this one's values by their old names:
		// rename those (its own values keep theirs, renamed when it is
		// inlined in turn)
		c.Attrs = append([]graph.Attr(nil), bn.Attrs...)
		for i := range c.Attrs {
			if c.Attrs[i].G != nil {
				c.Attrs[i].G = renameFree(c.Attrs[i].G, rename)
			}
		}
		c.Inputs = make([]string, len(bn.Inputs))
		for i, v := range bn.Inputs {
			if v != "" {
				c.Inputs[i] = rename(v)
			}
		}
		c.Outputs = make([]string, len(bn.Outputs))
		for i, v := range bn.Outputs {
			if v != "" {
				c.Outputs[i] = rename(v)
			}
		}
		nodes = append(nodes, c)
	}
	outs := make([]string, len(b.Outputs))
	for i, o := range b.Outputs {
		outs[i] = rename(o.Name)
	}
	inits := make([]*graph.Tensor, len(b.Initializers))
	for i, t := range b.Initializers {
		c := *t
		c.Name = scope + t.Name
		inits[i] = &c
	}
	return nodes, inits, outs
}

// refIf evaluates an If whose branch reads only its own values (the
// reference evaluator has no enclosing graph).
func refIf(e *ev) ([]*Tensor, error) {
	b, err := ifBranch(e.n, e.in(0))
	if err != nil {
		return nil, err
	}
	vals := map[string]*Tensor{}
	for _, t := range b.Initializers {
		c, err := FromGraph(t)
		if err != nil {
			return nil, err
		}
		vals[t.Name] = c
	}
	for i := range b.Nodes {
		bn := &b.Nodes[i]
		ins := make([]*Tensor, len(bn.Inputs))
		for j, v := range bn.Inputs {
			if v == "" {
				continue
			}
			t, ok := vals[v]
			if !ok {
				return nil, fmt.Errorf("branch node %q reads %q from the enclosing graph: not evaluated here", bn.Name, v)
			}
			ins[j] = t
		}
		outs, err := Eval(bn, e.opset, ins)
		if err != nil {
			return nil, err
		}
		for j, o := range bn.Outputs {
			if o != "" && j < len(outs) {
				vals[o] = outs[j]
			}
		}
	}
	res := make([]*Tensor, len(b.Outputs))
	for i, o := range b.Outputs {
		t, ok := vals[o.Name]
		if !ok {
			return nil, fmt.Errorf("branch output %q is not computed", o.Name)
		}
		res[i] = t
	}
	return res, nil
}

// renameFree returns a copy of sub-graph g whose reads of values it does
// not define itself (its enclosing graphs') go through rename, in nested
// sub-graphs too.
func renameFree(g *graph.Graph, rename func(string) string) *graph.Graph {
	own := map[string]bool{}
	for _, t := range g.Initializers {
		own[t.Name] = true
	}
	for _, in := range g.Inputs {
		own[in.Name] = true
	}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			own[o] = true
		}
	}
	inner := func(v string) string {
		if own[v] {
			return v
		}
		return rename(v)
	}
	c := *g
	c.Nodes = make([]graph.Node, len(g.Nodes))
	for i, n := range g.Nodes {
		cn := n
		cn.Inputs = make([]string, len(n.Inputs))
		for j, v := range n.Inputs {
			if v != "" {
				cn.Inputs[j] = inner(v)
			}
		}
		cn.Attrs = append([]graph.Attr(nil), n.Attrs...)
		for j := range cn.Attrs {
			if cn.Attrs[j].G != nil {
				cn.Attrs[j].G = renameFree(cn.Attrs[j].G, inner)
			}
		}
		c.Nodes[i] = cn
	}
	c.Outputs = make([]graph.ValueInfo, len(g.Outputs))
	for i, o := range g.Outputs {
		c.Outputs[i] = o
		c.Outputs[i].Name = inner(o.Name)
	}
	return &c
}

// inlineIfBoth returns the nodes that replace If n on a run-time
// condition: both branches inlined (scope+"then/", scope+"else/") and a
// Select per output.
func inlineIfBoth(n *graph.Node, scope string) ([]graph.Node, []*graph.Tensor, error) {
	var nodes []graph.Node
	var inits []*graph.Tensor
	var outs [2][]string
	for i, name := range []string{"then_branch", "else_branch"} {
		a := n.Attr(name)
		if a == nil || a.G == nil {
			return nil, nil, fmt.Errorf("If %q: no %s", n.Name, name)
		}
		if len(a.G.Outputs) != len(n.Outputs) {
			return nil, nil, fmt.Errorf("If %q: %s has %d outputs, the node %d", n.Name, name, len(a.G.Outputs), len(n.Outputs))
		}
		bn, bi, bo := inlineGraph(a.G, scope+name[:4]+"/", nil)
		nodes = append(nodes, bn...)
		inits = append(inits, bi...)
		outs[i] = bo
	}
	for i, o := range n.Outputs {
		if o == "" {
			continue
		}
		nodes = append(nodes, graph.Node{Name: n.Name + "/select" + fmt.Sprint(i), Op: opSelect,
			Inputs: []string{n.Inputs[0], outs[0][i], outs[1][i]}, Outputs: []string{o}})
	}
	return nodes, inits, nil
}

// refSelect is Select(cond, a, b): a where cond holds, else b; a and b of
// one shape and type.
func refSelect(e *ev) ([]*Tensor, error) {
	c, a, b := e.in(0), e.in(1), e.in(2)
	if c == nil || a == nil || b == nil {
		return nil, fmt.Errorf("3 inputs needed")
	}
	if c.Len() != 1 {
		return nil, fmt.Errorf("the condition has %d values, want 1", c.Len())
	}
	if !eqShape(a.Shape, b.Shape) || a.IsFloat() != b.IsFloat() {
		return nil, &UnsupportedError{Op: "If", Node: e.n.Name,
			Why: fmt.Sprintf("its condition is computed at run time and its branches give %s%v and %s%v: the engine runs both branches, so they must agree",
				a.DType, a.Shape, b.DType, b.Shape)}
	}
	if !c.known() || !a.known() || !b.known() {
		return one(shapeOnly(a.DType, a.Shape))
	}
	if c.at(0) != 0 {
		return one(a)
	}
	return one(b)
}

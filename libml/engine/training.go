package engine

import (
	"fmt"

	"sluice/libml/graph"
)

// The optimisers of the ai.onnx.preview.training domain (Adagrad,
// Momentum, Adam): one update step of n tensors at once, written as their
// ONNX reference writes them, element by element, and rewritten by the
// loader into those elementwise operators (decomposedOps). The learning
// rate R may come at run time; the step count T is an int64 scalar and so
// a constant, as every integer tensor is in the engine: the terms that
// depend on it fold at load.

// trainingDomain is the domain of the training operators.
const trainingDomain = "ai.onnx.preview.training"

// optimizerGroups splits a training operator's inputs after R and T into
// its groups (X, G and then H, or V, or V and H), each of n tensors, and
// checks that the outputs are the updated X and the updated state, n
// each.
func optimizerGroups(n *graph.Node, c *bodyBuilder, groups int) (k int, in func(g, i int) string, ok bool) {
	rest := len(n.Inputs) - 2
	k = rest / groups
	if rest < groups || rest%groups != 0 {
		c.err = fmt.Errorf("%s %q: %d inputs after R and T, want %d groups of as many tensors", n.Op, n.Name, rest, groups)
		return 0, nil, false
	}
	if len(n.Outputs) != k*(groups-1) {
		c.err = fmt.Errorf("%s %q: %d outputs, want %d (the updated X and its state, %d tensors each)", n.Op, n.Name, len(n.Outputs), k*(groups-1), k)
		return 0, nil, false
	}
	for i, name := range n.Inputs {
		if name == "" {
			c.err = fmt.Errorf("%s %q: input %d omitted", n.Op, n.Name, i)
			return 0, nil, false
		}
	}
	return k, func(g, i int) string { return n.Inputs[2+g*k+i] }, true
}

// stepFloat is T as a float32 scalar.
func (c *bodyBuilder) stepFloat(t string) string {
	return c.tmp("Cast", []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}, t)
}

// regularized is norm * x + g, the gradient with its L2 term.
func (c *bodyBuilder) regularized(norm float32, x, g string) string {
	return c.tmp("Add", nil, c.tmp("Mul", nil, c.scalar(norm), x), g)
}

// ifStepped is a constant that is a when T > 0 and b otherwise.
func (c *bodyBuilder) ifStepped(t, a, b string) string {
	return c.tmp("Where", nil, c.tmp("Greater", nil, t, c.ints(0)), a, b)
}

// adagradBody: r = R / (1 + T decay_factor); per tensor, with
// g = norm_coefficient X + G: H' = H + g g, X' = X - r g / (sqrt(H') +
// epsilon). Outputs X'..., H'....
func adagradBody(n *graph.Node, c *bodyBuilder) {
	k, in, ok := optimizerGroups(n, c, 3)
	if !ok {
		return
	}
	norm, eps, decay := n.AttrFloat("norm_coefficient", 0), n.AttrFloat("epsilon", 1e-6), n.AttrFloat("decay_factor", 0)
	r := c.tmp("Div", nil, n.Inputs[0], c.tmp("Add", nil, c.scalar(1), c.tmp("Mul", nil, c.stepFloat(n.Inputs[1]), c.scalar(decay))))
	for i := 0; i < k; i++ {
		x := in(0, i)
		g := c.regularized(norm, x, in(1, i))
		h := c.named(n.Outputs[k+i], "Add", nil, in(2, i), c.tmp("Mul", nil, g, g))
		den := c.tmp("Add", nil, c.tmp("Sqrt", nil, h), c.scalar(eps))
		c.named(n.Outputs[i], "Sub", nil, x, c.tmp("Div", nil, c.tmp("Mul", nil, r, g), den))
	}
}

// momentumBody: per tensor, with g = norm_coefficient X + G and b = beta
// when T > 0 (1 on the first step): V' = alpha V + b g; X' = X - R V'
// (mode "standard") or X' = X - R (g + alpha V') ("nesterov"). Outputs
// X'..., V'....
func momentumBody(n *graph.Node, c *bodyBuilder) {
	k, in, ok := optimizerGroups(n, c, 3)
	if !ok {
		return
	}
	norm, alpha, beta := n.AttrFloat("norm_coefficient", 0), n.AttrFloat("alpha", 0), n.AttrFloat("beta", 0)
	mode := n.AttrString("mode", "standard")
	if mode != "standard" && mode != "nesterov" {
		c.err = fmt.Errorf("%s %q: mode %q, want standard or nesterov", n.Op, n.Name, mode)
		return
	}
	if n.Attr("alpha") == nil || n.Attr("beta") == nil {
		c.err = fmt.Errorf("%s %q: alpha and beta are required", n.Op, n.Name)
		return
	}
	b := c.ifStepped(n.Inputs[1], c.scalar(beta), c.scalar(1))
	a := c.scalar(alpha)
	for i := 0; i < k; i++ {
		x := in(0, i)
		g := c.regularized(norm, x, in(1, i))
		v := c.named(n.Outputs[k+i], "Add", nil, c.tmp("Mul", nil, a, in(2, i)), c.tmp("Mul", nil, b, g))
		step := v
		if mode == "nesterov" {
			step = c.tmp("Add", nil, g, c.tmp("Mul", nil, a, v))
		}
		c.named(n.Outputs[i], "Sub", nil, x, c.tmp("Mul", nil, n.Inputs[0], step))
	}
}

// adamBody: per tensor, with g = norm_coefficient X + G: V' = alpha V +
// (1 - alpha) g; H' = beta H + (1 - beta) g g; r = R sqrt(1 - beta^T) /
// (1 - alpha^T) when T > 0 (R on the first step); X' = (1 -
// norm_coefficient_post) (X - r V' / (sqrt(H') + epsilon)). Outputs
// X'..., V'..., H'....
func adamBody(n *graph.Node, c *bodyBuilder) {
	k, in, ok := optimizerGroups(n, c, 4)
	if !ok {
		return
	}
	norm, post := n.AttrFloat("norm_coefficient", 0), n.AttrFloat("norm_coefficient_post", 0)
	alpha, beta, eps := n.AttrFloat("alpha", 0.9), n.AttrFloat("beta", 0.999), n.AttrFloat("epsilon", 1e-6)
	t := c.stepFloat(n.Inputs[1])
	one := c.scalar(1)
	// the bias correction, a constant: sqrt(1 - beta^T) / (1 - alpha^T)
	corr := c.tmp("Div", nil,
		c.tmp("Sqrt", nil, c.tmp("Sub", nil, one, c.tmp("Pow", nil, c.scalar(beta), t))),
		c.tmp("Sub", nil, one, c.tmp("Pow", nil, c.scalar(alpha), t)))
	r := c.tmp("Mul", nil, n.Inputs[0], c.ifStepped(n.Inputs[1], corr, one))
	for i := 0; i < k; i++ {
		x := in(0, i)
		g := c.regularized(norm, x, in(1, i))
		v := c.named(n.Outputs[k+i], "Add", nil, c.tmp("Mul", nil, c.scalar(alpha), in(2, i)), c.tmp("Mul", nil, c.scalar(1-alpha), g))
		h := c.named(n.Outputs[2*k+i], "Add", nil, c.tmp("Mul", nil, c.scalar(beta), in(3, i)), c.tmp("Mul", nil, c.scalar(1-beta), c.tmp("Mul", nil, g, g)))
		den := c.tmp("Add", nil, c.tmp("Sqrt", nil, h), c.scalar(eps))
		xn := c.tmp("Sub", nil, x, c.tmp("Mul", nil, r, c.tmp("Div", nil, v, den)))
		c.named(n.Outputs[i], "Mul", nil, c.scalar(1-post), xn)
	}
}

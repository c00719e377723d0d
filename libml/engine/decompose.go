package engine

import (
	"fmt"
	"slices"
	"strings"

	"sluice/libml/graph"
)

// decomposition is an operator's body: inputs names the inputs it needs
// (nil: the one input), body appends the body's nodes for node n.
type decomposition struct {
	inputs []string
	body   func(n *graph.Node, c *bodyBuilder)
}

// Operators the loader rewrites into operators the engine runs, as ONNX
// defines several of them (a function body): the rewrite runs before
// constant folding, so a node on constants folds through its body, and
// every backend runs the body's kernels. Each body keeps float32
// throughout; the results are those of the body's operators, within the
// node tests' tolerance of ONNX's reference.
var decomposedOps = map[string]decomposition{
	// Softsign(x) = x / (1 + |x|)
	"Softsign": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		c.out(n, "Div", nil, x, c.tmp("Add", nil, c.tmp("Abs", nil, x), c.scalar(1)))
	}},
	// Selu(x) = gamma * (x > 0 ? x : alpha * (e^x - 1)) = gamma * Elu(x, alpha)
	"Selu": {nil, func(n *graph.Node, c *bodyBuilder) {
		alpha := n.AttrFloat("alpha", 1.67326319217681884765625)
		gamma := n.AttrFloat("gamma", 1.05070102214813232421875)
		elu := c.tmp("Elu", []graph.Attr{{Name: "alpha", Kind: graph.AttrFloat, F: alpha}}, n.Inputs[0])
		c.out(n, "Mul", nil, elu, c.scalar(gamma))
	}},
	// Celu(x) = max(0, x) + min(0, alpha * (e^(x/alpha) - 1)) = alpha * Elu(x / alpha, 1)
	"Celu": {nil, func(n *graph.Node, c *bodyBuilder) {
		a := c.scalar(n.AttrFloat("alpha", 1))
		elu := c.tmp("Elu", []graph.Attr{{Name: "alpha", Kind: graph.AttrFloat, F: 1}}, c.tmp("Div", nil, n.Inputs[0], a))
		c.out(n, "Mul", nil, elu, a)
	}},
	// Cosh(x) = (e^x + e^-x) / 2. (Sinh is not rewritten: e^x - e^-x
	// cancels near 0, where sinh(x) is about x.)
	"Cosh": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		pair := c.tmp("Add", nil, c.tmp("Exp", nil, x), c.tmp("Exp", nil, c.tmp("Neg", nil, x)))
		c.out(n, "Mul", nil, pair, c.scalar(0.5))
	}},
	// Tan(x) = sin(x) / cos(x)
	"Tan": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		c.out(n, "Div", nil, c.tmp("Sin", nil, x), c.tmp("Cos", nil, x))
	}},
	// ReduceL1(x) = ReduceSum(|x|), ReduceLogSum(x) = ln ReduceSum(x),
	// ReduceLogSumExp(x) = ln ReduceSum(e^x), over the node's axes (its
	// attribute or its second input) with its keepdims and
	// noop_with_empty_axes
	"ReduceL1": {nil, func(n *graph.Node, c *bodyBuilder) {
		attrs, ins := reduceArgs(n, c.tmp("Abs", nil, n.Inputs[0]), false)
		c.out(n, "ReduceSum", attrs, ins...)
	}},
	"ReduceLogSum": {nil, func(n *graph.Node, c *bodyBuilder) {
		c.out(n, "Log", nil, c.reduce(n, "ReduceSum", n.Inputs[0], false))
	}},
	// (ReduceLogSumExp subtracts the maximum first, m + ln ReduceSum(e^(x-m)),
	// so that large values do not overflow e^x)
	"ReduceLogSumExp": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		mKeep := c.reduce(n, "ReduceMax", x, true)
		sum := c.reduce(n, "ReduceSum", c.tmp("Exp", nil, c.tmp("Sub", nil, x, mKeep)), false)
		c.out(n, "Add", nil, c.tmp("Log", nil, sum), c.reduce(n, "ReduceMax", x, false))
	}},
	// InstanceNormalization(x, scale, B): each (n, c) plane normalised by
	// its own mean and variance, then scale[c] * . + B[c]; computed on x
	// seen as [N, C, L] (L the product of the spatial dimensions), so the
	// body does not depend on x's rank, and reshaped back to x's shape
	// (Shape folds per batch size at compile time).
	"InstanceNormalization": {[]string{"input", "scale", "B"}, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		eps := c.scalar(n.AttrFloat("epsilon", 1e-5))
		mean := func(v string) string {
			return c.tmp("ReduceMean", []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{2}},
				{Name: "keepdims", Kind: graph.AttrInt, I: 1}}, v)
		}
		perChannel := func(v string) string {
			return c.tmp("Unsqueeze", []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{1}}}, v)
		}
		x3 := c.tmp("Reshape", nil, x, c.ints(0, 0, -1))
		d := c.tmp("Sub", nil, x3, mean(x3))
		den := c.tmp("Sqrt", nil, c.tmp("Add", nil, mean(c.tmp("Mul", nil, d, d)), eps))
		y3 := c.tmp("Add", nil, c.tmp("Mul", nil, c.tmp("Div", nil, d, den), perChannel(n.Inputs[1])), perChannel(n.Inputs[2]))
		c.out(n, "Reshape", nil, y3, c.tmp("Shape", nil, x))
	}},
	// GroupNormalization(x) over num_groups (G) groups of channels: x seen
	// as [N, G, C/G, L] (L the product of the spatial dimensions; a C that
	// G does not divide fails that Reshape), each group less its mean,
	// over sqrt(its variance + epsilon), then scale and bias, per group
	// (opset 18's [G] inputs) or per channel (opset 21's [C]), and reshaped
	// back to x's shape. The shapes fold per batch size at compile time.
	"GroupNormalization": {[]string{"X", "scale", "bias"}, func(n *graph.Node, c *bodyBuilder) {
		G := n.AttrInt("num_groups", 0)
		if G < 1 {
			c.err = fmt.Errorf("GroupNormalization %q: num_groups %d, want at least 1", n.Name, G)
			return
		}
		x := n.Inputs[0]
		ints := func(name string, v ...int64) []graph.Attr {
			return []graph.Attr{{Name: name, Kind: graph.AttrInts, Ints: v}}
		}
		xc := c.tmp("Reshape", nil, x, c.ints(0, 0, -1))
		sh := c.tmp("Shape", nil, xc)
		dim := func(i int64) string { return c.tmp("Gather", nil, sh, c.ints(i)) }
		x4 := c.tmp("Reshape", nil, xc, c.tmp("Concat", []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 0}},
			dim(0), c.ints(G, -1), dim(2)))
		mean := func(v string) string {
			return c.tmp("ReduceMean", append(ints("axes", 2, 3), graph.Attr{Name: "keepdims", Kind: graph.AttrInt, I: 1}), v)
		}
		d := c.tmp("Sub", nil, x4, mean(x4))
		eps := c.scalar(n.AttrFloat("epsilon", 1e-5))
		norm := c.tmp("Div", nil, d, c.tmp("Sqrt", nil, c.tmp("Add", nil, mean(c.tmp("Mul", nil, d, d)), eps)))
		grouped := func(v string) string { // [G] or [C] as [G, 1 or C/G, 1]
			if c.opset < 21 {
				return c.tmp("Unsqueeze", ints("axes", 1, 2), v)
			}
			return c.tmp("Reshape", nil, v, c.ints(G, -1, 1))
		}
		y4 := c.tmp("Add", nil, c.tmp("Mul", nil, norm, grouped(n.Inputs[1])), grouped(n.Inputs[2]))
		c.out(n, "Reshape", nil, y4, c.tmp("Shape", nil, x))
	}},
	// MeanVarianceNormalization(x) = (x - E[x]) / (sqrt(E[(x - E[x])^2]) + 1e-9)
	// over axes (default [0, 2, 3]); ONNX's body takes the variance as
	// E[x^2] - E[x]^2, the two-pass form here does not cancel
	"MeanVarianceNormalization": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		axes := []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: n.AttrInts("axes", []int64{0, 2, 3})},
			{Name: "keepdims", Kind: graph.AttrInt, I: 1}}
		d := c.tmp("Sub", nil, x, c.tmp("ReduceMean", axes, x))
		std := c.tmp("Sqrt", nil, c.tmp("ReduceMean", axes, c.tmp("Mul", nil, d, d)))
		c.out(n, "Div", nil, d, c.tmp("Add", nil, std, c.scalar(1e-9)))
	}},
	// LRN(x) = x / (bias + alpha / size * sum of x^2 over the channels
	// c - floor((size-1)/2) .. c + ceil((size-1)/2))^beta: x^2 seen as
	// [N, 1, C, L] (L the product of the spatial dimensions), the window sum
	// an average pool of size x 1 counting the padding (so sum / size)
	"LRN": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		size := n.AttrInt("size", 0)
		sq := c.tmp("Unsqueeze", []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{1}}},
			c.tmp("Reshape", nil, c.tmp("Mul", nil, x, x), c.ints(0, 0, -1)))
		avg := c.tmp("AveragePool", []graph.Attr{
			{Name: "kernel_shape", Kind: graph.AttrInts, Ints: []int64{size, 1}},
			{Name: "pads", Kind: graph.AttrInts, Ints: []int64{(size - 1) / 2, 0, size / 2, 0}},
			{Name: "count_include_pad", Kind: graph.AttrInt, I: 1}}, sq)
		base := c.tmp("Add", nil, c.tmp("Mul", nil, avg, c.scalar(n.AttrFloat("alpha", 1e-4))), c.scalar(n.AttrFloat("bias", 1)))
		den := c.tmp("Pow", nil, base, c.scalar(n.AttrFloat("beta", 0.75)))
		c.out(n, "Div", nil, x, c.tmp("Reshape", nil, den, c.tmp("Shape", nil, x)))
	}},
	// Hardmax(x) is 1 at the first maximum along axis, 0 elsewhere: e = (x
	// == max) as 0/1, s its running sum along the axis, and 2e - s is 1
	// exactly at the first e = 1 (Relu clears the rest). Before opset 13,
	// x is seen as 2-D [prod(dims before axis), prod(the rest)].
	"Hardmax": {nil, func(n *graph.Node, c *bodyBuilder) {
		x, axis := n.Inputs[0], n.AttrInt("axis", -1)
		if c.opset < 13 {
			x, axis = c.tmp("Flatten", []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: n.AttrInt("axis", 1)}}, x), 1
		}
		m := c.tmp("ReduceMax", []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{axis}},
			{Name: "keepdims", Kind: graph.AttrInt, I: 1}}, x)
		e := c.tmp("Cast", []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}, c.tmp("Equal", nil, x, m))
		s := c.tmp("CumSum", nil, e, c.ints(axis))
		y := c.tmp("Sub", nil, c.tmp("Mul", nil, e, c.scalar(2)), s)
		if c.opset < 13 {
			y = c.tmp("Reshape", nil, c.tmp("Relu", nil, y), c.tmp("Shape", nil, n.Inputs[0]))
			c.out(n, "Identity", nil, y)
			return
		}
		c.out(n, "Relu", nil, y)
	}},
	// NegativeLogLikelihoodLoss(input [N, C, d...], target [N, d...],
	// weight [C]): -input[n, target[n, d], d] * weight[target], the
	// weight 0 where the target is ignore_index, then the reduction
	// (none, sum, or mean: the sum over the sum of the weights). The target
	// must be a constant (GatherElements' indices), as it is in a model
	// that scores fixed labels.
	"NegativeLogLikelihoodLoss": {[]string{"input", "target"}, func(n *graph.Node, c *bodyBuilder) {
		c.nllLoss(n, n.Inputs[0], 0)
	}},
	// SoftmaxCrossEntropyLoss(scores, labels, weights) is
	// NegativeLogLikelihoodLoss of LogSoftmax(scores) along axis 1, which
	// is also its optional second output
	"SoftmaxCrossEntropyLoss": {[]string{"scores", "labels"}, func(n *graph.Node, c *bodyBuilder) {
		x, lp := n.Inputs[0], ""
		if len(n.Outputs) > 1 && n.Outputs[1] != "" {
			lp = n.Outputs[1]
		}
		if c.opset >= 13 {
			lp = c.named(lp, "LogSoftmax", []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}, x)
		} else {
			// before opset 13 LogSoftmax flattens from its axis: the
			// explicit form, x - m - ln sum e^(x-m) over axis 1
			axes := []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{1}}, {Name: "keepdims", Kind: graph.AttrInt, I: 1}}
			d := c.tmp("Sub", nil, x, c.tmp("ReduceMax", axes, x))
			lp = c.named(lp, "Sub", nil, d, c.tmp("Log", nil, c.tmp("ReduceSum", axes, c.tmp("Exp", nil, d))))
		}
		c.nllLoss(n, lp, 0)
	}},
	// LpNormalization(x) = x / ||x||_p along axis (p 1 or 2), as ONNX
	// Runtime computes it: a zero norm gives 0/0
	"LpNormalization": {nil, func(n *graph.Node, c *bodyBuilder) {
		red := "ReduceL2"
		if n.AttrInt("p", 2) == 1 {
			red = "ReduceL1"
		}
		norm := c.tmp(red, []graph.Attr{{Name: "axes", Kind: graph.AttrInts, Ints: []int64{n.AttrInt("axis", -1)}},
			{Name: "keepdims", Kind: graph.AttrInt, I: 1}}, n.Inputs[0])
		c.out(n, "Div", nil, n.Inputs[0], norm)
	}},
	// LpPool(x) = (sum of |x|^p over each window)^(1/p): the window sums
	// an AveragePool counting the padding (whose |0|^p adds nothing)
	// times the window's size. ceil_mode windows (clipped) and dilations
	// are refused (UnsupportedError: ONNX Runtime serves the model).
	"LpPool": {nil, func(n *graph.Node, c *bodyBuilder) {
		k := n.AttrInts("kernel_shape", nil)
		dilated := slices.ContainsFunc(n.AttrInts("dilations", nil), func(d int64) bool { return d != 1 })
		if n.AttrInt("ceil_mode", 0) != 0 || dilated || len(k) == 0 {
			c.err = &UnsupportedError{Op: n.Op, Node: n.Name, Why: "ceil_mode, dilations or no kernel_shape (the engine sums windows with an average pool)"}
			return
		}
		p := n.AttrInt("p", 2)
		if p < 1 {
			c.err = fmt.Errorf("LpPool %q: p = %d, want at least 1", n.Name, p)
			return
		}
		x := n.Inputs[0]
		var xp string
		switch p {
		case 1:
			xp = c.tmp("Abs", nil, x)
		case 2:
			xp = c.tmp("Mul", nil, x, x)
		default:
			xp = c.tmp("Pow", nil, c.tmp("Abs", nil, x), c.scalar(float32(p)))
		}
		attrs := []graph.Attr{{Name: "count_include_pad", Kind: graph.AttrInt, I: 1}}
		for _, a := range n.Attrs {
			switch a.Name {
			case "kernel_shape", "strides", "pads", "auto_pad":
				attrs = append(attrs, a)
			}
		}
		size := int64(1)
		for _, v := range k {
			size *= v
		}
		sum := c.tmp("Mul", nil, c.tmp("AveragePool", attrs, xp), c.scalar(float32(size)))
		switch p {
		case 1:
			c.out(n, "Identity", nil, sum)
		case 2:
			c.out(n, "Sqrt", nil, sum)
		default:
			c.out(n, "Pow", nil, sum, c.scalar(1/float32(p)))
		}
	}},
	// Mish(x) = x * tanh(softplus(x))
	"Mish": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		c.out(n, "Mul", nil, x, c.tmp("Tanh", nil, c.tmp("Softplus", nil, x)))
	}},
	// Acosh(x) = ln(x + sqrt((x - 1)(x + 1))), x >= 1 (NaN below, as
	// ONNX's reference); x - 1 is exact near 1, where x^2 - 1 would cancel
	"Acosh": {nil, func(n *graph.Node, c *bodyBuilder) {
		x := n.Inputs[0]
		one := c.scalar(1)
		root := c.tmp("Sqrt", nil, c.tmp("Mul", nil, c.tmp("Sub", nil, x, one), c.tmp("Add", nil, x, one)))
		c.out(n, "Log", nil, c.tmp("Add", nil, x, root))
	}},
	// the training domain's optimisers (training.go)
	trainingDomain + ".Adagrad":  {[]string{"R", "T", "X", "G", "H"}, adagradBody},
	trainingDomain + ".Momentum": {[]string{"R", "T", "X", "G", "V"}, momentumBody},
	trainingDomain + ".Adam":     {[]string{"R", "T", "X", "G", "V", "H"}, adamBody},
}

// bodyBuilder collects a decomposed node's body: its nodes, named after
// the node, and the scalar constants they use. opset is the model's.
type bodyBuilder struct {
	opset  int64
	prefix string
	nodes  []graph.Node
	inits  []*graph.Tensor
	count  int
	err    error // a body that cannot be built for this node
}

// tmp appends a node of op over ins writing a new intermediate value,
// and returns that value's name.
func (c *bodyBuilder) tmp(op string, attrs []graph.Attr, ins ...string) string {
	c.count++
	v := fmt.Sprintf("%s%d", c.prefix, c.count)
	c.add(op, attrs, v, ins)
	return v
}

// out appends the body's last node: op over ins writing n's output.
func (c *bodyBuilder) out(n *graph.Node, op string, attrs []graph.Attr, ins ...string) {
	c.count++
	c.add(op, attrs, n.Outputs[0], ins)
}

func (c *bodyBuilder) add(op string, attrs []graph.Attr, out string, ins []string) {
	c.nodes = append(c.nodes, graph.Node{Name: fmt.Sprintf("%s%s%d", c.prefix, op, c.count), Op: op,
		Inputs: ins, Outputs: []string{out}, Attrs: attrs})
}

// named appends a node of op over ins writing value name (a new
// intermediate value when name is "") and returns the value's name.
func (c *bodyBuilder) named(name, op string, attrs []graph.Attr, ins ...string) string {
	if name == "" {
		return c.tmp(op, attrs, ins...)
	}
	c.count++
	c.add(op, attrs, name, ins)
	return name
}

// nllLoss appends NegativeLogLikelihoodLoss of log-probabilities lp with
// node n's target (input 1), optional weight (input 2), ignore_index and
// reduction, writing n's output out.
func (c *bodyBuilder) nllLoss(n *graph.Node, lp string, out int) {
	ints := func(name string, v ...int64) graph.Attr { return graph.Attr{Name: name, Kind: graph.AttrInts, Ints: v} }
	noKeep := graph.Attr{Name: "keepdims", Kind: graph.AttrInt, I: 0}
	t, w, mask := n.Inputs[1], "", ""
	if a := n.Attr("ignore_index"); a != nil {
		// an ignored target picks element 0 (any valid one) at weight 0
		mask = c.tmp("Equal", nil, t, c.ints(a.I))
		t = c.tmp("Where", nil, mask, c.ints(0), t)
	}
	picked := c.tmp("GatherElements", []graph.Attr{{Name: "axis", Kind: graph.AttrInt, I: 1}}, lp,
		c.tmp("Unsqueeze", []graph.Attr{ints("axes", 1)}, t))
	loss := c.tmp("Neg", nil, c.tmp("Squeeze", []graph.Attr{ints("axes", 1)}, picked))
	if len(n.Inputs) > 2 && n.Inputs[2] != "" {
		w = c.tmp("Gather", nil, n.Inputs[2], t)
	}
	if mask != "" {
		if w == "" {
			w = c.tmp("Cast", []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(graph.Float32)}}, c.tmp("Not", nil, mask))
		} else {
			w = c.tmp("Where", nil, mask, c.scalar(0), w)
		}
	}
	if w != "" {
		loss = c.tmp("Mul", nil, loss, w)
	}
	name := n.Outputs[out]
	switch n.AttrString("reduction", "mean") {
	case "none":
		c.named(name, "Identity", nil, loss)
	case "sum":
		c.named(name, "ReduceSum", []graph.Attr{noKeep}, loss)
	default: // mean
		if w == "" {
			c.named(name, "ReduceMean", []graph.Attr{noKeep}, loss)
		} else {
			c.named(name, "Div", nil, c.tmp("ReduceSum", []graph.Attr{noKeep}, loss), c.tmp("ReduceSum", []graph.Attr{noKeep}, w))
		}
	}
}

// scalar adds a float32 scalar constant and returns its name.
func (c *bodyBuilder) scalar(v float32) string {
	c.count++
	name := fmt.Sprintf("%sconst%d", c.prefix, c.count)
	c.inits = append(c.inits, &graph.Tensor{Name: name, DType: graph.Float32, F32: []float32{v}})
	return name
}

// ints adds an int64 vector constant and returns its name.
func (c *bodyBuilder) ints(v ...int64) string {
	c.count++
	name := fmt.Sprintf("%sconst%d", c.prefix, c.count)
	c.inits = append(c.inits, &graph.Tensor{Name: name, DType: graph.Int64, Dims: []int64{int64(len(v))}, I64: v})
	return name
}

// reduceArgs are the attributes and inputs of a reduction of x over
// reduction n's axes (its attribute or its second input: the engine reads
// either, whatever the opset), with n's noop_with_empty_axes and, unless
// keep forces keepdims, n's keepdims.
func reduceArgs(n *graph.Node, x string, keep bool) ([]graph.Attr, []string) {
	var attrs []graph.Attr
	for _, a := range n.Attrs {
		if a.Name == "axes" || a.Name == "noop_with_empty_axes" || (a.Name == "keepdims" && !keep) {
			attrs = append(attrs, a)
		}
	}
	if keep {
		attrs = append(attrs, graph.Attr{Name: "keepdims", Kind: graph.AttrInt, I: 1})
	}
	return attrs, append([]string{x}, n.Inputs[1:]...)
}

// reduce appends reduction op of x (see reduceArgs) and returns its
// output.
func (c *bodyBuilder) reduce(n *graph.Node, op, x string, keep bool) string {
	attrs, ins := reduceArgs(n, x, keep)
	return c.tmp(op, attrs, ins...)
}

// decompose returns the body of n when the loader rewrites its operator
// (decomposedOps), with the constants it adds; ok is false otherwise.
func decompose(n *graph.Node, opset int64) (nodes []graph.Node, inits []*graph.Tensor, ok bool, err error) {
	d, ok := decomposedOps[nodeOp(n)]
	if !ok {
		return nil, nil, false, nil
	}
	need, want := 1, "one input and one output"
	if k := len(d.inputs); k > 1 {
		need, want = k, "the "+strings.Join(d.inputs[:k-1], ", ")+" and "+d.inputs[k-1]
	}
	missing := len(n.Inputs) < need || len(n.Outputs) < 1 || n.Outputs[0] == ""
	for i := 0; i < need && !missing; i++ {
		missing = n.Inputs[i] == ""
	}
	if missing {
		return nil, nil, true, fmt.Errorf("%s %q: want %s", n.Op, n.Name, want)
	}
	c := &bodyBuilder{opset: opset, prefix: n.Name + "#" + n.Op + "/"}
	if n.Name == "" {
		c.prefix = n.Outputs[0] + "#" + n.Op + "/"
	}
	d.body(n, c)
	if c.err != nil {
		return nil, nil, true, c.err
	}
	return c.nodes, c.inits, true, nil
}

// evalDecomposed is Eval of a node the loader rewrites: its body, node by
// node, on the reference implementations.
func evalDecomposed(n *graph.Node, opset int64, ins []*Tensor) ([]*Tensor, error) {
	nodes, inits, _, err := decompose(n, opset)
	if err != nil {
		return nil, err
	}
	vals := map[string]*Tensor{}
	for i, name := range n.Inputs {
		if name != "" && i < len(ins) && ins[i] != nil {
			vals[name] = ins[i]
		}
	}
	for _, t := range inits {
		c, err := FromGraph(t)
		if err != nil {
			return nil, err
		}
		vals[t.Name] = c
	}
	for i := range nodes {
		b := &nodes[i]
		bin := make([]*Tensor, len(b.Inputs))
		for j, name := range b.Inputs {
			bin[j] = vals[name]
		}
		outs, err := Eval(b, opset, bin)
		if err != nil {
			return nil, err
		}
		for j, o := range b.Outputs {
			if j < len(outs) {
				vals[o] = outs[j]
			}
		}
	}
	out := make([]*Tensor, len(n.Outputs))
	for j, o := range n.Outputs {
		out[j] = vals[o]
	}
	return out, nil
}

package engine

import (
	"math"

	"sluice/libml/graph"
)

// QDQ fusion. A model quantised in the QDQ form (ONNX Runtime's default:
// QuantizeLinear / DequantizeLinear pairs around float operators) says
// "this convolution reads 8-bit x and w and its result is quantised"
// without an integer operator. The loader rewrites each
//
//	QuantizeLinear(Conv(DequantizeLinear(xq), DequantizeLinear(wq), DequantizeLinear(bq)))
//
// (and the same around MatMul, and with a Relu before the QuantizeLinear
// when the output's zero point is its type's lowest value, so that the
// clamp is the Relu) into QLinearConv / QLinearMatMul over xq and wq, as
// ONNX Runtime does: the integer kernels then run, with exact int32 sums,
// instead of float ones. The DequantizeLinear nodes stay for any other
// reader (and are pruned when there is none). A pattern whose scales or
// zero points are not constants, whose bias is not an int32 of scale
// x_scale * w_scale, or whose intermediate values have other readers is
// left as it is: it runs in float, as written.

// fuseQDQ returns g's nodes with the QDQ patterns fused; inits are g's
// initializers by name.
func fuseQDQ(g *graph.Graph, inits map[string]*graph.Tensor) []graph.Node {
	nodes := g.Nodes
	producer := map[string]int{}
	readers := map[string][]int{}
	for i, n := range nodes {
		for _, o := range n.Outputs {
			producer[o] = i
		}
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], i)
		}
	}
	for _, o := range g.Outputs {
		readers[o.Name] = append(readers[o.Name], -1)
	}
	// dq returns the DequantizeLinear producing v (and its inputs), or
	// ok = false; a per-axis one must be along axis
	dq := func(v string, axis int64) (xq, s, z string, ok bool) {
		i, found := producer[v]
		if !found || nodes[i].Op != "DequantizeLinear" || (nodes[i].Domain != "" && nodes[i].Domain != "ai.onnx") {
			return "", "", "", false
		}
		if in := nodes[i].Inputs; len(in) > 1 && inits[in[1]] != nil && inits[in[1]].NumElements() > 1 {
			a := nodes[i].AttrInt("axis", 1)
			if src := inits[in[0]]; src != nil && a < 0 {
				a += int64(len(src.Dims))
			}
			if a != axis {
				return "", "", "", false
			}
		}
		in := nodes[i].Inputs
		if len(in) < 2 || inits[in[1]] == nil || (len(in) > 2 && in[2] != "" && inits[in[2]] == nil) {
			return "", "", "", false
		}
		if len(in) > 2 {
			z = in[2]
		}
		return in[0], in[1], z, true
	}
	// only returns the single reader of v, or -1
	only := func(v string) int {
		if r := readers[v]; len(r) == 1 {
			return r[0]
		}
		return -1
	}
	drop := map[int]bool{}
	replace := map[int]graph.Node{}
	for i, n := range nodes {
		if (n.Op != "Conv" && n.Op != "MatMul") || len(n.Inputs) < 2 || len(n.Outputs) != 1 || n.Domain != "" {
			continue
		}
		waxis := int64(0) // per output channel
		if n.Op == "MatMul" {
			waxis = 1 // per column
		}
		xq, sx, zx, ok1 := dq(n.Inputs[0], -1)
		wq, sw, zw, ok2 := dq(n.Inputs[1], waxis)
		if !ok1 || !ok2 || inits[wq] == nil || inits[sx].NumElements() != 1 || (zx != "" && inits[zx].NumElements() != 1) {
			continue
		}
		if zx == "" || zw == "" {
			continue // the zero points fix the integer types
		}
		// the output: QuantizeLinear, or Relu then QuantizeLinear
		y, relu := n.Outputs[0], -1
		qi := only(y)
		if qi >= 0 && nodes[qi].Op == "Relu" {
			relu, qi = qi, only(nodes[qi].Outputs[0])
		}
		if qi < 0 || nodes[qi].Op != "QuantizeLinear" || len(nodes[qi].Inputs) < 3 {
			continue
		}
		q := nodes[qi]
		sy, zy := q.Inputs[1], q.Inputs[2]
		if inits[sy] == nil || inits[zy] == nil || inits[sy].NumElements() != 1 || inits[zy].NumElements() != 1 {
			continue
		}
		if relu >= 0 && !zeroIsLowest(inits[zy]) {
			continue
		}
		fused := graph.Node{Name: n.Name + "/qlinear", Outputs: []string{q.Outputs[0]},
			Inputs: []string{xq, sx, zx, wq, sw, zw, sy, zy}}
		switch n.Op {
		case "Conv":
			fused.Op, fused.Attrs = "QLinearConv", n.Attrs
			if len(n.Inputs) > 2 && n.Inputs[2] != "" {
				bq, sb, zb, ok := dq(n.Inputs[2], 0)
				if !ok || inits[bq] == nil || inits[bq].DType != graph.Int32 || (zb != "" && !allZero(inits[zb])) ||
					!biasScaleFits(inits[sb], inits[sx], inits[sw]) {
					continue
				}
				fused.Inputs = append(fused.Inputs, bq)
			}
		case "MatMul":
			if len(n.Inputs) != 2 {
				continue
			}
			fused.Op = "QLinearMatMul"
		}
		replace[i] = fused
		drop[qi] = true
		if relu >= 0 {
			drop[relu] = true
		}
	}
	if len(replace) == 0 {
		return nodes
	}
	out := make([]graph.Node, 0, len(nodes))
	for i, n := range nodes {
		switch {
		case drop[i]:
		case replace[i].Op != "":
			out = append(out, replace[i])
		default:
			out = append(out, n)
		}
	}
	return out
}

// zeroIsLowest reports whether zero point z is its type's lowest value
// (then quantising clamps at the real value 0: a Relu before it changes
// nothing).
func zeroIsLowest(z *graph.Tensor) bool {
	t, err := FromGraph(z)
	if err != nil || t.Len() != 1 {
		return false
	}
	lo, _, err := quantRange(t.DType)
	return err == nil && int64(t.at(0)) == lo
}

func allZero(t *graph.Tensor) bool {
	e, err := FromGraph(t)
	if err != nil {
		return false
	}
	for i := int64(0); i < e.Len(); i++ {
		if e.at(i) != 0 {
			return false
		}
	}
	return true
}

// biasScaleFits reports whether an int32 bias of scale sb is one
// QLinearConv adds to its sums: sb = sx * sw, channel by channel (to
// float32 rounding).
func biasScaleFits(sb, sx, sw *graph.Tensor) bool {
	b, err1 := FromGraph(sb)
	x, err2 := FromGraph(sx)
	w, err3 := FromGraph(sw)
	if err1 != nil || err2 != nil || err3 != nil || b.Len() != w.Len() && b.Len() != 1 {
		return false
	}
	for c := int64(0); c < max(b.Len(), w.Len()); c++ {
		wc := w.at(min(c, w.Len()-1))
		want := x.at(0) * wc
		if math.Abs(b.at(min(c, b.Len()-1))-want) > 1e-6*math.Abs(want) {
			return false
		}
	}
	return true
}

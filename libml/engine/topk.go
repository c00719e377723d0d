package engine

import (
	"fmt"
	"sort"

	"sluice/libml/graph"
)

// TopK: the k largest (or smallest) values along an axis, best first,
// ties to the lower index (sorted = 0 leaves the order to the
// implementation; this one always sorts), and their int64 indices. At run
// time two TOPK kernels, one per output, each selecting on its own
// (native/cpu/topk.c, native/cuda/topk.cu); the indices live as float32
// values, exact below 2^24.

// topKArgs reads TopK's k (input 1, or the attribute before opset 10),
// axis and largest for an input of shape xs.
func topKArgs(e *ev, xs []int64) (k, axis int64, largest bool, err error) {
	if e.opset < 10 {
		k = e.n.AttrInt("k", 0)
	} else {
		kt, err := e.indexIn(1, "k")
		if err != nil {
			return 0, 0, false, err
		}
		if kt.Len() != 1 {
			return 0, 0, false, fmt.Errorf("k has %d values, want one", kt.Len())
		}
		k = kt.ints()[0]
	}
	if axis, err = normAxis(e.n.AttrInt("axis", -1), int64(len(xs))); err != nil {
		return 0, 0, false, err
	}
	if k < 0 || k > xs[axis] {
		return 0, 0, false, fmt.Errorf("k %d for an axis of %d", k, xs[axis])
	}
	return k, axis, e.n.AttrInt("largest", 1) != 0, nil
}

func refTopK(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	k, axis, largest, err := topKArgs(e, x.Shape)
	if err != nil {
		return nil, err
	}
	oshape := append([]int64{}, x.Shape...)
	oshape[axis] = k
	if !x.known() {
		return []*Tensor{shapeOnly(x.DType, oshape), shapeOnly(graph.Int64, oshape)}, nil
	}
	outer, n, inner := numel(x.Shape[:axis]), x.Shape[axis], numel(x.Shape[axis+1:])
	vals, idx := make([]float64, numel(oshape)), NewInt(oshape, nil)
	order := make([]int64, n)
	for o := int64(0); o < outer; o++ {
		for i := int64(0); i < inner; i++ {
			at := func(j int64) float64 { return x.at((o*n+j)*inner + i) }
			for j := range order {
				order[j] = int64(j)
			}
			sort.SliceStable(order, func(a, b int) bool {
				if largest {
					return at(order[a]) > at(order[b])
				}
				return at(order[a]) < at(order[b])
			})
			for t := int64(0); t < k; t++ {
				vals[(o*k+t)*inner+i] = at(order[t])
				idx.I[(o*k+t)*inner+i] = order[t]
			}
		}
	}
	return []*Tensor{fromValues(x.DType, oshape, vals), idx}, nil
}

// lowerTopK emits a TOPK kernel for each output the graph reads.
func (c *compiler) lowerTopK(g *group) error {
	n := c.node(g)
	x, err := c.rtIn(n, 0)
	if err != nil {
		return err
	}
	k, axis, largest, err := topKArgs(c.evFor(n), x.t.Shape)
	if err != nil {
		return err
	}
	xs := x.t.Shape
	if xs[axis] > 1<<24 {
		return &UnsupportedError{Op: n.Op, Node: n.Name, Why: fmt.Sprintf("an axis of %d values: indices above 2^24 are not exact in float32", xs[axis])}
	}
	src, _ := c.operand(n.Inputs[0])
	for out := 0; out < 2 && out < len(n.Outputs); out++ {
		if n.Outputs[out] == "" {
			continue
		}
		dst, _, err := c.output(n.Outputs[out])
		if err != nil {
			return err
		}
		if k == 0 || numel(xs) == 0 {
			continue
		}
		d := c.draft(g, OpTopK)
		d.k.P[0], d.k.P[1], d.k.P[2], d.k.P[3] = numel(xs[:axis]), xs[axis], numel(xs[axis+1:]), k
		if largest {
			d.k.P[4] = 1
		}
		d.k.P[5] = int64(out)
		d.in[0], d.out = src, dst
		c.emit(d)
	}
	return nil
}

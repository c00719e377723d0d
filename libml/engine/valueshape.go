package engine

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"sluice/libml/graph"
)

// Operators whose output shapes depend on their input values (NonZero,
// Unique). The engine plans every buffer at load time, so it evaluates
// them there only (foldOnlyOps): on constants, or on values the folder
// derives from constants (masks of weights, index tables). A model that
// needs one on run-time values gets an UnsupportedError, and ONNX Runtime
// serves it when the profile allows the fallback.

// valueShapedIn returns input 0 of a value-shaped operator, or an
// UnsupportedError when it is computed at run time.
func valueShapedIn(e *ev) (*Tensor, error) {
	x := e.in(0)
	if x == nil {
		return nil, fmt.Errorf("input X missing")
	}
	if !x.known() {
		return nil, &UnsupportedError{Op: e.n.Op, Node: e.n.Name, Why: "the engine evaluates it at load only, on constants " +
			"(its output's shape depends on the values); here its input is computed at run time"}
	}
	return x, nil
}

// refNonZero is NonZero: the indices of x's non-zero elements, int64
// [rank, count], in row-major order (a scalar counts as rank 1).
func refNonZero(e *ev) ([]*Tensor, error) {
	x, err := valueShapedIn(e)
	if err != nil {
		return nil, err
	}
	shape := x.Shape
	if len(shape) == 0 {
		shape = []int64{1}
	}
	r, n := int64(len(shape)), x.Len()
	var hits []int64
	for i := range n {
		if x.at(i) != 0 {
			hits = append(hits, i)
		}
	}
	c := int64(len(hits))
	y := &Tensor{DType: graph.Int64, Shape: []int64{r, c}, I: make([]int64, r*c)}
	for j, i := range hits {
		for d := r - 1; d >= 0; d-- {
			y.I[d*c+int64(j)] = i % shape[d]
			i /= shape[d]
		}
	}
	return one(y)
}

// refUnique is Unique: the distinct elements of x (no axis: flattened) or
// distinct slices along axis, sorted ascending (sorted = 1, the default;
// slices compare element by element) or in order of first occurrence;
// with the index of each one's first occurrence, each input element's or
// slice's index in the result, and each one's count.
func refUnique(e *ev) ([]*Tensor, error) {
	x, err := valueShapedIn(e)
	if err != nil {
		return nil, err
	}
	shape, axis := []int64{x.Len()}, int64(0)
	a := e.n.Attr("axis")
	if a != nil {
		shape = x.Shape
		if axis, err = normAxis(a.I, int64(len(shape))); err != nil {
			return nil, err
		}
	}
	outer, dim := numel(shape[:axis]), shape[axis]
	inner := numel(shape[axis+1:])
	// slice s: elements (o, s, i) for o < outer, i < inner
	elem := func(s, k int64) float64 { return x.at((k/inner*dim+s)*inner + k%inner) }
	width := outer * inner
	compare := func(s, t int64) int {
		for k := range width {
			if c := cmp.Compare(elem(s, k), elem(t, k)); c != 0 {
				return c
			}
		}
		return 0
	}
	// first occurrences, in order, and every slice's unique index (a
	// slice's key: its values' bits, zeros and NaNs made one value each,
	// as compare has them)
	var firsts []int64
	inverse := make([]int64, dim)
	seen := map[string]int64{}
	key := make([]byte, 8*width)
	for s := range dim {
		for k := range width {
			v := elem(s, k)
			switch {
			case v == 0:
				v = 0
			case math.IsNaN(v):
				v = math.NaN()
			}
			binary.LittleEndian.PutUint64(key[8*k:], math.Float64bits(v))
		}
		u, ok := seen[string(key)]
		if !ok {
			u = int64(len(firsts))
			seen[string(key)] = u
			firsts = append(firsts, s)
		}
		inverse[s] = u
	}
	order := make([]int64, len(firsts)) // result position -> index in firsts
	for i := range order {
		order[i] = int64(i)
	}
	if e.n.AttrInt("sorted", 1) != 0 {
		slices.SortStableFunc(order, func(p, q int64) int { return compare(firsts[p], firsts[q]) })
	}
	rank := make([]int64, len(firsts)) // index in firsts -> result position
	for pos, f := range order {
		rank[f] = int64(pos)
	}
	u := int64(len(firsts))
	yShape := slices.Clone(shape)
	yShape[axis] = u
	y := &Tensor{DType: x.DType, Shape: yShape}
	if x.IsFloat() {
		y.F = make([]float32, outer*u*inner)
	} else {
		y.I = make([]int64, outer*u*inner)
	}
	idx := &Tensor{DType: graph.Int64, Shape: []int64{u}, I: make([]int64, u)}
	counts := &Tensor{DType: graph.Int64, Shape: []int64{u}, I: make([]int64, u)}
	for pos, f := range order {
		s := firsts[f]
		idx.I[pos] = s
		for k := range width {
			dst := (k/inner*u+int64(pos))*inner + k%inner
			src := (k/inner*dim+s)*inner + k%inner
			if y.F != nil {
				y.F[dst] = x.F[src]
			} else {
				y.I[dst] = x.I[src]
			}
		}
	}
	inv := &Tensor{DType: graph.Int64, Shape: []int64{dim}, I: make([]int64, dim)}
	for s, f := range inverse {
		inv.I[s] = rank[f]
		counts.I[rank[f]]++
	}
	return []*Tensor{y, idx, inv, counts}, nil
}

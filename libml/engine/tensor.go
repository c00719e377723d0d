package engine

import (
	"encoding/binary"
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Tensor is a dense tensor the compiler and the reference evaluator work
// with. Float types keep their values in F, every integer and boolean type
// in I (booleans as 0/1); DType keeps the ONNX type.
type Tensor struct {
	DType graph.DType
	Shape []int64
	F     []float32
	I     []int64
}

// IsFloat reports whether t holds floats.
func (t *Tensor) IsFloat() bool { return isFloatType(t.DType) }

func isFloatType(d graph.DType) bool {
	return d == graph.Float32 || d == graph.Float16 || d == graph.Float64
}

// Len is the number of elements.
func (t *Tensor) Len() int64 { return numel(t.Shape) }

// NewFloat makes a float32 tensor of shape holding data (nil: zeros).
func NewFloat(shape []int64, data []float32) *Tensor {
	if data == nil {
		data = make([]float32, numel(shape))
	}
	return &Tensor{DType: graph.Float32, Shape: append([]int64(nil), shape...), F: data}
}

// NewInt makes an int64 tensor of shape holding data.
func NewInt(shape []int64, data []int64) *Tensor {
	if data == nil {
		data = make([]int64, numel(shape))
	}
	return &Tensor{DType: graph.Int64, Shape: append([]int64(nil), shape...), I: data}
}

// FromGraph converts a graph constant. Float tensors share F32 with t.
func FromGraph(t *graph.Tensor) (*Tensor, error) {
	n := t.NumElements()
	out := &Tensor{DType: t.DType, Shape: append([]int64{}, t.Dims...)}
	switch {
	case t.DType == graph.Float32 && int64(len(t.F32)) == n:
		out.F = t.F32
		return out, nil
	case isFloatType(t.DType) && int64(len(t.F32)) == n:
		out.F = t.F32
		return out, nil
	case !isFloatType(t.DType) && int64(len(t.I64)) == n:
		out.I = t.I64
		return out, nil
	}
	raw := t.Raw
	switch t.DType {
	case graph.Float32:
		if int64(len(raw)) != 4*n {
			break
		}
		out.F = make([]float32, n)
		for i := range out.F {
			out.F[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		return out, nil
	case graph.Float64:
		if int64(len(raw)) != 8*n {
			break
		}
		out.F = make([]float32, n)
		for i := range out.F {
			out.F[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(raw[8*i:])))
		}
		return out, nil
	case graph.Float16:
		if int64(len(raw)) != 2*n {
			break
		}
		out.F = make([]float32, n)
		for i := range out.F {
			out.F[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
		}
		return out, nil
	case graph.Int64:
		if int64(len(raw)) != 8*n {
			break
		}
		out.I = make([]int64, n)
		for i := range out.I {
			out.I[i] = int64(binary.LittleEndian.Uint64(raw[8*i:]))
		}
		return out, nil
	case graph.Int32:
		if int64(len(raw)) != 4*n {
			break
		}
		out.I = make([]int64, n)
		for i := range out.I {
			out.I[i] = int64(int32(binary.LittleEndian.Uint32(raw[4*i:])))
		}
		return out, nil
	case graph.Int8:
		if int64(len(raw)) != n {
			break
		}
		out.I = make([]int64, n)
		for i := range out.I {
			out.I[i] = int64(int8(raw[i]))
		}
		return out, nil
	case graph.Uint8, graph.Bool:
		if int64(len(raw)) != n {
			break
		}
		out.I = make([]int64, n)
		for i := range out.I {
			out.I[i] = int64(raw[i])
		}
		return out, nil
	}
	if n == 0 {
		if isFloatType(t.DType) {
			out.F = []float32{}
		} else {
			out.I = []int64{}
		}
		return out, nil
	}
	return nil, fmt.Errorf("tensor %q: %s with %d elements: no matching data (f32 %d, i64 %d, raw %d bytes)",
		t.Name, t.DType, n, len(t.F32), len(t.I64), len(t.Raw))
}

// ToGraph converts t to a graph constant called name.
func (t *Tensor) ToGraph(name string) *graph.Tensor {
	g := &graph.Tensor{Name: name, DType: t.DType, Dims: append([]int64{}, t.Shape...)}
	if t.IsFloat() {
		g.DType = graph.Float32
		g.F32 = t.F
	} else {
		g.I64 = t.I
	}
	return g
}

func halfToFloat(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0 && mant == 0:
		return math.Float32frombits(sign)
	case exp == 0:
		f := float32(mant) / 1024 / 16384
		if sign != 0 {
			return -f
		}
		return f
	case exp == 31:
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	}
	return math.Float32frombits(sign | (exp+112)<<23 | mant<<13)
}

// Caps on tensors whose shape an operator takes from its inputs' values
// (Range, ConstantOfShape, Expand, Tile, OneHot, Resize's sizes, Pad's
// pads): a malformed model must fail with an error, not allocate the
// machine away. A tensor the folder computes may hold maxFoldedElems
// values; a run-time one (an arena buffer) maxRuntimeElems.
const (
	maxFoldedElems  = 1 << 26
	maxRuntimeElems = 1 << 31
)

// maxFoldWork bounds the basic steps (comparisons, multiply-adds) of an
// operator the folder evaluates whose work grows faster than its output
// (Conv, ConvTranspose, Gemm, MatMul, NonMaxSuppression, TfIdfVectorizer,
// Det): a model must not stall its own load for minutes.
const maxFoldWork = 1 << 34

// checkFoldWork returns an *UnsupportedError (the appliance's fallback
// to ONNX Runtime applies) when evaluating node e.n at load would take
// more than maxFoldWork steps.
func checkFoldWork(e *ev, work float64) error {
	if !(work <= maxFoldWork) {
		return &UnsupportedError{Op: e.n.Op, Node: e.n.Name,
			Why: fmt.Sprintf("about %.3g steps to evaluate at load, more than the %d the engine allows", work, int64(maxFoldWork))}
	}
	return nil
}

// batchAxisUnsupported is the refusal of node n's use of axis 0 of a
// run-time input (what it does to it): the engine batches requests along
// that axis, and a request's output must not depend on its batch.
func batchAxisUnsupported(n *graph.Node, what string) error {
	return &UnsupportedError{Op: n.Op, Node: n.Name, Why: what + ", the axis the engine batches requests along"}
}

// checkValueShaped returns an error when shape has a negative dimension or
// more elements than its cap (folded: a tensor the folder computes).
func checkValueShaped(shape []int64, folded bool) error {
	limit := int64(maxRuntimeElems)
	if folded {
		limit = maxFoldedElems
	}
	n := int64(1)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("a negative dimension in %v", shape)
		}
		if d > 0 && n > limit/d {
			return fmt.Errorf("an output of shape %v: more than %d values", shape, limit)
		}
		n *= d
	}
	return nil
}

func numel(s []int64) int64 {
	n := int64(1)
	for _, d := range s {
		n *= d
	}
	return n
}

func eqShape(a, b []int64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// stridesOf returns row-major strides of shape.
func stridesOf(shape []int64) []int64 {
	s := make([]int64, len(shape))
	acc := int64(1)
	for i := len(shape) - 1; i >= 0; i-- {
		s[i] = acc
		acc *= shape[i]
	}
	return s
}

// broadcastShape is numpy broadcasting of shapes.
func broadcastShape(shapes ...[]int64) ([]int64, error) {
	r := 0
	for _, s := range shapes {
		if len(s) > r {
			r = len(s)
		}
	}
	out := make([]int64, r)
	for i := range out {
		out[i] = 1
	}
	for _, s := range shapes {
		off := r - len(s)
		for i, d := range s {
			o := out[off+i]
			switch {
			case o == d || d == 1:
			case o == 1:
				out[off+i] = d
			default:
				return nil, fmt.Errorf("shapes %v do not broadcast", shapes)
			}
		}
	}
	return out, nil
}

// bstrides returns the strides to read a tensor of shape s broadcast to out
// (0 on broadcast dimensions).
func bstrides(s, out []int64) []int64 {
	st := stridesOf(s)
	res := make([]int64, len(out))
	off := len(out) - len(s)
	for i := off; i < len(out); i++ {
		if s[i-off] != 1 {
			res[i] = st[i-off]
		}
	}
	return res
}

// normAxis maps a possibly negative axis into [0, rank).
func normAxis(a, rank int64) (int64, error) {
	if a < 0 {
		a += rank
	}
	if a < 0 || a >= rank {
		return 0, fmt.Errorf("axis %d out of range for rank %d", a, rank)
	}
	return a, nil
}

// ints reads an integer tensor (or a float one holding integers).
func (t *Tensor) ints() []int64 {
	if t.IsFloat() {
		out := make([]int64, len(t.F))
		for i, v := range t.F {
			out[i] = int64(v)
		}
		return out
	}
	return t.I
}

// floats reads a tensor as float32.
func (t *Tensor) floats() []float32 {
	if t.IsFloat() {
		return t.F
	}
	out := make([]float32, len(t.I))
	for i, v := range t.I {
		out[i] = float32(v)
	}
	return out
}

// at returns element i as float64 (for folding arithmetic).
func (t *Tensor) at(i int64) float64 {
	if t.IsFloat() {
		return float64(t.F[i])
	}
	return float64(t.I[i])
}

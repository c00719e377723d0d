// Package graph is libml's model IR before compilation: an ONNX-shaped
// dataflow graph (nodes in topological order, named values, initializers).
// The ONNX importer produces it, the built-in zoo builds it, and the engine
// compiles it into a linear sequence of kernels.
package graph

import (
	"container/heap"
	"fmt"
)

// DType is a tensor element type, numbered as ONNX's TensorProto.DataType.
type DType int32

// Element types libml knows.
const (
	Undefined DType = 0
	Float32   DType = 1
	Uint8     DType = 2
	Int8      DType = 3
	Int32     DType = 6
	Int64     DType = 7
	Bool      DType = 9
	Float16   DType = 10
	Float64   DType = 11
)

func (d DType) String() string {
	switch d {
	case Float32:
		return "float32"
	case Uint8:
		return "uint8"
	case Int8:
		return "int8"
	case Int32:
		return "int32"
	case Int64:
		return "int64"
	case Bool:
		return "bool"
	case Float16:
		return "float16"
	case Float64:
		return "float64"
	}
	return fmt.Sprintf("dtype(%d)", int32(d))
}

// Tensor is a constant: an initializer or a tensor-valued attribute. Float
// tensors keep their values in F32, integer tensors in I64; Raw holds the
// bytes of any other type as they were stored.
type Tensor struct {
	Name  string
	DType DType
	Dims  []int64
	F32   []float32
	I64   []int64
	Raw   []byte
}

// NumElements is the product of Dims (1 for a scalar).
func (t *Tensor) NumElements() int64 {
	n := int64(1)
	for _, d := range t.Dims {
		n *= d
	}
	return n
}

// AttrKind is the type of an attribute's value, numbered as ONNX's
// AttributeProto.AttributeType.
type AttrKind int32

// Attribute kinds.
const (
	AttrFloat   AttrKind = 1
	AttrInt     AttrKind = 2
	AttrString  AttrKind = 3
	AttrTensor  AttrKind = 4
	AttrGraph   AttrKind = 5
	AttrFloats  AttrKind = 6
	AttrInts    AttrKind = 7
	AttrStrings AttrKind = 8
)

// Attr is one node attribute.
type Attr struct {
	Name    string
	Kind    AttrKind
	F       float32
	I       int64
	S       string
	T       *Tensor
	G       *Graph // a sub-graph (If's branches)
	Floats  []float32
	Ints    []int64
	Strings []string
}

// Node is one operator application. Inputs and Outputs name values; an
// empty input name means an omitted optional input.
type Node struct {
	Name    string
	Op      string
	Domain  string
	Inputs  []string
	Outputs []string
	Attrs   []Attr
}

// Attr returns the attribute called name, or nil.
func (n *Node) Attr(name string) *Attr {
	for i := range n.Attrs {
		if n.Attrs[i].Name == name {
			return &n.Attrs[i]
		}
	}
	return nil
}

// AttrInt returns an int attribute, or def when it is absent.
func (n *Node) AttrInt(name string, def int64) int64 {
	if a := n.Attr(name); a != nil {
		return a.I
	}
	return def
}

// AttrFloat returns a float attribute, or def when it is absent.
func (n *Node) AttrFloat(name string, def float32) float32 {
	if a := n.Attr(name); a != nil {
		return a.F
	}
	return def
}

// AttrInts returns an ints attribute, or def when it is absent.
func (n *Node) AttrInts(name string, def []int64) []int64 {
	if a := n.Attr(name); a != nil {
		return a.Ints
	}
	return def
}

// AttrString returns a string attribute, or def when it is absent.
func (n *Node) AttrString(name string, def string) string {
	if a := n.Attr(name); a != nil {
		return a.S
	}
	return def
}

// ValueInfo describes a graph input or output. A negative dimension is
// dynamic; DimParams holds its symbolic name when there is one.
type ValueInfo struct {
	Name      string
	DType     DType
	Dims      []int64
	DimParams []string
}

// Graph is a model: nodes in topological order, its inputs and outputs, and
// its initializers (weights).
type Graph struct {
	Name         string
	Nodes        []Node
	Inputs       []ValueInfo
	Outputs      []ValueInfo
	Initializers []*Tensor
	// Opset is the default-domain operator set version.
	Opset int64
}

// Initializer returns the initializer called name, or nil.
func (g *Graph) Initializer(name string) *Tensor {
	for _, t := range g.Initializers {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// WeightBytes is the total size of the graph's constant element data: its
// initializers and the values of its Constant nodes (where some exporters,
// PaddleOCR's among them, keep every weight).
func (g *Graph) WeightBytes() int64 {
	size := func(t *Tensor) int64 {
		return int64(len(t.F32))*4 + int64(len(t.I64))*8 + int64(len(t.Raw))
	}
	var n int64
	for _, t := range g.Initializers {
		n += size(t)
	}
	for i := range g.Nodes {
		if g.Nodes[i].Op != "Constant" {
			continue
		}
		for _, a := range g.Nodes[i].Attrs {
			if a.T != nil {
				n += size(a.T)
			}
		}
	}
	return n
}

// SortNodes puts g's nodes in topological order: every node after the
// nodes whose outputs it reads. ONNX asks exporters for that order, but
// not every file keeps it (ONNX Runtime accepts such files, so sluice
// does too). Among the nodes ready at a step, the one earliest in the file
// goes first, so a graph already in order is left as it is. A value
// produced by two nodes, or a cycle, is an error.
func (g *Graph) SortNodes() error {
	n := len(g.Nodes)
	producer := make(map[string]int, n)
	for i := range g.Nodes {
		for _, o := range g.Nodes[i].Outputs {
			if o == "" {
				continue
			}
			if j, dup := producer[o]; dup {
				return fmt.Errorf("graph: value %q is produced by node %d (%s) and node %d (%s)", o, j, g.Nodes[j].Op, i, g.Nodes[i].Op)
			}
			producer[o] = i
		}
	}
	waits := make([]int, n)     // producers a node still waits for
	readers := make([][]int, n) // nodes reading a node's outputs
	for i := range g.Nodes {
		seen := map[int]bool{}
		for _, in := range g.Nodes[i].Inputs {
			j, ok := producer[in]
			if !ok || seen[j] {
				continue
			}
			seen[j] = true
			waits[i]++
			readers[j] = append(readers[j], i)
		}
	}
	ready := &intHeap{}
	for i := range g.Nodes {
		if waits[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]Node, 0, n)
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		order = append(order, g.Nodes[i])
		for _, r := range readers[i] {
			if waits[r]--; waits[r] == 0 {
				heap.Push(ready, r)
			}
		}
	}
	if len(order) != n {
		for i := range g.Nodes {
			if waits[i] > 0 {
				return fmt.Errorf("graph: a cycle runs through node %d (%s %q)", i, g.Nodes[i].Op, g.Nodes[i].Name)
			}
		}
	}
	g.Nodes = order
	return nil
}

// intHeap is a min-heap of node indices.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

package graph

import "testing"

// TestWeightBytes counts initializers and Constant nodes' values, and
// nothing else (another node's tensor attribute is not a weight).
func TestWeightBytes(t *testing.T) {
	g := &Graph{
		Initializers: []*Tensor{{Name: "w", F32: make([]float32, 10)}, {Name: "shape", I64: []int64{1, 2}}},
		Nodes: []Node{
			{Op: "Constant", Outputs: []string{"c"}, Attrs: []Attr{{Name: "value", Kind: AttrTensor, T: &Tensor{Raw: make([]byte, 7)}}}},
			{Op: "ConstantOfShape", Inputs: []string{"shape"}, Outputs: []string{"z"}, Attrs: []Attr{{Name: "value", Kind: AttrTensor, T: &Tensor{F32: []float32{0}}}}},
		},
	}
	if got, want := g.WeightBytes(), int64(10*4+2*8+7); got != want {
		t.Fatalf("WeightBytes %d, want %d", got, want)
	}
}

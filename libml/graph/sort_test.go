package graph

import (
	"strings"
	"testing"
)

func names(g *Graph) string {
	var s []string
	for _, n := range g.Nodes {
		s = append(s, n.Name)
	}
	return strings.Join(s, " ")
}

// Nodes out of order come out in topological order; among ready nodes the
// file's order is kept, so an ordered graph does not change.
func TestSortNodes(t *testing.T) {
	g := &Graph{Nodes: []Node{
		{Name: "c", Op: "Add", Inputs: []string{"a_out", "b_out"}, Outputs: []string{"y"}},
		{Name: "b", Op: "Relu", Inputs: []string{"a_out"}, Outputs: []string{"b_out"}},
		{Name: "a", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"a_out"}},
		{Name: "d", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"d_out"}},
	}}
	if err := g.SortNodes(); err != nil {
		t.Fatal(err)
	}
	if got := names(g); got != "a b c d" {
		t.Fatalf("order %q, want a b c d", got)
	}
	if err := g.SortNodes(); err != nil || names(g) != "a b c d" {
		t.Fatalf("sorting a sorted graph changed it: %q, %v", names(g), err)
	}

	cyc := &Graph{Nodes: []Node{
		{Name: "p", Op: "Relu", Inputs: []string{"q_out"}, Outputs: []string{"p_out"}},
		{Name: "q", Op: "Relu", Inputs: []string{"p_out"}, Outputs: []string{"q_out"}},
	}}
	if err := cyc.SortNodes(); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("a cycle: %v", err)
	}
	dup := &Graph{Nodes: []Node{
		{Name: "p", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"v"}},
		{Name: "q", Op: "Relu", Inputs: []string{"x"}, Outputs: []string{"v"}},
	}}
	if err := dup.SortNodes(); err == nil || !strings.Contains(err.Error(), "produced by node 0") {
		t.Fatalf("a value produced twice: %v", err)
	}
}

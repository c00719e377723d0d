package engine

import (
	"math"

	"sluice/libml/graph"
)

// fuseHardSwish rewrites HardSwish as exporters spell it into one
// HardSwish node, which then fuses into the preceding kernel's epilogue:
// x * Clip(x + 3, 0, 6) / 6 (paddle2onnx's PP-LCNet and MobileNetV3:
// four elementwise kernels after every such layer), with the last step a
// Div by 6 or a Mul by 1/6, and x * HardSigmoid(x) with alpha 1/6 and
// beta 0.5. Every intermediate value must have the rewritten node as its
// only reader. The activation computes x * clip(x / 6 + 1/2, 0, 1): the
// same function, rounded differently in the last place than the spelled-
// out form.
func (m *Model) fuseHardSwish() {
	cons := m.consumers()
	prod := map[string]int{}
	readers := map[string][]int{}
	for i := range m.nodes {
		for _, o := range m.nodes[i].Outputs {
			prod[o] = i
		}
		for _, in := range m.nodes[i].Inputs {
			readers[in] = append(readers[in], i)
		}
	}
	near := func(v, want float64) bool { return math.Abs(v-want) < 1e-6*math.Max(1, math.Abs(want)) }
	// only is the node reading v when it is v's one reader
	only := func(v string) (int, bool) {
		if cons[v] != 1 || len(readers[v]) != 1 {
			return 0, false
		}
		return readers[v][0], true
	}
	// constIs reports whether name is a one-element constant equal to want
	constIs := func(name string, want float64) bool {
		v, ok := m.scalarConst(name)
		return ok && near(v, want)
	}
	drop := map[int]bool{}
	for mi := range m.nodes {
		mn := &m.nodes[mi]
		if mn.Op != "Mul" || len(mn.Inputs) != 2 || len(mn.Outputs) != 1 || drop[mi] {
			continue
		}
		for side := 0; side < 2; side++ {
			gate, x := mn.Inputs[side], mn.Inputs[1-side]
			gi, ok := prod[gate]
			if !ok || x == gate || drop[gi] {
				continue
			}
			if g, ok := only(gate); !ok || g != mi {
				continue
			}
			gn := &m.nodes[gi]
			var chain []int // the nodes the HardSwish replaces, the final one last
			switch gn.Op {
			case "HardSigmoid":
				if len(gn.Inputs) != 1 || gn.Inputs[0] != x ||
					!near(float64(gn.AttrFloat("alpha", 0.2)), 1.0/6) ||
					!near(float64(gn.AttrFloat("beta", 0.5)), 0.5) {
					continue
				}
				chain = []int{gi, mi}
			case "Clip":
				if len(gn.Inputs) < 1 || !m.clipIs(gn, 0, 6, constIs) {
					continue
				}
				ai, ok := prod[gn.Inputs[0]]
				if !ok || drop[ai] {
					continue
				}
				if c, ok := only(gn.Inputs[0]); !ok || c != gi {
					continue
				}
				an := &m.nodes[ai]
				if an.Op != "Add" || len(an.Inputs) != 2 ||
					!(an.Inputs[0] == x && constIs(an.Inputs[1], 3) || an.Inputs[1] == x && constIs(an.Inputs[0], 3)) {
					continue
				}
				// the division by 6 after the product
				fi, ok := only(mn.Outputs[0])
				if !ok || drop[fi] {
					continue
				}
				fn := &m.nodes[fi]
				switch {
				case fn.Op == "Div" && len(fn.Inputs) == 2 && fn.Inputs[0] == mn.Outputs[0] && constIs(fn.Inputs[1], 6):
				case fn.Op == "Mul" && len(fn.Inputs) == 2 &&
					(fn.Inputs[0] == mn.Outputs[0] && constIs(fn.Inputs[1], 1.0/6) ||
						fn.Inputs[1] == mn.Outputs[0] && constIs(fn.Inputs[0], 1.0/6)):
				default:
					continue
				}
				chain = []int{ai, gi, mi, fi}
			default:
				continue
			}
			final := chain[len(chain)-1]
			fn := &m.nodes[final]
			*fn = graph.Node{Name: fn.Name + "#hardswish", Op: "HardSwish", Inputs: []string{x}, Outputs: []string{fn.Outputs[0]}}
			for _, i := range chain[:len(chain)-1] {
				drop[i] = true
			}
			break
		}
	}
	if len(drop) == 0 {
		return
	}
	kept := m.nodes[:0]
	for i := range m.nodes {
		if !drop[i] {
			kept = append(kept, m.nodes[i])
		}
	}
	m.nodes = kept
}

// clipIs reports whether Clip node n bounds to exactly [lo, hi]: by its
// min and max inputs (opset 11 on) or attributes (before).
func (m *Model) clipIs(n *graph.Node, lo, hi float64, constIs func(string, float64) bool) bool {
	if m.opset < 11 {
		return len(n.Inputs) == 1 && float64(n.AttrFloat("min", float32(math.Inf(-1)))) == lo &&
			float64(n.AttrFloat("max", float32(math.Inf(1)))) == hi
	}
	return len(n.Inputs) == 3 && constIs(n.Inputs[1], lo) && constIs(n.Inputs[2], hi)
}

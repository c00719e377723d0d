package engine

import "sluice/libml/graph"

// GemmPanel is the column count of one panel of a GEMM's B stored in
// panels (native/cpu's SK_PANEL; libml/cpu checks that they agree).
const GemmPanel = 32

// panelMinCols is the fewest columns a constant B needs to be stored in
// panels: a narrower row is one short run of memory already.
const panelMinCols = 2 * GemmPanel

const (
	panelsSuffix  = "#panels"  // B (K x N) in panels
	panelsTSuffix = "#panelsT" // B stored N x K (Gemm's transB), transposed into panels
)

// PGemmPanels is the GEMM parameter slot that says B is stored in panels
// (1) rather than row-major (0). Its ldb (P[6]) is then the distance
// between panels in floats, K * GemmPanel: B(k, j) is at
// (j / GemmPanel) * ldb + k * GemmPanel + j % GemmPanel, zero past N.
const PGemmPanels = 24

// panelCandidate returns the constant B that node n (a MatMul or Gemm)
// reads, with trans when it reads it transposed (Gemm's transB), and
// whether it may be stored in panels: a float matrix of at least
// panelMinCols columns as the product reads it.
func panelCandidate(n *graph.Node, consts map[string]*Tensor) (name string, trans, ok bool) {
	if (n.Op != "MatMul" && n.Op != "Gemm") || len(n.Inputs) < 2 {
		return "", false, false
	}
	name = n.Inputs[1]
	w := consts[name]
	if w == nil || !w.IsFloat() || w.F == nil || len(w.Shape) != 2 {
		return "", false, false
	}
	trans = n.Op == "Gemm" && n.AttrInt("transB", 0) != 0
	cols := w.Shape[1]
	if trans {
		cols = w.Shape[0]
	}
	return name, trans, cols >= panelMinCols
}

// addPanelWeights stores every constant B of a MatMul or Gemm (a
// fully connected layer's or a transformer's weights) once more, at load,
// in panels of GemmPanel columns (packPanels), as a constant the weight
// arena holds once for every batch size's program. A block of the product
// then reads its columns of B as one run of memory, where a row-major B
// gives it a short run per row: a batch-1 fully connected layer, which
// streams its weights from memory, runs about twice as fast, and the
// weights of larger products stop aliasing in the cache. The bits are
// those of the row-major product (the same chain of multiply-adds per
// output). A weight nothing else reads is then dropped in its row-major
// form, keeping its type and shape.
func (m *Model) addPanelWeights() {
	readers := map[string]int{}
	for i := range m.nodes {
		for _, in := range m.nodes[i].Inputs {
			readers[in]++
		}
	}
	for _, o := range m.outputs {
		readers[o.Name]++
	}
	packedBy := map[string]int{}
	for i := range m.nodes {
		n := &m.nodes[i]
		name, trans, ok := panelCandidate(n, m.consts)
		if !ok {
			continue
		}
		suffix := panelsSuffix
		if trans {
			suffix = panelsTSuffix
		}
		if _, done := m.consts[name+suffix]; !done {
			w := m.consts[name]
			K, N := w.Shape[0], w.Shape[1]
			if trans {
				K, N = N, K
			}
			p := packPanels(w.F, K, N, trans)
			m.consts[name+suffix] = NewFloat([]int64{int64(len(p))}, p)
		}
		packedBy[name]++
	}
	for name, k := range packedBy {
		if readers[name] == k {
			t := m.consts[name]
			m.consts[name] = &Tensor{DType: t.DType, Shape: t.Shape}
		}
	}
}

// packPanels lays B (K x N; stored N x K when trans) out in panels of
// GemmPanel columns: panel p holds columns p*GemmPanel.. as K rows of
// GemmPanel floats, zero past N.
func packPanels(b []float32, K, N int64, trans bool) []float32 {
	np := (N + GemmPanel - 1) / GemmPanel
	out := make([]float32, np*K*GemmPanel)
	for j := int64(0); j < N; j++ {
		base := (j/GemmPanel)*K*GemmPanel + j%GemmPanel
		for k := int64(0); k < K; k++ {
			if trans {
				out[base+k*GemmPanel] = b[j*K+k]
			} else {
				out[base+k*GemmPanel] = b[k*N+j]
			}
		}
	}
	return out
}

// panelOperand returns where the panel form of the constant B named name
// lies in the weight arena, when the model stored it so for a product
// that reads it transposed (trans) or not.
func (c *compiler) panelOperand(name string, trans bool) (operand, bool) {
	suffix := panelsSuffix
	if trans {
		suffix = panelsTSuffix
	}
	off, ok := c.m.wOff[name+suffix]
	if !ok {
		return noOperand, false
	}
	return operand{sp: SpaceWeights, off: off}, true
}

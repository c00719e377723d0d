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

// GEMM and CONV parameter slots of weights stored in panels (sluice_cpu.h).
const (
	// PGemmPanels says B is stored in panels (1) rather than row-major
	// (0). Its ldb (P[6]) is then the distance between panels in floats,
	// K * GemmPanel: B(k, j) is at (j / GemmPanel) * ldb + k * GemmPanel
	// + j % GemmPanel, zero past N.
	PGemmPanels = 24
	// PGemmAPanels says A is stored transposed in panels: A(i, k) is at
	// (i / GemmPanel) * lda + k * GemmPanel + i % GemmPanel.
	PGemmAPanels = 25
	// PGemmTProd (with PGemmAPanels) computes the product transposed,
	// C^T = B^T A^T, the panels of A^T as its B: the same bits, faster
	// where N is small and M large.
	PGemmTProd = 26
	// PConvWPanels says a direct convolution's weights (Cout x Kd) are
	// stored transposed in panels, as PGemmAPanels' A.
	PConvWPanels = 17
)

// tprodMaxN, tprodMinK and tprodMinM bound the products computed
// transposed: few columns (a convolution's output positions per image),
// a reduction long enough to pay for transposing the tile, enough rows
// (output channels) to fill the vectors. Where the columns fill the
// micro-kernel's vectors badly (49 positions take 64 lanes) half the
// reduction pays (BenchmarkGemmPanels' conv products and a transposition,
// Zen 5 VM: 960 x 49 x 160 1.16x faster transposed, 576 x 196 x 96 0.90x).
const (
	tprodMaxN = 256
	tprodMinK = 256
	tprodMinM = 64
)

// lanesUsed is the share of the micro-kernel's lanes n columns fill: full
// panels of GemmPanel, then a remainder of at most half a panel in a half
// one (the AVX-512 kernel's widths).
func lanesUsed(n int64) float64 {
	padded := n / GemmPanel * GemmPanel
	switch r := n % GemmPanel; {
	case r > GemmPanel/2:
		padded += GemmPanel
	case r > 0:
		padded += GemmPanel / 2
	}
	return float64(n) / float64(padded)
}

// weightPanels sets s's A (a convolution's weights) as stored transposed
// in panels when wpanels, and picks the transposed product where it pays.
// The choice depends on the per-image shape only, never on the batch, and
// both products give the same bits.
func (s *gemmSpec) weightPanels(wpanels bool) {
	if !wpanels {
		return
	}
	s.apanels, s.lda = true, s.K*GemmPanel
	s.tprod = s.N <= tprodMaxN && s.M >= tprodMinM &&
		(s.K >= tprodMinK || (2*s.K >= tprodMinK && lanesUsed(s.N) <= 0.8))
}

// panelCandidate returns the constant B that node n (a MatMul or Gemm)
// reads, with trans when it reads it transposed (Gemm's transB), and
// whether it may be stored in panels: a float matrix of at least
// panelMinCols columns as the product reads it.
func panelCandidate(n *graph.Node, consts map[string]*Tensor) (name string, trans, ok bool) {
	if len(n.Inputs) < 2 {
		return "", false, false
	}
	name = n.Inputs[1]
	w := consts[name]
	if w == nil || !w.IsFloat() || w.F == nil {
		return "", false, false
	}
	if n.Op == "Conv" {
		// an ungrouped 1-D or 2-D convolution's weights, Cout x Kd, as
		// the A of its GEMMs: stored transposed in panels of output
		// channels, if they pad Cout by at most an eighth
		if n.AttrInt("group", 1) != 1 || (len(w.Shape) != 3 && len(w.Shape) != 4) {
			return "", false, false
		}
		cout := w.Shape[0]
		padded := (cout + GemmPanel - 1) / GemmPanel * GemmPanel
		return name, true, cout >= GemmPanel && 8*padded <= 9*cout
	}
	if (n.Op != "MatMul" && n.Op != "Gemm") || len(w.Shape) != 2 {
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
// weights of larger products stop aliasing in the cache. An ungrouped
// convolution's weights (Cout x Kd, the A of its GEMMs) are stored so too,
// transposed: its GEMMs read them as A (sk_gemm_apanels) or, where the
// output has few positions, compute the product transposed with them as B
// (the vectors then run along output channels). The bits are those of the
// row-major product (the same chain of multiply-adds per output). A weight
// nothing else reads is then dropped in its row-major form, keeping its
// type and shape.
func (m *Model) addPanelWeights() {
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
			// stored N x K when transposed (a convolution's Cout x Kd)
			K, N := w.Shape[0], w.Len()/w.Shape[0]
			if trans {
				K, N = N, K
			}
			// packed by loadWeights straight into the arena: no
			// third copy of the weights at load
			size := (N + GemmPanel - 1) / GemmPanel * K * GemmPanel
			m.consts[name+suffix] = &Tensor{DType: graph.Float32, Shape: []int64{size}}
			if m.panelSrc == nil {
				m.panelSrc = map[string]panelJob{}
			}
			m.panelSrc[name+suffix] = panelJob{src: w.F, K: K, N: N, trans: trans}
		}
		packedBy[name]++
	}
	m.dropPacked(packedBy)
}

// dropPacked keeps only the type and shape of each constant every reader
// of which reads a packed form instead (packedBy counts those readers).
func (m *Model) dropPacked(packedBy map[string]int) {
	readers := map[string]int{}
	for i := range m.nodes {
		for _, in := range m.nodes[i].Inputs {
			readers[in]++
		}
	}
	for _, o := range m.outputs {
		readers[o.Name]++
	}
	for name, k := range packedBy {
		if readers[name] == k {
			t := m.consts[name]
			m.consts[name] = &Tensor{DType: t.DType, Shape: t.Shape}
		}
	}
}

// panelJob is a constant to be written in panels into the weight arena:
// B (K x N; stored N x K when trans) from src.
type panelJob struct {
	src   []float32
	K, N  int64
	trans bool
}

// pack lays the job's B out in out (len: whole panels) in panels of
// GemmPanel columns: panel p holds columns p*GemmPanel.. as K rows of
// GemmPanel floats, zero past N. Both loops read src in order.
func (j panelJob) pack(out []float32) {
	clear(out)
	K, N, b := j.K, j.N, j.src
	if j.trans {
		for n := int64(0); n < N; n++ {
			base, row := (n/GemmPanel)*K*GemmPanel+n%GemmPanel, b[n*K:(n+1)*K]
			for k, v := range row {
				out[base+int64(k)*GemmPanel] = v
			}
		}
		return
	}
	for k := int64(0); k < K; k++ {
		row := b[k*N : (k+1)*N]
		for p := int64(0); p*GemmPanel < N; p++ {
			copy(out[p*K*GemmPanel+k*GemmPanel:], row[p*GemmPanel:min((p+1)*GemmPanel, N)])
		}
	}
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

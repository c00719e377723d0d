package engine

import (
	"fmt"
	"sort"
	"strings"
)

// Einsum: the reference evaluates any equation (ellipsis, implicit
// output, repeated labels, size-1 broadcasting); the compiler runs the
// contractions models use at run time: one operand permuted (a COPY), or
// two operands as one batched GEMM, each operand read in place when its
// labels are already in the GEMM's order (or its transpose) and copied
// into that order otherwise, and the product copied into the output's
// order when that differs.

// einsumSpec is a parsed equation for operands of known ranks: each
// operand's labels, one per dimension (an ellipsis expanded to labels
// 1, 2, ... aligned to the right), and the output's.
type einsumSpec struct {
	ins [][]byte
	out []byte
}

func parseEinsum(eq string, ranks []int) (*einsumSpec, error) {
	eq = strings.ReplaceAll(eq, " ", "")
	lhs, rhs, explicit := strings.Cut(eq, "->")
	terms := strings.Split(lhs, ",")
	if len(terms) != len(ranks) {
		return nil, fmt.Errorf("equation %q has %d operands, the node %d inputs", eq, len(terms), len(ranks))
	}
	ell := 0 // dimensions the ellipsis stands for (the most of any operand)
	for i, term := range terms {
		if strings.Contains(term, "...") {
			ell = max(ell, ranks[i]-(len(term)-3))
		}
	}
	ellLabels := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(1 + ell - n + i)
		}
		return b
	}
	expand := func(term string, rank int) ([]byte, error) {
		pre, post, has := strings.Cut(term, "...")
		for _, c := range pre + post {
			if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
				return nil, fmt.Errorf("label %q in %q: want a letter", c, eq)
			}
		}
		if !has {
			if rank >= 0 && len(term) != rank {
				return nil, fmt.Errorf("%q labels %d dimensions of an operand of rank %d", term, len(term), rank)
			}
			return []byte(term), nil
		}
		n := rank - len(pre) - len(post)
		if rank < 0 {
			n = ell
		}
		if n < 0 {
			return nil, fmt.Errorf("%q labels more dimensions than its operand's %d", term, rank)
		}
		return append(append([]byte(pre), ellLabels(n)...), post...), nil
	}
	s := &einsumSpec{}
	count := map[byte]int{}
	for i, term := range terms {
		l, err := expand(term, ranks[i])
		if err != nil {
			return nil, err
		}
		s.ins = append(s.ins, l)
		for _, c := range l {
			count[c]++
		}
	}
	if explicit {
		out, err := expand(rhs, -1)
		if err != nil {
			return nil, err
		}
		seen := map[byte]bool{}
		for _, c := range out {
			if count[c] == 0 || seen[c] {
				return nil, fmt.Errorf("output label %q of %q: not in an operand, or repeated", c, eq)
			}
			seen[c] = true
		}
		s.out = out
	} else {
		// implicit: the ellipsis, then the labels seen once, in order
		s.out = ellLabels(ell)
		var once []byte
		for c, n := range count {
			if n == 1 && c > 'A'-1 {
				once = append(once, c)
			}
		}
		sort.Slice(once, func(i, j int) bool { return once[i] < once[j] })
		s.out = append(s.out, once...)
	}
	return s, nil
}

// sizes returns each label's size (the largest, size 1 broadcasting)
// for operand shapes, checking that they agree.
func (s *einsumSpec) sizes(shapes [][]int64) (map[byte]int64, error) {
	sz := map[byte]int64{}
	for i, l := range s.ins {
		for d, c := range l {
			v := shapes[i][d]
			switch old, ok := sz[c]; {
			case !ok || old == 1:
				sz[c] = v
			case v != old && v != 1:
				return nil, fmt.Errorf("label %q has sizes %d and %d", c, old, v)
			}
		}
	}
	return sz, nil
}

func (s *einsumSpec) outShape(sz map[byte]int64) []int64 {
	out := make([]int64, len(s.out))
	for i, c := range s.out {
		out[i] = sz[c]
	}
	return out
}

func (e *ev) einsumSpec() (*einsumSpec, [][]int64, error) {
	var ranks []int
	var shapes [][]int64
	for i := range e.n.Inputs {
		t, err := e.need(i)
		if err != nil {
			return nil, nil, err
		}
		ranks, shapes = append(ranks, len(t.Shape)), append(shapes, t.Shape)
	}
	s, err := parseEinsum(e.n.AttrString("equation", ""), ranks)
	return s, shapes, err
}

func refEinsum(e *ev) ([]*Tensor, error) {
	s, shapes, err := e.einsumSpec()
	if err != nil {
		return nil, err
	}
	sz, err := s.sizes(shapes)
	if err != nil {
		return nil, err
	}
	oshape := s.outShape(sz)
	if !e.allKnown() {
		return one(shapeOnly(e.ins[0].DType, oshape))
	}
	// every label once, the output's first: the output index is the
	// leading part of the running index
	labels := append([]byte{}, s.out...)
	for _, l := range s.ins {
		for _, c := range l {
			if strings.IndexByte(string(labels), c) < 0 {
				labels = append(labels, c)
			}
		}
	}
	dims := make([]int64, len(labels))
	for i, c := range labels {
		dims[i] = sz[c]
	}
	// each operand's stride per label (0: broadcast or absent; a repeated
	// label adds its strides: the diagonal)
	strides := make([][]int64, len(s.ins))
	for i, l := range s.ins {
		st := stridesOf(shapes[i])
		strides[i] = make([]int64, len(labels))
		for d, c := range l {
			if shapes[i][d] != 1 {
				strides[i][strings.IndexByte(string(labels), c)] += st[d]
			}
		}
	}
	acc := make([]float64, numel(oshape))
	inner := numel(dims[len(s.out):])
	idx := make([]int64, len(labels))
	for i := int64(0); i < numel(dims); i++ {
		unravel(i, dims, idx)
		p := 1.0
		for k, t := range e.ins {
			p *= t.at(dot(idx, strides[k]))
		}
		acc[i/inner] += p
	}
	return one(fromValues(e.ins[0].DType, oshape, acc))
}

// labelView returns dims and strides reading operand labels l (shape sh)
// in the order of want.
func labelView(l []byte, sh []int64, want []byte) (dims, strides []int64) {
	st := stridesOf(sh)
	for _, c := range want {
		d := strings.IndexByte(string(l), c)
		dims, strides = append(dims, sh[d]), append(strides, st[d])
	}
	return dims, strides
}

func sameLabels(a []byte, parts ...[]byte) bool {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return string(a) == string(b)
}

func (c *compiler) lowerEinsum(g *group) error {
	n := c.node(g)
	e := c.evFor(n)
	s, shapes, err := e.einsumSpec()
	if err != nil {
		return err
	}
	unsupported := func(why string) error {
		return &UnsupportedError{Op: "Einsum", Node: n.Name, Why: why}
	}
	for i, l := range s.ins {
		seen := map[byte]bool{}
		for d, ch := range l {
			if seen[ch] {
				return unsupported("a label repeated in one operand (a diagonal) is evaluated at load only")
			}
			seen[ch] = true
			for j, l2 := range s.ins {
				if d2 := strings.IndexByte(string(l2), ch); d2 >= 0 && shapes[j][d2] != shapes[i][d] {
					return unsupported("broadcasting a label of size 1 is evaluated at load only")
				}
			}
		}
	}
	dst, ov, err := c.output(n.Outputs[0])
	if err != nil {
		return err
	}
	if ov.t.Len() == 0 {
		return nil
	}
	in := func(i int) operand { o, _ := c.operand(n.Inputs[i]); return o }
	if len(s.ins) == 1 {
		if len(s.out) != len(s.ins[0]) {
			return unsupported("a sum over a label of one operand is evaluated at load only")
		}
		dims, st := labelView(s.ins[0], shapes[0], s.out)
		return c.copyView(g, in(0), dst, dims, st)
	}
	if len(s.ins) != 2 {
		return unsupported(fmt.Sprintf("%d operands: run time takes one or two", len(s.ins)))
	}
	A, B := s.ins[0], s.ins[1]
	has := func(l []byte, ch byte) bool { return strings.IndexByte(string(l), ch) >= 0 }
	var batch, akeep, bkeep, contract []byte
	for _, ch := range s.out {
		switch {
		case has(A, ch) && has(B, ch):
			batch = append(batch, ch)
		case has(A, ch):
			akeep = append(akeep, ch)
		default:
			bkeep = append(bkeep, ch)
		}
	}
	for _, ch := range A {
		if !has(s.out, ch) {
			if !has(B, ch) {
				return unsupported("a sum over a label of one operand is evaluated at load only")
			}
			contract = append(contract, ch)
		}
	}
	for _, ch := range B {
		if !has(s.out, ch) && !has(A, ch) {
			return unsupported("a sum over a label of one operand is evaluated at load only")
		}
	}
	sz, _ := s.sizes(shapes)
	prod := func(l []byte) int64 {
		p := int64(1)
		for _, ch := range l {
			p *= sz[ch]
		}
		return p
	}
	Bt, M, N, K := prod(batch), prod(akeep), prod(bkeep), prod(contract)
	spec := gemmSpec{M: M, N: N, K: K, lda: K, ldb: N, ldc: N, alpha: 1}
	if Bt > 1 {
		spec.bd[0], spec.sA[0], spec.sB[0], spec.sC[0] = Bt, M*K, K*N, M*N
	}
	// an operand read in place, as the GEMM's operand or its transpose,
	// or copied into the GEMM's order
	place := func(i int, l []byte, rows, cols []byte, nrows, ncols int64, ld, trans *int64) (operand, error) {
		switch {
		case sameLabels(l, batch, rows, cols):
			return in(i), nil
		case sameLabels(l, batch, cols, rows):
			*trans, *ld = 1, nrows
			return in(i), nil
		}
		tmp := operand{sp: SpaceArena, buf: c.newBuf(Bt * nrows * ncols)}
		dims, st := labelView(l, shapes[i], append(append(append([]byte{}, batch...), rows...), cols...))
		return tmp, c.copyView(g, in(i), tmp, dims, st)
	}
	d := c.draft(g, OpGemm)
	if d.in[0], err = place(0, A, akeep, contract, M, K, &spec.lda, &spec.tA); err != nil {
		return err
	}
	if d.in[1], err = place(1, B, contract, bkeep, K, N, &spec.ldb, &spec.tB); err != nil {
		return err
	}
	spec.set(&d.k)
	prodLabels := append(append(append([]byte{}, batch...), akeep...), bkeep...)
	if sameLabels(s.out, prodLabels) {
		d.out = dst
		c.emit(d)
		return nil
	}
	tmp := operand{sp: SpaceArena, buf: c.newBuf(Bt * M * N)}
	d.out = tmp
	c.emit(d)
	pshape := make([]int64, len(prodLabels))
	for i, ch := range prodLabels {
		pshape[i] = sz[ch]
	}
	dims, st := labelView(prodLabels, pshape, s.out)
	return c.copyView(g, tmp, dst, dims, st)
}

package engine

import (
	"fmt"
	"math"

	"sluice/libml/graph"
)

// Recurrent layers: ONNX RNN, GRU and LSTM, forward, reverse and
// bidirectional, layout 0 ([seq, batch, ...]) and 1 ([batch, seq, ...]).
//
// They lower onto the kernels every device already has (GEMM, unary,
// binary and copy), one gate at a time so that every operand is a
// contiguous [batch, hidden] block:
//
//   - the input projection of every time step at once, per gate: one GEMM
//     [seq·batch, input] × W_gᵀ + bias into a buffer of its own;
//   - per step, per gate: a GEMM H_{t-1} × R_gᵀ whose residual is that
//     step's rows of the input projection, with the gate's activation in
//     its epilogue (peepholes, GRU's reset gate and clip add binary or
//     unary kernels);
//   - the state update in binary kernels, H_t written straight into Y.
//
// The weights (W, R, B, P) must be constants, as in every exported model;
// the initial states may be constants or computed. sequence_lens must be
// absent or give every sequence the full length: shorter sequences would
// need per-row masking, which is refused with that reason.

// rnnAct is one of a layer's activation functions.
type rnnAct struct {
	code int
	a, b float32
}

// rnnSpec is a recurrent node's attributes and sizes.
type rnnSpec struct {
	op               string // RNN, GRU or LSTM
	gates            int64  // 1, 3 or 4
	hidden           int64
	seq, batch, in   int64
	dirs             int64
	reverse          bool // direction = reverse (one direction, run backwards)
	layout           int64
	clip             float32 // > 0: gate pre-activations clipped to [-clip, clip]
	lbr              bool    // GRU linear_before_reset
	acts             []rnnAct
	actsPerDir       int
	yShape, hShape   []int64
	hasY, hasH, hasC bool
}

// rnnActCodes maps ONNX's recurrent activation names to activation codes,
// their default alpha and beta, and how many of the two they take.
var rnnActCodes = map[string]struct {
	act    rnnAct
	params int
}{
	"Sigmoid":     {rnnAct{ActSigmoid, 0, 0}, 0},
	"Tanh":        {rnnAct{ActTanh, 0, 0}, 0},
	"Relu":        {rnnAct{ActRelu, 0, 0}, 0},
	"Softplus":    {rnnAct{ActSoftplus, 0, 0}, 0},
	"LeakyRelu":   {rnnAct{ActLeakyRelu, 0.01, 0}, 1},
	"Elu":         {rnnAct{ActElu, 1, 0}, 1},
	"HardSigmoid": {rnnAct{ActHardSigmoid, 0.2, 0.5}, 2},
	"Affine":      {rnnAct{ActAffine, 1, 0}, 2},
}

// parseRNN reads n's attributes and checks its inputs' shapes (x the input
// X, w the weights W).
func parseRNN(n *graph.Node, x, w *Tensor) (*rnnSpec, error) {
	s := &rnnSpec{op: n.Op}
	switch n.Op {
	case "RNN":
		s.gates, s.actsPerDir = 1, 1
	case "GRU":
		s.gates, s.actsPerDir = 3, 2
	case "LSTM":
		s.gates, s.actsPerDir = 4, 3
	default:
		return nil, fmt.Errorf("%s is not a recurrent operator", n.Op)
	}
	if x == nil || w == nil || len(x.Shape) != 3 || len(w.Shape) != 3 {
		return nil, fmt.Errorf("X and W must be of rank 3")
	}
	s.layout = n.AttrInt("layout", 0)
	switch s.layout {
	case 0:
		s.seq, s.batch = x.Shape[0], x.Shape[1]
	case 1:
		s.batch, s.seq = x.Shape[0], x.Shape[1]
	default:
		return nil, fmt.Errorf("layout %d", s.layout)
	}
	s.in = x.Shape[2]
	switch dir := n.AttrString("direction", "forward"); dir {
	case "forward":
		s.dirs = 1
	case "reverse":
		s.dirs, s.reverse = 1, true
	case "bidirectional":
		s.dirs = 2
	default:
		return nil, fmt.Errorf("direction %q", dir)
	}
	s.hidden = n.AttrInt("hidden_size", 0)
	if s.hidden <= 0 && w.Shape[1]%s.gates == 0 {
		s.hidden = w.Shape[1] / s.gates
	}
	if s.hidden <= 0 || w.Shape[0] != s.dirs || w.Shape[1] != s.gates*s.hidden || w.Shape[2] != s.in {
		return nil, fmt.Errorf("W %v does not fit %d directions of %d gates of hidden size %d over input %d", w.Shape, s.dirs, s.gates, s.hidden, s.in)
	}
	if s.seq < 1 || s.batch < 1 {
		return nil, fmt.Errorf("X %v: empty sequence or batch", x.Shape)
	}
	if n.AttrInt("input_forget", 0) != 0 {
		return nil, fmt.Errorf("input_forget = 1 is not supported")
	}
	s.clip = n.AttrFloat("clip", 0)
	if s.clip < 0 {
		return nil, fmt.Errorf("clip %g", s.clip)
	}
	s.lbr = n.AttrInt("linear_before_reset", 0) != 0
	names := []string{"Tanh"}
	switch n.Op {
	case "GRU":
		names = []string{"Sigmoid", "Tanh"}
	case "LSTM":
		names = []string{"Sigmoid", "Tanh", "Tanh"}
	}
	if a := n.Attr("activations"); a != nil && len(a.Strings) > 0 {
		names = a.Strings
	} else if s.dirs == 2 {
		names = append(names, names...)
	}
	if int64(len(names)) != int64(s.actsPerDir)*s.dirs {
		return nil, fmt.Errorf("%d activations for %d directions of %s", len(names), s.dirs, n.Op)
	}
	// activation_alpha and _beta are consumed in the order of the
	// functions that take them (as ONNX Runtime reads them)
	alphas, betas := attrFloats(n, "activation_alpha"), attrFloats(n, "activation_beta")
	for _, name := range names {
		f, ok := rnnActCodes[name]
		if !ok {
			return nil, fmt.Errorf("activation %q is not supported", name)
		}
		act := f.act
		if f.params >= 1 && len(alphas) > 0 {
			act.a, alphas = alphas[0], alphas[1:]
		}
		if f.params >= 2 && len(betas) > 0 {
			act.b, betas = betas[0], betas[1:]
		}
		s.acts = append(s.acts, act)
	}
	if s.layout == 0 {
		s.yShape = []int64{s.seq, s.dirs, s.batch, s.hidden}
		s.hShape = []int64{s.dirs, s.batch, s.hidden}
	} else {
		s.yShape = []int64{s.batch, s.seq, s.dirs, s.hidden}
		s.hShape = []int64{s.batch, s.dirs, s.hidden}
	}
	out := func(i int) bool { return i < len(n.Outputs) && n.Outputs[i] != "" }
	s.hasY, s.hasH, s.hasC = out(0), out(1), n.Op == "LSTM" && out(2)
	return s, nil
}

// act is activation k of direction d.
func (s *rnnSpec) act(d int64, k int) rnnAct { return s.acts[int(d)*s.actsPerDir+k] }

// checkSeqLens refuses sequence_lens that shorten a sequence.
func (s *rnnSpec) checkSeqLens(t *Tensor) error {
	if t == nil {
		return nil
	}
	if !t.known() {
		return fmt.Errorf("sequence_lens must be a constant")
	}
	if t.Len() != s.batch {
		return fmt.Errorf("sequence_lens of %d values for a batch of %d", t.Len(), s.batch)
	}
	for i := int64(0); i < t.Len(); i++ {
		if int64(t.at(i)) != s.seq {
			return fmt.Errorf("sequence_lens %v: sequences shorter than %d (masking) are not supported", t.ints(), s.seq)
		}
	}
	return nil
}

// shapes are the output tensors' shapes (nil data) in the node's order.
func (s *rnnSpec) shapes(n int) []*Tensor {
	outs := make([]*Tensor, n)
	for i := range outs {
		sh := s.hShape
		if i == 0 {
			sh = s.yShape
		}
		outs[i] = shapeOnly(graph.Float32, sh)
	}
	return outs
}

// refRecurrent evaluates RNN, GRU and LSTM in float64.
func refRecurrent(e *ev) ([]*Tensor, error) {
	x, err := e.need(0)
	if err != nil {
		return nil, err
	}
	w, err := e.need(1)
	if err != nil {
		return nil, err
	}
	r, err := e.need(2)
	if err != nil {
		return nil, err
	}
	s, err := parseRNN(e.n, x, w)
	if err != nil {
		return nil, err
	}
	H, G := s.hidden, s.gates
	if !eqShape(r.Shape, []int64{s.dirs, G * H, H}) {
		return nil, fmt.Errorf("R %v, want [%d %d %d]", r.Shape, s.dirs, G*H, H)
	}
	b, h0, c0, p := e.in(3), e.in(5), e.in(6), e.in(7)
	if e.n.Op != "LSTM" {
		c0, p = nil, nil
	}
	for _, c := range []struct {
		t     *Tensor
		name  string
		shape []int64
	}{{b, "B", []int64{s.dirs, 2 * G * H}}, {h0, "initial_h", s.hShape}, {c0, "initial_c", s.hShape}, {p, "P", []int64{s.dirs, 3 * H}}} {
		if c.t != nil && !eqShape(c.t.Shape, c.shape) {
			return nil, fmt.Errorf("%s %v, want %v", c.name, c.t.Shape, c.shape)
		}
	}
	if err := s.checkSeqLens(e.in(4)); err != nil {
		return nil, err
	}
	if !e.allKnown() {
		return s.shapes(len(e.n.Outputs)), nil
	}
	xf, wf, rf := x.floats(), w.floats(), r.floats()
	xAt := func(t, bi, k int64) float64 {
		if s.layout == 0 {
			return float64(xf[(t*s.batch+bi)*s.in+k])
		}
		return float64(xf[(bi*s.seq+t)*s.in+k])
	}
	// state index in the layout of initial_h / Y_h
	hIdx := func(d, bi, j int64) int64 {
		if s.layout == 0 {
			return (d*s.batch+bi)*H + j
		}
		return (bi*s.dirs+d)*H + j
	}
	yIdx := func(t, d, bi, j int64) int64 {
		if s.layout == 0 {
			return ((t*s.dirs+d)*s.batch+bi)*H + j
		}
		return ((bi*s.seq+t)*s.dirs+d)*H + j
	}
	y := NewFloat(s.yShape, nil)
	yh, yc := NewFloat(s.hShape, nil), NewFloat(s.hShape, nil)
	clip := func(v float64) float64 {
		if s.clip > 0 {
			return math.Max(-float64(s.clip), math.Min(float64(s.clip), v))
		}
		return v
	}
	for d := int64(0); d < s.dirs; d++ {
		hp := make([]float64, s.batch*H) // [batch][H]
		cp := make([]float64, s.batch*H)
		for bi := int64(0); bi < s.batch; bi++ {
			for j := int64(0); j < H; j++ {
				if h0 != nil {
					hp[bi*H+j] = h0.at(hIdx(d, bi, j))
				}
				if c0 != nil {
					cp[bi*H+j] = c0.at(hIdx(d, bi, j))
				}
			}
		}
		// pre(g, t, bi, j, h): X W_gᵀ + h R_gᵀ (+ the bias when withB)
		xw := func(g, t, bi, j int64) float64 {
			var v float64
			for k := int64(0); k < s.in; k++ {
				v += xAt(t, bi, k) * float64(wf[((d*G+g)*H+j)*s.in+k])
			}
			return v
		}
		hr := func(g, bi, j int64, h []float64) float64 {
			var v float64
			for k := int64(0); k < H; k++ {
				v += h[bi*H+k] * float64(rf[((d*G+g)*H+j)*H+k])
			}
			return v
		}
		wb := func(g, j int64) float64 {
			if b == nil {
				return 0
			}
			return b.at(d*2*G*H + g*H + j)
		}
		rb := func(g, j int64) float64 {
			if b == nil {
				return 0
			}
			return b.at(d*2*G*H + G*H + g*H + j)
		}
		f := func(k int, v float64) float64 {
			a := s.act(d, k)
			return actRef(a.code, v, float64(a.a), float64(a.b))
		}
		for step := int64(0); step < s.seq; step++ {
			t := step
			if s.reverse || d == 1 {
				t = s.seq - 1 - step
			}
			hn := make([]float64, s.batch*H)
			cn := make([]float64, s.batch*H)
			for bi := int64(0); bi < s.batch; bi++ {
				for j := int64(0); j < H; j++ {
					pre := func(g int64) float64 {
						return clip(xw(g, t, bi, j) + hr(g, bi, j, hp) + wb(g, j) + rb(g, j))
					}
					switch s.op {
					case "RNN":
						hn[bi*H+j] = f(0, pre(0))
					case "GRU":
						z, rr := f(0, pre(0)), f(0, pre(1))
						var hh float64
						if s.lbr {
							hh = f(1, clip(xw(2, t, bi, j)+wb(2, j)+rr*(hr(2, bi, j, hp)+rb(2, j))))
						} else {
							rh := make([]float64, s.batch*H)
							for k := int64(0); k < H; k++ {
								rr2 := f(0, clip(xw(1, t, bi, k)+hr(1, bi, k, hp)+wb(1, k)+rb(1, k)))
								rh[bi*H+k] = rr2 * hp[bi*H+k]
							}
							hh = f(1, clip(xw(2, t, bi, j)+hr(2, bi, j, rh)+wb(2, j)+rb(2, j)))
						}
						hn[bi*H+j] = (1-z)*hh + z*hp[bi*H+j]
					case "LSTM":
						pi, po, pf := 0.0, 0.0, 0.0
						if p != nil {
							pi, po, pf = p.at(d*3*H+j), p.at(d*3*H+H+j), p.at(d*3*H+2*H+j)
						}
						c := cp[bi*H+j]
						ig := f(0, clip(xw(0, t, bi, j)+hr(0, bi, j, hp)+wb(0, j)+rb(0, j)+pi*c))
						fg := f(0, clip(xw(2, t, bi, j)+hr(2, bi, j, hp)+wb(2, j)+rb(2, j)+pf*c))
						cc := f(1, pre(3))
						cn[bi*H+j] = fg*c + ig*cc
						og := f(0, clip(xw(1, t, bi, j)+hr(1, bi, j, hp)+wb(1, j)+rb(1, j)+po*cn[bi*H+j]))
						hn[bi*H+j] = og * f(2, cn[bi*H+j])
					}
				}
			}
			for bi := int64(0); bi < s.batch; bi++ {
				for j := int64(0); j < H; j++ {
					y.F[yIdx(t, d, bi, j)] = float32(hn[bi*H+j])
				}
			}
			hp, cp = hn, cn
		}
		for bi := int64(0); bi < s.batch; bi++ {
			for j := int64(0); j < H; j++ {
				yh.F[hIdx(d, bi, j)] = float32(hp[bi*H+j])
				yc.F[hIdx(d, bi, j)] = float32(cp[bi*H+j])
			}
		}
	}
	outs := []*Tensor{y, yh, yc}
	return outs[:min(len(e.n.Outputs), len(outs))], nil
}

// ---- lowering ---------------------------------------------------------------

// rnnLower is one recurrent node's lowering state.
type rnnLower struct {
	c *compiler
	g *group
	s *rnnSpec
}

// arena is a new activation buffer of n floats.
func (l *rnnLower) arena(n int64) operand {
	return operand{sp: SpaceArena, buf: l.c.newBuf(n)}
}

// at is o moved off floats on.
func at(o operand, off int64) operand {
	o.off += off
	return o
}

// gemm emits out = act(a [M, K] × b [K, N] + bias (per column) + res).
func (l *rnnLower) gemm(a operand, M, K, N int64, b, bias, res operand, act rnnAct, out operand) {
	d := l.c.draft(l.g, OpGemm)
	s := gemmSpec{M: M, N: N, K: K, lda: K, ldb: N, ldc: N, alpha: 1}
	d.in[0], d.in[1] = a, b
	if bias != noOperand {
		d.in[2], s.biasMode = bias, 2
	}
	d.in[3] = res
	s.set(&d.k)
	d.k.P[PAct] = int64(act.code)
	d.k.F[FActA], d.k.F[FActB] = act.a, act.b
	d.out = out
	l.c.emit(d)
}

// unary emits out = act(in) over n floats.
func (l *rnnLower) unary(in operand, n int64, act rnnAct, out operand) {
	d := l.c.draft(l.g, OpUnary)
	d.k.P[0] = n
	d.k.P[PAct] = int64(act.code)
	d.k.F[FActA], d.k.F[FActB] = act.a, act.b
	d.in[0], d.out = in, out
	l.c.emit(d)
}

// bin emits out = a op b over [batch, hidden] (b of shape bs: [batch,
// hidden] or a [hidden] row broadcast).
func (l *rnnLower) bin(op int, a, b operand, bs []int64, out operand) error {
	sh := []int64{l.s.batch, l.s.hidden}
	return l.c.binaryKernel(l.g, op, a, sh, b, bs, out, sh)
}

// activate writes act(pre) to out ([batch, hidden]), clipped first when
// the node clips.
func (l *rnnLower) activate(pre operand, act rnnAct, out operand) {
	n := l.s.batch * l.s.hidden
	if l.s.clip > 0 {
		t := l.arena(n)
		l.unary(pre, n, rnnAct{ActClip, -l.s.clip, l.s.clip}, t)
		pre = t
	}
	l.unary(pre, n, act, out)
}

// gate writes act(xw + h × rT (+ extra)) to out, all [batch, hidden]:
// without a previous state (h is noOperand) act(xw (+ extra)).
func (l *rnnLower) gate(xw, h, rT, extra operand, act rnnAct, out operand) error {
	H, B := l.s.hidden, l.s.batch
	if extra != noOperand {
		t := l.arena(B * H)
		if err := l.bin(BinAdd, xw, extra, []int64{B, H}, t); err != nil {
			return err
		}
		xw = t
	}
	if h == noOperand {
		l.activate(xw, act, out)
		return nil
	}
	if l.s.clip > 0 {
		pre := l.arena(B * H)
		l.gemm(h, B, H, H, rT, noOperand, xw, rnnAct{}, pre)
		l.activate(pre, act, out)
		return nil
	}
	l.gemm(h, B, H, H, rT, noOperand, xw, act, out)
	return nil
}

// lowerRecurrent lowers RNN, GRU and LSTM (see the top of this file).
func (c *compiler) lowerRecurrent(g *group) error {
	n := c.node(g)
	in := func(i int) (*cval, error) {
		if i >= len(n.Inputs) || n.Inputs[i] == "" {
			return nil, nil
		}
		return c.val(n.Inputs[i])
	}
	xv, err := c.val(n.Inputs[0])
	if err != nil {
		return err
	}
	var vs [8]*cval
	for i := 1; i < 8; i++ {
		if vs[i], err = in(i); err != nil {
			return err
		}
	}
	if vs[1] == nil || vs[2] == nil {
		return fmt.Errorf("W and R are required")
	}
	s, err := parseRNN(n, xv.t, vs[1].t)
	if err != nil {
		return err
	}
	if n.Op != "LSTM" {
		vs[6], vs[7] = nil, nil
	}
	for _, i := range []int{1, 2, 3, 7} {
		if vs[i] != nil && (vs[i].buf != -1 || !vs[i].t.IsFloat()) {
			return fmt.Errorf("%s input %d (weights) must be a float constant", n.Op, i)
		}
	}
	if vs[4] != nil {
		if vs[4].buf != -1 {
			return fmt.Errorf("sequence_lens must be a constant")
		}
		if err := s.checkSeqLens(vs[4].t); err != nil {
			return err
		}
	}
	l := &rnnLower{c: c, g: g, s: s}
	H, G, B, T, D := s.hidden, s.gates, s.batch, s.seq, s.dirs
	BH := B * H
	// X in layout 0: [seq, batch, input]
	x0, err := c.operand(n.Inputs[0])
	if err != nil {
		return err
	}
	if s.layout == 1 {
		t := l.arena(T * B * s.in)
		if err := c.copyKernel(g, "", x0, 0, t, 0, []int64{T, B, s.in}, []int64{s.in, T * s.in, 1}, []int64{B * s.in, s.in, 1}); err != nil {
			return err
		}
		x0 = t
	}
	// H_t of every step, layout 0 ([seq, dirs, batch, hidden]): Y itself
	// in layout 0
	var y0 operand
	if s.hasY && s.layout == 0 {
		if y0, _, err = c.output(n.Outputs[0]); err != nil {
			return err
		}
	} else {
		y0 = l.arena(T * D * BH)
	}
	var yh, yc operand
	if s.hasH {
		if yh, _, err = c.output(n.Outputs[1]); err != nil {
			return err
		}
	}
	if s.hasC {
		if yc, _, err = c.output(n.Outputs[2]); err != nil {
			return err
		}
	}
	// a state's rows of direction d as a contiguous [batch, hidden] block
	state := func(i int, d int64) (operand, error) {
		if vs[i] == nil {
			return noOperand, nil
		}
		if !eqShape(vs[i].t.Shape, s.hShape) {
			return noOperand, fmt.Errorf("input %d %v, want %v", i, vs[i].t.Shape, s.hShape)
		}
		o, err := c.operand(n.Inputs[i])
		if err != nil {
			return noOperand, err
		}
		if s.layout == 0 {
			return at(o, d*BH), nil
		}
		t := l.arena(BH)
		err = c.copyKernel(g, "", o, d*H, t, 0, []int64{B, H}, []int64{D * H, 1}, []int64{H, 1})
		return t, err
	}
	// a state block into Y_h / Y_c of direction d
	final := func(src, dst operand, d int64) error {
		if s.layout == 0 {
			return c.copyKernel(g, "", src, 0, dst, d*BH, []int64{BH}, []int64{1}, []int64{1})
		}
		return c.copyKernel(g, "", src, 0, dst, d*H, []int64{B, H}, []int64{H, 1}, []int64{D * H, 1})
	}
	wf, rf := vs[1].t.F, vs[2].t.F
	var bf, pf []float32
	if vs[3] != nil {
		if !eqShape(vs[3].t.Shape, []int64{D, 2 * G * H}) {
			return fmt.Errorf("B %v, want [%d %d]", vs[3].t.Shape, D, 2*G*H)
		}
		bf = vs[3].t.F
	}
	if vs[7] != nil {
		if !eqShape(vs[7].t.Shape, []int64{D, 3 * H}) {
			return fmt.Errorf("P %v, want [%d %d]", vs[7].t.Shape, D, 3*H)
		}
		pf = vs[7].t.F
	}
	if !eqShape(vs[2].t.Shape, []int64{D, G * H, H}) {
		return fmt.Errorf("R %v, want [%d %d %d]", vs[2].t.Shape, D, G*H, H)
	}
	row := func(v []float32, off int64) operand { return c.newConst(append([]float32(nil), v[off:off+H]...)) }
	for d := int64(0); d < D; d++ {
		// per gate: W_gᵀ [input, hidden], R_gᵀ [hidden, hidden], the
		// input projection of every step with its bias
		wT := make([]operand, G)
		rT := make([]operand, G)
		xw := make([]operand, G)
		var rbh operand // GRU linear_before_reset: R_h's bias, inside r ⊙ (...)
		for k := int64(0); k < G; k++ {
			wT[k] = c.newConst(transpose2D(wf[(d*G+k)*H*s.in:(d*G+k+1)*H*s.in], H, s.in))
			rT[k] = c.newConst(transpose2D(rf[(d*G+k)*H*H:(d*G+k+1)*H*H], H, H))
			bias := noOperand
			if bf != nil {
				b := make([]float32, H)
				for j := int64(0); j < H; j++ {
					b[j] = bf[d*2*G*H+k*H+j]
					if !(s.op == "GRU" && s.lbr && k == 2) {
						b[j] += bf[d*2*G*H+G*H+k*H+j]
					}
				}
				bias = c.newConst(b)
				if s.op == "GRU" && s.lbr && k == 2 {
					rbh = row(bf, d*2*G*H+G*H+k*H)
				}
			}
			xw[k] = l.arena(T * BH)
			l.gemm(x0, T*B, s.in, H, wT[k], bias, noOperand, rnnAct{}, xw[k])
		}
		var pRow [3]operand
		for k := int64(0); pf != nil && k < 3; k++ {
			pRow[k] = row(pf, d*3*H+k*H)
		}
		h, err := state(5, d)
		if err != nil {
			return err
		}
		cs, err := state(6, d)
		if err != nil {
			return err
		}
		for step := int64(0); step < T; step++ {
			t := step
			if s.reverse || d == 1 {
				t = T - 1 - step
			}
			x := func(k int64) operand { return at(xw[k], t*BH) }
			hn := at(y0, (t*D+d)*BH)
			switch s.op {
			case "RNN":
				if err := l.gate(x(0), h, rT[0], noOperand, s.act(d, 0), hn); err != nil {
					return err
				}
			case "GRU":
				z, r, hh := l.arena(BH), l.arena(BH), l.arena(BH)
				if err := l.gate(x(0), h, rT[0], noOperand, s.act(d, 0), z); err != nil {
					return err
				}
				if err := l.gate(x(1), h, rT[1], noOperand, s.act(d, 0), r); err != nil {
					return err
				}
				switch {
				case !s.lbr && h != noOperand:
					rh := l.arena(BH)
					if err := l.bin(BinMul, r, h, []int64{B, H}, rh); err != nil {
						return err
					}
					if err := l.gate(x(2), rh, rT[2], noOperand, s.act(d, 1), hh); err != nil {
						return err
					}
				case !s.lbr:
					l.activate(x(2), s.act(d, 1), hh)
				default:
					// h~ = g(x W_hᵀ + W_bh + r ⊙ (h R_hᵀ + R_bh))
					rr := l.arena(BH)
					switch {
					case h != noOperand:
						hr := l.arena(BH)
						l.gemm(h, B, H, H, rT[2], rbh, noOperand, rnnAct{}, hr)
						if err := l.bin(BinMul, r, hr, []int64{B, H}, rr); err != nil {
							return err
						}
					case rbh != noOperand:
						if err := l.bin(BinMul, r, rbh, []int64{H}, rr); err != nil {
							return err
						}
					default:
						rr = noOperand
					}
					if err := l.gate(x(2), noOperand, noOperand, rr, s.act(d, 1), hh); err != nil {
						return err
					}
				}
				// H_t = (1 - z) ⊙ h~ + z ⊙ H_{t-1} = h~ + z ⊙ (H_{t-1} - h~)
				e := l.arena(BH)
				if h != noOperand {
					df := l.arena(BH)
					if err := l.bin(BinSub, h, hh, []int64{B, H}, df); err != nil {
						return err
					}
					if err := l.bin(BinMul, z, df, []int64{B, H}, e); err != nil {
						return err
					}
					if err := l.bin(BinAdd, hh, e, []int64{B, H}, hn); err != nil {
						return err
					}
				} else {
					if err := l.bin(BinMul, z, hh, []int64{B, H}, e); err != nil {
						return err
					}
					if err := l.bin(BinSub, hh, e, []int64{B, H}, hn); err != nil {
						return err
					}
				}
			case "LSTM":
				// gates i, o, f, c (ONNX's order); peepholes P = [i, o, f]
				peep := func(k int64, st operand) (operand, error) {
					if pf == nil || st == noOperand {
						return noOperand, nil
					}
					t := l.arena(BH)
					return t, l.bin(BinMul, st, pRow[k], []int64{H}, t)
				}
				ig, cc, cn := l.arena(BH), l.arena(BH), l.arena(BH)
				pi, err := peep(0, cs)
				if err != nil {
					return err
				}
				if err := l.gate(x(0), h, rT[0], pi, s.act(d, 0), ig); err != nil {
					return err
				}
				if err := l.gate(x(3), h, rT[3], noOperand, s.act(d, 1), cc); err != nil {
					return err
				}
				if cs != noOperand {
					fg, t1, t2 := l.arena(BH), l.arena(BH), l.arena(BH)
					pfo, err := peep(2, cs)
					if err != nil {
						return err
					}
					if err := l.gate(x(2), h, rT[2], pfo, s.act(d, 0), fg); err != nil {
						return err
					}
					if err := l.bin(BinMul, fg, cs, []int64{B, H}, t1); err != nil {
						return err
					}
					if err := l.bin(BinMul, ig, cc, []int64{B, H}, t2); err != nil {
						return err
					}
					if err := l.bin(BinAdd, t1, t2, []int64{B, H}, cn); err != nil {
						return err
					}
				} else if err := l.bin(BinMul, ig, cc, []int64{B, H}, cn); err != nil {
					return err
				}
				og, th := l.arena(BH), l.arena(BH)
				po, err := peep(1, cn)
				if err != nil {
					return err
				}
				if err := l.gate(x(1), h, rT[1], po, s.act(d, 0), og); err != nil {
					return err
				}
				l.unary(cn, BH, s.act(d, 2), th)
				if err := l.bin(BinMul, og, th, []int64{B, H}, hn); err != nil {
					return err
				}
				cs = cn
			}
			h = hn
		}
		if s.hasH {
			if err := final(h, yh, d); err != nil {
				return err
			}
		}
		if s.hasC {
			if err := final(cs, yc, d); err != nil {
				return err
			}
		}
	}
	if s.hasY && s.layout == 1 {
		y, _, err := c.output(n.Outputs[0])
		if err != nil {
			return err
		}
		return c.copyKernel(g, "", y0, 0, y, 0, []int64{T, D, B, H}, []int64{D * BH, BH, H, 1}, []int64{D * H, H, T * D * H, 1})
	}
	return nil
}

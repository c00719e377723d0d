package engine

import (
	"fmt"
	"sort"
	"strings"

	"sluice/libml/graph"
)

// Space is the memory a kernel operand lives in.
type Space uint8

// Operand spaces.
const (
	SpaceNone    Space = iota
	SpaceArena         // the instance's activation arena
	SpaceWeights       // the model's weight arena (shared by instances)
	SpaceConsts        // the program's own small constants
)

// Ref locates an operand: a space and an element offset in it.
type Ref struct {
	Space Space
	Off   int64
}

// Range is a span of the activation arena, in floats.
type Range struct {
	Off, Len int64
}

// Kernel is one kernel of a program, in the C engine's parameter layout
// (native/cpu/sluice_cpu.h).
type Kernel struct {
	Op    Op
	Flags int32
	// Name is the ONNX node the kernel comes from; Ops the operators fused
	// into it ("Conv+Add+Relu").
	Name, Ops string
	In        [MaxIn]Ref
	Out       Ref
	Aux       []int64
	P         [NumP]int64
	F         [NumF]float32
	// Reads and Writes are the arena spans the kernel reads and writes
	// (whole buffers), for the idempotence analysis.
	Reads, Writes []Range
}

// Flops is the kernel's arithmetic in floating-point (or integer)
// operations, a multiply-add counting two: for GEMM, CONV, DWCONV and
// QGEMM kernels (the parameter layouts of native/cpu's sluice_cpu.h),
// 0 for the others. Profilers set it against measured time.
func (k *Kernel) Flops() float64 {
	p := &k.P
	switch k.Op {
	case OpGemm:
		return 2 * float64(p[0]) * float64(p[1]) * float64(p[2]) * float64(p[8]*p[9]*p[10])
	case OpConv:
		if p[5] < 1 {
			return 0
		}
		return 2 * float64(p[0]*p[4]) * float64(p[14]*p[15]) * float64(p[1]/p[5]*p[6]*p[7])
	case OpDWConv:
		f := 2 * float64(p[0]*p[4]) * float64(p[14]*p[15]) * float64(p[6]*p[7])
		if p[PDWPointwise] == 1 { // and its fused pointwise producer's
			f += 2 * float64(p[0]*p[1]) * float64(p[2]*p[3]) * float64(p[PDWPointwiseC])
		}
		return f
	case OpQGemm:
		return 2 * float64(p[0]) * float64(p[1]) * float64(p[2]) * float64(p[6]*p[7])
	}
	return 0
}

// Idempotent reports whether the kernel alone may be re-executed.
func (k *Kernel) Idempotent() bool { return k.Flags&FlagInPlace == 0 }

// Binding places a graph input or output in the arena.
type Binding struct {
	Name  string
	Shape []int64
	Off   int64
}

// Size is the binding's element count.
func (b *Binding) Size() int64 { return numel(b.Shape) }

// Program is a model compiled for fixed input shapes: a linear kernel
// sequence and its static buffer plan.
type Program struct {
	Kernels []Kernel
	// ArenaFloats is the size of the activation arena the kernels need.
	ArenaFloats int64
	// Consts are the program's own constants (SpaceConsts).
	Consts []float32
	// Inputs and Outputs locate the graph's inputs and outputs in the arena.
	Inputs, Outputs []Binding
	// IdemEntry[i] is the first kernel of the minimal idempotent group
	// ending at kernel i (REEF §4.4): a run preempted while kernel i was
	// running restarts there. It is i for idempotent kernels.
	IdemEntry []int
	// Fused counts operators fused into another kernel, InPlace the
	// kernels that run in place.
	Fused, InPlace int
}

// String lists the kernels.
func (p *Program) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "program: %d kernels, arena %d floats, consts %d\n", len(p.Kernels), p.ArenaFloats, len(p.Consts))
	for i := range p.Kernels {
		k := &p.Kernels[i]
		fmt.Fprintf(&b, "%4d %-9s %-28s %s out@%d", i, k.Op, k.Ops, k.Name, k.Out.Off)
		if !k.Idempotent() {
			fmt.Fprintf(&b, " in-place (restart at %d)", p.IdemEntry[i])
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// ---- compiler state ------------------------------------------------------------

type cval struct {
	t    *Tensor
	buf  int // runtime buffer, -1 for constants
	name string
}

type cbuf struct {
	size          int64
	zero          bool // holds no element: kernels writing it are dropped
	input, output bool
	def, last     int
	off           int64
}

type operand struct {
	sp  Space
	buf int
	off int64
}

var noOperand = operand{}

type draft struct {
	k   Kernel
	in  [MaxIn]operand
	out operand
}

type group struct {
	nodes []int // runtime node indices, head first
	res   string
	bias  string
	act   int
	a, b  float32
	// scaled: a MatMul's output times scale, a constant scalar (fuse)
	scaled bool
	scale  float32
}

type compiler struct {
	m        *Model
	vals     map[string]*cval
	bufs     []*cbuf
	drafts   []draft
	consts   []float32
	constOff map[string]int64
	rt       []*graph.Node
	groupIdx int
	prog     *Program
	// lastReadName maps a buffer's root value to the last group reading it.
	lastReadName map[string]int
	rootOf       func(string) string
	// views are the Transposes a MatMul reads through strides
	// (matmulViews), by output name
	views map[string]opView
	// outViews are the Transposes a MatMul writes through strides
	// (matmulOutViews), by the MatMul's output name: src is the
	// Transpose's output
	outViews map[string]opView
}

// CompileBatch compiles the model for a batch size (see BatchShapes).
func (m *Model) CompileBatch(batch int) (p *Program, err error) {
	defer recoverInternal(&err, "compile", m.name)
	shapes, err := m.BatchShapes(batch)
	if err == nil && batch > 1 {
		err = m.batchCoupled()
	}
	if err != nil {
		return nil, fmt.Errorf("engine: compile %q for batch %d: %w", m.name, batch, err)
	}
	return m.Compile(shapes)
}

// Compile compiles the model for the given runtime input shapes.
func (m *Model) Compile(shapes map[string][]int64) (prog *Program, err error) {
	defer recoverInternal(&err, "compile", m.name)
	p, err := m.compile(shapes)
	if err != nil {
		return nil, fmt.Errorf("engine: compile %q: %w", m.name, err)
	}
	return p, nil
}

func (m *Model) compile(shapes map[string][]int64) (*Program, error) {
	c := &compiler{m: m, vals: map[string]*cval{}, constOff: map[string]int64{},
		prog: &Program{}}
	for name, t := range m.consts {
		c.vals[name] = &cval{t: t, buf: -1, name: name}
	}
	for _, in := range m.inputs {
		s, ok := shapes[in.Name]
		if !ok {
			return nil, fmt.Errorf("no shape for input %q", in.Name)
		}
		if len(s) != len(in.Dims) {
			return nil, fmt.Errorf("input %q: shape %v, the graph says rank %d", in.Name, s, len(in.Dims))
		}
		for i, d := range s {
			if d < 0 || (in.Dims[i] > 0 && in.Dims[i] != d) {
				return nil, fmt.Errorf("input %q: shape %v does not match %v", in.Name, s, in.Dims)
			}
		}
		dt := in.DType
		switch dt {
		case graph.Float32, graph.Undefined:
			dt = graph.Float32
		case graph.Uint8, graph.Int8:
			// fed as float32 values (a quantised model's input)
		default:
			return nil, fmt.Errorf("input %q is %s: runtime inputs must be float32, uint8 or int8", in.Name, in.DType)
		}
		b := c.newBuf(numel(s))
		c.bufs[b].input = true
		c.vals[in.Name] = &cval{t: &Tensor{DType: dt, Shape: append([]int64{}, s...)}, buf: b, name: in.Name}
		c.prog.Inputs = append(c.prog.Inputs, Binding{Name: in.Name, Shape: append([]int64{}, s...)})
	}
	if err := c.shapes(); err != nil {
		return nil, err
	}
	last := c.fuse()
	c.matmulViews(last)
	c.matmulOutViews(last)
	c.readers(last)
	for gi := range c.rt {
		g, ok := last[gi]
		if !ok {
			continue
		}
		c.groupIdx = gi
		if err := c.lower(g); err != nil {
			n := c.rt[g.nodes[0]]
			return nil, fmt.Errorf("node %q (%s): %w", n.Name, n.Op, err)
		}
	}
	if err := c.bindOutputs(); err != nil {
		return nil, err
	}
	c.fusePointwiseDW()
	c.fuseQLinearAdd()
	c.byteIntegers()
	c.plan()
	c.finish()
	need := 4 * (int64(len(m.weights)) + c.prog.ArenaFloats + int64(len(c.prog.Consts)))
	if err := m.checkMemory(fmt.Sprintf("its weights, activations and constants at input shapes %v", shapes), need); err != nil {
		return nil, err
	}
	return c.prog, nil
}

// shapes runs every node through the reference evaluator with shape-only
// runtime inputs: constants fold, runtime nodes get their output shapes.
func (c *compiler) shapes() error {
	for i := range c.m.nodes {
		n := &c.m.nodes[i]
		ins := make([]*Tensor, len(n.Inputs))
		known := true
		for j, name := range n.Inputs {
			if name == "" {
				continue
			}
			v, ok := c.vals[name]
			if !ok {
				return fmt.Errorf("node %q (%s): input %q is not produced by any earlier node", n.Name, n.Op, name)
			}
			if v.buf != -1 || (!v.t.known() && v.t.Len() > 0) {
				// a runtime value, or a weight kept only packed
				ins[j] = &Tensor{DType: v.t.DType, Shape: v.t.Shape}
				known = false
			} else {
				ins[j] = v.t
			}
		}
		outs, err := Eval(n, c.m.opset, ins)
		if err != nil {
			return err
		}
		if len(outs) < countNonEmpty(n.Outputs) {
			return fmt.Errorf("node %q (%s): %d outputs computed for %d", n.Name, n.Op, len(outs), len(n.Outputs))
		}
		runtime := false
		for j, o := range n.Outputs {
			if o == "" || j >= len(outs) {
				continue
			}
			t := outs[j]
			if t.known() {
				c.vals[o] = &cval{t: t, buf: -1, name: o}
				continue
			}
			if !t.IsFloat() && !intStorage(t.DType) {
				// unsupported, not wrong: ONNX Runtime can serve the model
				return &UnsupportedError{Op: n.Op, Node: n.Name, Why: fmt.Sprintf("output %q is a runtime %s tensor; "+
					"the engine computes float32, uint8, int8, int32 and int64 only (other integer tensors must fold to constants)", o, t.DType)}
			}
			runtime = true
			c.vals[o] = &cval{t: t, buf: -2, name: o}
		}
		if runtime {
			if known {
				return fmt.Errorf("node %q (%s): constant inputs gave no constant output", n.Name, n.Op)
			}
			c.rt = append(c.rt, n)
		}
	}
	return nil
}

func countNonEmpty(s []string) int {
	n := 0
	for _, x := range s {
		if x != "" {
			n++
		}
	}
	return n
}

// ---- fusion ------------------------------------------------------------------

var residualHeads = map[string]bool{"Conv": true, "Gemm": true, "MatMul": true}

var actHeads = map[string]bool{"Conv": true, "ConvTranspose": true, "Gemm": true,
	"MatMul": true, "BatchNormalization": true, "Add": true, "Sub": true,
	"Mul": true, "Div": true, "Max": true, "Min": true, "PRelu": true}

// conv3D reports whether n is a convolution of 3 spatial dimensions
// (lowerConv3D: its 2-D convolution's output is in another layout than
// the node's, so a residual cannot be fused into it).
func (c *compiler) conv3D(n *graph.Node) bool {
	if n.Op != "Conv" || len(n.Inputs) == 0 {
		return false
	}
	v, ok := c.vals[n.Inputs[0]]
	return ok && v.t != nil && len(v.t.Shape) == 5
}

// nodeReaders maps each value to the runtime nodes reading it, in order.
func (c *compiler) nodeReaders() map[string][]int {
	readers := map[string][]int{}
	for i, n := range c.rt {
		for _, in := range n.Inputs {
			if in != "" {
				readers[in] = append(readers[in], i)
			}
		}
	}
	return readers
}

// graphOutputs is the set of the graph's output names.
func (c *compiler) graphOutputs() map[string]bool {
	outputs := map[string]bool{}
	for _, o := range c.m.outputs {
		outputs[o.Name] = true
	}
	return outputs
}

// fuse groups runtime nodes: a head (GEMM, convolution, ...) absorbs a
// following residual or bias Add and an activation when it is their only
// reader. A group runs where its last node stood. It returns the groups by
// their last node's index.
func (c *compiler) fuse() map[int]*group {
	readers, outputs := c.nodeReaders(), c.graphOutputs()
	absorbed := map[int]bool{}
	only := func(v string) (int, bool) {
		if outputs[v] || len(readers[v]) != 1 || absorbed[readers[v][0]] {
			return 0, false
		}
		return readers[v][0], true
	}
	last := map[int]*group{}
	for i, n := range c.rt {
		if absorbed[i] {
			continue
		}
		g := &group{nodes: []int{i}}
		if !c.m.opts.NoFusion && len(n.Outputs) == 1 {
			cur := n.Outputs[0]
			if n.Op == "MatMul" {
				// a constant scalar Mul after it (attention's
				// 1/sqrt(d)): the GEMM's alpha, applied to the
				// finished product before any bias or residual, as
				// the Mul computes it
				if j, ok := only(cur); ok && c.rt[j].Op == "Mul" && len(c.rt[j].Inputs) == 2 {
					if v, ok := c.scalarFactor(c.rt[j], cur); ok {
						g.nodes = append(g.nodes, j)
						g.scaled, g.scale = true, v
						cur = c.rt[j].Outputs[0]
					}
				}
			}
			if residualHeads[n.Op] {
				if j, ok := only(cur); ok && c.rt[j].Op == "Add" && len(c.rt[j].Inputs) == 2 {
					if kind, other := c.residual(n, c.rt[j], cur); kind != "" && (kind != "res" || !c.conv3D(n)) {
						g.nodes = append(g.nodes, j)
						if kind == "res" {
							g.res = other
						} else {
							g.bias = other
						}
						cur = c.rt[j].Outputs[0]
					}
				}
				// a residual Add after the bias Add (a transformer's
				// projection, bias, then the skip connection): the
				// epilogue adds the bias, then the residual, the
				// order of the two Adds, so the same bits
				if g.bias != "" {
					if j, ok := only(cur); ok && c.rt[j].Op == "Add" && len(c.rt[j].Inputs) == 2 {
						if kind, other := c.residual(n, c.rt[j], cur); kind == "res" && !c.conv3D(n) {
							g.nodes = append(g.nodes, j)
							g.res = other
							cur = c.rt[j].Outputs[0]
						}
					}
				}
			}
			if actHeads[n.Op] && (binaryOps[n.Op] == 0 && n.Op != "Add" || len(n.Inputs) == 2) {
				if j, ok := only(cur); ok {
					an := c.rt[j]
					if _, isAct := unaryActs[an.Op]; isAct && an.Inputs[0] == cur {
						ins := c.tensors(an)
						if act, a, b, err := actParams(an, c.m.opset, ins); err == nil {
							g.nodes = append(g.nodes, j)
							g.act, g.a, g.b = act, a, b
						}
					}
				}
			}
		}
		for _, j := range g.nodes {
			absorbed[j] = true
		}
		c.prog.Fused += len(g.nodes) - 1
		last[g.nodes[len(g.nodes)-1]] = g
	}
	return last
}

// scalarFactor returns the constant float scalar mul (a Mul reading cur)
// multiplies cur by, when its output has cur's shape.
func (c *compiler) scalarFactor(mul *graph.Node, cur string) (float32, bool) {
	other := mul.Inputs[0]
	if other == cur {
		other = mul.Inputs[1]
	}
	ov, hv, mv := c.vals[other], c.vals[cur], c.vals[mul.Outputs[0]]
	if other == cur || ov == nil || hv == nil || mv == nil || ov.buf != -1 ||
		ov.t.DType != graph.Float32 || len(ov.t.F) != 1 || !eqShape(hv.t.Shape, mv.t.Shape) {
		return 0, false
	}
	return ov.t.F[0], true
}

// residual decides whether Add add (reading head's output cur) folds into
// head's epilogue: "res" for a same-shaped tensor, "bias" for a constant
// per-channel (convolution) or per-column (MatMul) vector.
func (c *compiler) residual(head, add *graph.Node, cur string) (string, string) {
	other := add.Inputs[0]
	if other == cur {
		other = add.Inputs[1]
	}
	if other == cur || other == "" {
		return "", ""
	}
	ov, hv, av := c.vals[other], c.vals[cur], c.vals[add.Outputs[0]]
	if ov == nil || hv == nil || av == nil || !eqShape(hv.t.Shape, av.t.Shape) {
		return "", ""
	}
	if head.Op == "Gemm" && len(head.Inputs) > 2 && head.Inputs[2] != "" {
		return "", "" // the residual slot holds C
	}
	if eqShape(ov.t.Shape, hv.t.Shape) {
		return "res", other
	}
	if ov.buf != -1 {
		return "", ""
	}
	hasBias := len(head.Inputs) > 2 && head.Inputs[2] != ""
	s := hv.t.Shape
	switch head.Op {
	case "Conv":
		if hasBias || len(s) < 3 || ov.t.Len() != s[1] || len(ov.t.Shape) > len(s) {
			return "", ""
		}
		// shape must be [C,1,..] or [1,C,1,..] aligned to dim 1
		os := ov.t.Shape
		off := len(s) - len(os)
		for k := range os {
			if k+off != 1 && os[k] != 1 {
				return "", ""
			}
		}
		if off > 1 {
			return "", ""
		}
		return "bias", other
	case "MatMul":
		// a per-column bias needs the GEMM's N to be the output's last
		// dimension (not so with a 1-D B)
		if b := c.vals[head.Inputs[1]]; b == nil || len(b.t.Shape) < 2 {
			return "", ""
		}
		if ov.t.Len() != s[len(s)-1] || (len(ov.t.Shape) > 0 && ov.t.Shape[len(ov.t.Shape)-1] != s[len(s)-1]) {
			return "", ""
		}
		return "bias", other
	}
	return "", ""
}

func (c *compiler) tensors(n *graph.Node) []*Tensor {
	ins := make([]*Tensor, len(n.Inputs))
	for j, name := range n.Inputs {
		if v := c.vals[name]; name != "" && v != nil {
			ins[j] = v.t
			if v.buf != -1 {
				ins[j] = &Tensor{DType: v.t.DType, Shape: v.t.Shape}
			}
		}
	}
	return ins
}

// readers records, for each runtime buffer root, the last group that reads
// it (in-place candidates must be the last reader).
func (c *compiler) readers(last map[int]*group) {
	// Values are mapped to buffers while lowering, so track by value name and
	// resolve aliases through the alias ops.
	root := map[string]string{}
	var rootOf func(string) string
	rootOf = func(v string) string {
		if r, ok := root[v]; ok && r != v {
			return rootOf(r)
		}
		return v
	}
	for _, n := range c.rt {
		if isAliasOp(n.Op) && len(n.Inputs) > 0 {
			root[n.Outputs[0]] = n.Inputs[0]
		}
	}
	// a MatMul reading a Transpose's view reads its source
	for t, v := range c.views {
		root[t] = v.src
	}
	c.lastReadName = map[string]int{}
	for gi := range c.rt {
		g, ok := last[gi]
		if !ok {
			continue
		}
		for _, ni := range g.nodes {
			for _, in := range c.rt[ni].Inputs {
				if in != "" {
					c.lastReadName[rootOf(in)] = gi
				}
			}
		}
		if g.res != "" {
			c.lastReadName[rootOf(g.res)] = gi
		}
	}
	c.rootOf = rootOf
}

func isAliasOp(op string) bool {
	switch op {
	case "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "Cast", "CastLike":
		return true
	}
	return false
}

// ---- buffers and operands ------------------------------------------------------

func (c *compiler) newBuf(size int64) int {
	zero := size < 1
	if zero {
		size = 1
	}
	c.bufs = append(c.bufs, &cbuf{size: size, zero: zero, def: 1 << 30, last: -1})
	return len(c.bufs) - 1
}

// val returns a node input's value.
func (c *compiler) val(name string) (*cval, error) {
	v, ok := c.vals[name]
	if !ok || name == "" {
		return nil, fmt.Errorf("missing input %q", name)
	}
	return v, nil
}

// operand returns where value name is read from.
func (c *compiler) operand(name string) (operand, error) {
	v, err := c.val(name)
	if err != nil {
		return noOperand, err
	}
	if v.buf >= 0 {
		return operand{sp: SpaceArena, buf: v.buf}, nil
	}
	if v.buf == -2 {
		return noOperand, fmt.Errorf("value %q used before it is computed", name)
	}
	if !v.t.IsFloat() {
		// an integer constant read by a float kernel (Pow's exponent)
		if off, ok := c.constOff[name]; ok {
			return operand{sp: SpaceConsts, off: off}, nil
		}
		o := c.newConst(v.t.floats())
		c.constOff[name] = o.off
		return o, nil
	}
	if off, ok := c.m.wOff[name]; ok && c.m.consts[name] == v.t {
		return operand{sp: SpaceWeights, off: off}, nil
	}
	if v.t.F == nil && v.t.Len() > 0 {
		return noOperand, fmt.Errorf("weight %q is stored only in a packed form", name)
	}
	if off, ok := c.constOff[name]; ok {
		return operand{sp: SpaceConsts, off: off}, nil
	}
	o := c.newConst(v.t.F)
	c.constOff[name] = o.off
	return o, nil
}

// newConst adds data to the program's constants.
func (c *compiler) newConst(data []float32) operand {
	off := int64(len(c.consts))
	c.consts = append(c.consts, data...)
	for len(c.consts)%16 != 0 {
		c.consts = append(c.consts, 0)
	}
	return operand{sp: SpaceConsts, off: off}
}

// output gives value name a fresh buffer.
func (c *compiler) output(name string) (operand, *cval, error) {
	v, err := c.val(name)
	if err != nil {
		return noOperand, nil, err
	}
	v.buf = c.newBuf(v.t.Len())
	return operand{sp: SpaceArena, buf: v.buf}, v, nil
}

// inPlace reports whether the group being lowered may overwrite value
// name's buffer (it is the last reader and the buffer is an activation).
func (c *compiler) inPlace(name string, shape []int64) bool {
	if c.m.opts.NoInPlace {
		return false
	}
	v := c.vals[name]
	if v == nil || v.buf < 0 || !eqShape(v.t.Shape, shape) {
		return false
	}
	b := c.bufs[v.buf]
	if b.input || b.output || c.isGraphOutputBuf(v.buf) {
		return false
	}
	return c.lastReadName[c.rootOf(name)] == c.groupIdx
}

func (c *compiler) isGraphOutputBuf(buf int) bool {
	for _, o := range c.m.outputs {
		if v := c.vals[o.Name]; v != nil && v.buf == buf {
			return true
		}
	}
	return false
}

// emit appends a kernel and updates buffer lifetimes.
func (c *compiler) emit(d draft) {
	if d.out.sp == SpaceArena && c.bufs[d.out.buf].zero {
		return
	}
	idx := len(c.drafts)
	for _, o := range d.in {
		if o.sp == SpaceArena {
			b := c.bufs[o.buf]
			b.last = max(b.last, idx)
			b.def = min(b.def, idx)
		}
	}
	if d.out.sp == SpaceArena {
		b := c.bufs[d.out.buf]
		b.def = min(b.def, idx)
		b.last = max(b.last, idx)
	}
	c.drafts = append(c.drafts, d)
}

func (c *compiler) node(g *group) *graph.Node { return c.rt[g.nodes[0]] }

// opsName joins the operators of a group.
func (c *compiler) opsName(g *group) string {
	var s []string
	for _, i := range g.nodes {
		s = append(s, c.rt[i].Op)
	}
	return strings.Join(s, "+")
}

// outName is the value a group finally produces.
func (c *compiler) outName(g *group) string {
	return c.rt[g.nodes[len(g.nodes)-1]].Outputs[0]
}

// bindOutputs makes sure every graph output has its own arena buffer.
func (c *compiler) bindOutputs() error {
	used := map[int]bool{}
	for _, o := range c.m.outputs {
		v, ok := c.vals[o.Name]
		if !ok {
			return fmt.Errorf("output %q is not produced", o.Name)
		}
		if !v.t.IsFloat() && !(v.buf != -1 && intStorage(v.t.DType)) {
			return fmt.Errorf("output %q is %s: outputs must be float32 (or a runtime uint8, int8, int32 or int64 tensor, returned as float32 values)", o.Name, v.t.DType)
		}
		if v.buf < 0 || c.bufs[v.buf].input || used[v.buf] {
			src, err := c.operand(o.Name)
			if err != nil {
				return err
			}
			nb := c.newBuf(v.t.Len())
			d := draft{k: Kernel{Op: OpCopy, Name: o.Name, Ops: "output"}, out: operand{sp: SpaceArena, buf: nb}}
			d.in[0] = src
			d.k.P[0] = 1
			d.k.P[1] = max(v.t.Len(), 1)
			d.k.P[7] = 1
			d.k.P[13] = 1
			c.emit(d)
			c.vals[o.Name] = &cval{t: v.t, buf: nb, name: o.Name}
			v = c.vals[o.Name]
		}
		used[v.buf] = true
		c.bufs[v.buf].output = true
		c.prog.Outputs = append(c.prog.Outputs, Binding{Name: o.Name, Shape: append([]int64{}, v.t.Shape...)})
	}
	return nil
}

// ---- planning --------------------------------------------------------------------

// plan assigns arena offsets: buffers whose lifetimes overlap get disjoint
// spans; largest first, each at the lowest offset that fits.
func (c *compiler) plan() {
	n := len(c.drafts)
	for _, b := range c.bufs {
		if b.input {
			b.def = -1
			if b.last < 0 {
				b.last = 0
			}
		}
		if b.output {
			b.last = n
		}
		if b.def > b.last {
			b.def, b.last = 0, 0
		}
		b.size = (b.size + 15) &^ 15
	}
	order := make([]int, len(c.bufs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool {
		x, y := c.bufs[order[a]], c.bufs[order[b]]
		if x.size != y.size {
			return x.size > y.size
		}
		return x.def < y.def
	})
	var placed []*cbuf
	var total int64
	for _, id := range order {
		b := c.bufs[id]
		var spans []Range
		for _, p := range placed {
			if p.def <= b.last && b.def <= p.last {
				spans = append(spans, Range{p.off, p.size})
			}
		}
		sort.Slice(spans, func(i, j int) bool { return spans[i].Off < spans[j].Off })
		var off int64
		for _, s := range spans {
			if off+b.size <= s.Off {
				break
			}
			off = max(off, s.Off+s.Len)
		}
		b.off = off
		total = max(total, off+b.size)
		placed = append(placed, b)
	}
	c.prog.ArenaFloats = total
}

// finish resolves operands to offsets and computes idempotent groups.
func (c *compiler) finish() {
	p := c.prog
	p.Consts = c.consts
	resolve := func(o operand) Ref {
		switch o.sp {
		case SpaceArena:
			return Ref{Space: SpaceArena, Off: c.bufs[o.buf].off + o.off}
		case SpaceWeights, SpaceConsts:
			return Ref{Space: o.sp, Off: o.off}
		}
		return Ref{}
	}
	for _, d := range c.drafts {
		k := d.k
		for j, o := range d.in {
			k.In[j] = resolve(o)
			if o.sp == SpaceArena {
				b := c.bufs[o.buf]
				k.Reads = append(k.Reads, Range{b.off, b.size})
			}
		}
		k.Out = resolve(d.out)
		if d.out.sp == SpaceArena {
			b := c.bufs[d.out.buf]
			k.Writes = append(k.Writes, Range{b.off, b.size})
		}
		if k.Flags&FlagInPlace != 0 {
			p.InPlace++
		}
		p.Kernels = append(p.Kernels, k)
	}
	for i := range p.Inputs {
		p.Inputs[i].Off = c.bufs[c.vals[p.Inputs[i].Name].buf].off
	}
	for i := range p.Outputs {
		p.Outputs[i].Off = c.bufs[c.vals[p.Outputs[i].Name].buf].off
	}
	p.IdemEntry = IdempotentEntries(p.Kernels)
}

// IdempotentEntries computes, for each kernel i, the first kernel j of the
// smallest group [j, i] that is idempotent as a whole (REEF §4.4): no arena
// byte the group reads before writing it is written by the group.
func IdempotentEntries(ks []Kernel) []int {
	out := make([]int, len(ks))
	for i := range ks {
		j := i
		for ; j > 0; j-- {
			if groupIdempotent(ks[j : i+1]) {
				break
			}
		}
		out[i] = j
	}
	return out
}

func groupIdempotent(ks []Kernel) bool {
	for k := range ks {
		for _, r := range ks[k].Reads {
			// the part of r not written earlier in the group is an input
			exposed := []Range{r}
			for e := 0; e < k; e++ {
				for _, w := range ks[e].Writes {
					exposed = subtract(exposed, w)
				}
			}
			for e := k; e < len(ks); e++ {
				for _, w := range ks[e].Writes {
					for _, x := range exposed {
						if x.Off < w.Off+w.Len && w.Off < x.Off+x.Len {
							return false
						}
					}
				}
			}
		}
	}
	return true
}

func subtract(rs []Range, w Range) []Range {
	var out []Range
	for _, r := range rs {
		if w.Off >= r.Off+r.Len || r.Off >= w.Off+w.Len {
			out = append(out, r)
			continue
		}
		if r.Off < w.Off {
			out = append(out, Range{r.Off, w.Off - r.Off})
		}
		if e := w.Off + w.Len; e < r.Off+r.Len {
			out = append(out, Range{e, r.Off + r.Len - e})
		}
	}
	return out
}

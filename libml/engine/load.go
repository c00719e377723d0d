// Package engine is libml's model compiler: it turns a graph.Graph into a
// linear sequence of kernels (ARCHITECTURE.md §3) with a static buffer plan
// per batch size.
//
// Load does the batch-independent work once per model: it checks every
// operator is supported, folds constant subgraphs, folds BatchNormalization
// into the preceding convolution, and copies the weights the kernels read
// into one arena that every instance of the model shares. Compile does the
// per-shape work: shape inference, folding of shape arithmetic, operator
// fusion (bias, residual add, activation into GEMM / convolution
// epilogues), lowering to kernels, in-place choices, the activation arena
// plan, and the idempotent groups a preempted run restarts from (REEF §4.4).
//
// The package is pure Go: backends (libml/cpu) turn a Program into their
// own kernel descriptors.
package engine

import (
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sort"
	"strings"

	"sluice/libml/graph"
)

// Options configure Load and Compile.
type Options struct {
	// Units is the number of compute units kernels are tiled for (0 = 1).
	Units int
	// Alloc allocates the weight arena (n float32s). nil allocates Go
	// memory; backends pass C memory so kernels can hold pointers to it.
	Alloc func(n int) ([]float32, error)
	// NoInPlace disables in-place elementwise kernels (every kernel is then
	// idempotent on its own).
	NoInPlace bool
	// NoFusion disables operator fusion (tests use it to run each operator
	// as its own kernel).
	NoFusion bool
	// NoWinograd keeps 3x3 convolutions on the direct path: for backends
	// whose kernels have no Winograd variant (cuda).
	NoWinograd bool
	// NoPanels keeps the constant B of every MatMul and Gemm row-major:
	// for backends whose GEMM reads no panels (cuda; see addPanelWeights).
	NoPanels bool
	// NoPointwiseDW runs a pointwise convolution and the depthwise one
	// that reads its output as two kernels: for backends without the
	// fused kernel (cuda; see fusePointwiseDW).
	NoPointwiseDW bool
	// DepthwiseVectorWidth is the widest input row on which the
	// backend's float 3x3 depthwise kernel is faster alone than fused
	// with the pointwise convolution before it (the cpu backend's,
	// 16 channels a vector on AVX-512: native/cpu DepthwiseVectorWidth);
	// such pairs stay two kernels. 0: fuse at any width.
	DepthwiseVectorWidth int
	// NoByteIntegers keeps every 8-bit integer tensor in float32 slots:
	// for backends whose kernels read and write no bytes (cuda; see
	// byteIntegers).
	NoByteIntegers bool
	// MemoryLimit is the most bytes one model may take in its backend's
	// memory: its weights, and for each compiled program its activation
	// arena and constants besides (0: no limit). A model above it is
	// refused with a *MemoryLimitError, before that memory is allocated.
	MemoryLimit int64
	// NoConvRows keeps every integer convolution's product in QGEMM's
	// column form (rowsConv): for backends without the transposed one
	// (cuda), and CPUs whose AMX tiles run the column form.
	NoConvRows bool
	// DetMaxOrder is the largest M the backend's DET kernel factorises
	// (0: the cpu's, 1024). A Det of larger matrices is refused with an
	// *UnsupportedError, so ONNX Runtime can serve the model (the cuda
	// kernel holds one matrix in shared memory: 32).
	DetMaxOrder int
}

// MemoryLimitError is a model that needs more memory than its
// Options.MemoryLimit.
type MemoryLimitError struct {
	Model string
	What  string // "weights", or the program's shapes
	Need  int64  // bytes
	Limit int64  // bytes
}

// Error says how much the model needs and its limit, in MiB.
func (e *MemoryLimitError) Error() string {
	return fmt.Sprintf("model %q needs %.1f MiB for %s, above its memory limit of %.1f MiB",
		e.Model, float64(e.Need)/(1<<20), e.What, float64(e.Limit)/(1<<20))
}

// checkMemory returns a *MemoryLimitError when need bytes exceed the
// model's limit.
func (m *Model) checkMemory(what string, need int64) error {
	if m.opts.MemoryLimit > 0 && need > m.opts.MemoryLimit {
		return &MemoryLimitError{Model: m.name, What: what, Need: need, Limit: m.opts.MemoryLimit}
	}
	return nil
}

// Model is a loaded model: its graph after load-time rewriting and its
// weights, shared by every program compiled from it.
type Model struct {
	name    string
	opset   int64
	nodes   []graph.Node
	consts  map[string]*Tensor
	inputs  []graph.ValueInfo
	outputs []graph.ValueInfo
	weights []float32
	wOff    map[string]int64
	opts    Options
	// panelSrc are the constants addPanelWeights has loadWeights write in
	// panels (nil after load)
	panelSrc map[string]panelJob
	// FoldedBN counts BatchNormalization nodes folded into convolutions.
	FoldedBN int
}

// UnsupportedError reports an operator the engine cannot run.
type UnsupportedError struct {
	Op, Domain, Node string
	// Why, when set, says what of a supported operator's use is not.
	Why string
}

// Error names the operator, the node and the supported operators.
func (e *UnsupportedError) Error() string {
	op := e.Op
	if e.Domain != "" && e.Domain != "ai.onnx" {
		op = e.Domain + "::" + e.Op
	}
	if e.Why != "" {
		return fmt.Sprintf("unsupported use of operator %s (node %q): %s", op, e.Node, e.Why)
	}
	return fmt.Sprintf("unsupported operator %s (node %q); supported: %s",
		op, e.Node, strings.Join(SupportedOps(), ", "))
}

// nodeOp is n's operator as the engine's tables name it: its name in the
// default domain ("" or "ai.onnx"), "domain.Op" in any other.
func nodeOp(n *graph.Node) string {
	if n.Domain == "" || n.Domain == "ai.onnx" {
		return n.Op
	}
	return n.Domain + "." + n.Op
}

// InternalError is a fault of the engine on a model it did not foresee
// (a panic in the loader or the compiler, recovered): the model is
// refused, the process goes on. FuzzCompile looks for them.
type InternalError struct {
	What, Model string // "load" or "compile"; the graph's name
	Value       any    // what the fault was
	Stack       []byte
}

// Error names the fault and the model.
func (e *InternalError) Error() string {
	return fmt.Sprintf("engine: %s %q: internal error on this model: %v", e.What, e.Model, e.Value)
}

// recoverInternal, deferred by Load and the compiler's entries, turns a
// panic into an *InternalError in *err: what ("load" or "compile") of
// model.
func recoverInternal(err *error, what, model string) {
	if p := recover(); p != nil {
		*err = &InternalError{What: what, Model: model, Value: p, Stack: debug.Stack()}
	}
}

// Load checks and rewrites g and loads its weights. g is not modified;
// float initializers are copied into the weight arena.
//
// A model the loader cannot make sense of is an error, never a panic: a
// fault in the loader on some input it did not foresee comes back as an
// *InternalError.
func Load(g *graph.Graph, opts Options) (m *Model, err error) {
	if g == nil {
		return nil, fmt.Errorf("engine: nil graph")
	}
	defer recoverInternal(&err, "load", g.Name)
	return load(g, opts)
}

func load(g *graph.Graph, opts Options) (*Model, error) {
	if opts.Units < 1 {
		opts.Units = 1
	}
	opset := g.Opset
	if opset == 0 {
		opset = 17
	}
	m := &Model{name: g.Name, opset: opset, consts: map[string]*Tensor{}, opts: opts}
	inits := make(map[string]*graph.Tensor, len(g.Initializers))
	for _, t := range g.Initializers {
		inits[t.Name] = t
	}
	gnodes := fuseQDQ(g, inits) // QDQ patterns into integer operators (qdq.go)
	for _, n := range gnodes {
		if !Supported(nodeOp(&n)) {
			return nil, fmt.Errorf("engine: load %q: %w", g.Name, &UnsupportedError{Op: n.Op, Domain: n.Domain, Node: n.Name})
		}
		if !slices.ContainsFunc(n.Outputs, func(o string) bool { return o != "" }) {
			return nil, fmt.Errorf("engine: load %q: node %q (%s) has no output", g.Name, n.Name, n.Op)
		}
	}
	for _, t := range g.Initializers {
		c, err := FromGraph(t)
		if err != nil {
			return nil, fmt.Errorf("engine: load %q: initializer: %w", g.Name, err)
		}
		m.consts[t.Name] = c
	}
	for _, in := range g.Inputs {
		if _, ok := m.consts[in.Name]; !ok {
			m.inputs = append(m.inputs, in)
		}
	}
	if len(m.inputs) == 0 {
		return nil, fmt.Errorf("engine: load %q: the graph has no runtime input", g.Name)
	}
	m.outputs = append(m.outputs, g.Outputs...)
	if len(m.outputs) == 0 {
		return nil, fmt.Errorf("engine: load %q: the graph has no output", g.Name)
	}
	// fold constant subgraphs; an If whose condition is known by now
	// gives way to its branch's nodes (ifop.go)
	queue := append([]graph.Node(nil), gnodes...)
	addInits := func(what string, inits []*graph.Tensor) error {
		for _, t := range inits {
			c, err := FromGraph(t)
			if err != nil {
				return fmt.Errorf("engine: load %q: %s: initializer: %w", g.Name, what, err)
			}
			m.consts[t.Name] = c
		}
		return nil
	}
	loops := map[string]*loopState{}
	for ifs, nloops, nscans := 0, 0, 0; len(queue) > 0; {
		n := queue[0]
		queue = queue[1:]
		n.Inputs = append([]string{}, n.Inputs...)
		n.Outputs = append([]string{}, n.Outputs...)
		if n.Op == "Scan" {
			// unrolled whole, its length known at load (scanop.go)
			s, err := newScan(&n, opset, m.loadShapes)
			if err != nil {
				return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
			}
			nscans++
			nodes, inits := s.unroll(&n, fmt.Sprintf("scan%d/", nscans), opset)
			if err := addInits("Scan "+n.Name, inits); err != nil {
				return nil, err
			}
			queue = append(nodes, queue...)
			continue
		}
		if n.Op == "Loop" || n.Op == loopNextOp {
			// unrolled an iteration at a time (loopop.go)
			var s *loopState
			var err error
			if n.Op == "Loop" {
				nloops++
				id := fmt.Sprintf("loop%d", nloops)
				if s, err = newLoop(&n, m.consts); err != nil {
					return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
				}
				loops[id] = s
				n.Name = id
			} else {
				s = loops[n.Name]
			}
			more := s.trips != 0
			if more && n.Op == loopNextOp {
				if more, err = s.more(m.consts); err != nil {
					return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
				}
			}
			var nodes []graph.Node
			var inits []*graph.Tensor
			if more {
				nodes, inits = s.next(fmt.Sprintf("%s/%d/", n.Name, s.iter), n.Name)
			} else {
				if nodes, inits, err = s.finish(n.Name+"/", opset); err != nil {
					return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
				}
				delete(loops, n.Name)
			}
			if err := addInits("Loop "+s.n.Name, inits); err != nil {
				return nil, err
			}
			queue = append(nodes, queue...)
			continue
		}
		if n.Op == "CastLike" && len(n.Inputs) == 2 && (n.Domain == "" || n.Domain == "ai.onnx") {
			castLikeToCast(&n, g, inits)
		}
		if nodes, inits, ok, err := decompose(&n, opset); ok {
			// an operator the loader rewrites (decompose.go)
			if err != nil {
				return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
			}
			if err := addInits(n.Op+" "+n.Name, inits); err != nil {
				return nil, err
			}
			queue = append(nodes, queue...)
			continue
		}
		if op := nodeOp(&n); !Supported(op) && op != opSelect {
			return nil, fmt.Errorf("engine: load %q: %w", g.Name, &UnsupportedError{Op: n.Op, Domain: n.Domain, Node: n.Name})
		}
		if n.Op == "If" {
			if len(n.Inputs) != 1 || n.Inputs[0] == "" {
				return nil, fmt.Errorf("engine: load %q: If %q: %d inputs, want the condition", g.Name, n.Name, len(n.Inputs))
			}
			cond, ok := m.consts[n.Inputs[0]]
			if !ok {
				// a run-time condition: both branches run, a Select per
				// output keeps the taken one's value (ifop.go)
				ifs++
				nodes, inits, err := inlineIfBoth(&n, fmt.Sprintf("if%d/", ifs))
				if err != nil {
					return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
				}
				if err := addInits("If "+n.Name, inits); err != nil {
					return nil, err
				}
				queue = append(nodes, queue...)
				continue
			}
			b, err := ifBranch(&n, cond)
			if err != nil {
				return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
			}
			ifs++
			nodes, inits := inlineIf(&n, b, fmt.Sprintf("if%d/", ifs))
			if err := addInits("If "+n.Name, inits); err != nil {
				return nil, err
			}
			queue = append(nodes, queue...)
			continue
		}
		if allConst(&n, m.consts) {
			ins := make([]*Tensor, len(n.Inputs))
			for j, name := range n.Inputs {
				if name != "" {
					ins[j] = m.consts[name]
				}
			}
			outs, err := Eval(&n, opset, ins)
			if err != nil {
				return nil, fmt.Errorf("engine: load %q: folding: %w", g.Name, err)
			}
			for j, o := range n.Outputs {
				if o != "" && j < len(outs) {
					m.consts[o] = outs[j]
				}
			}
			continue
		}
		m.nodes = append(m.nodes, n)
	}
	if err := m.foldBatchNorm(); err != nil {
		return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
	}
	m.foldConvAffine()
	m.fuseGelu()
	m.fuseHardSwish()
	m.fusePadConv()
	m.splitRuntimeClip()
	m.lowerCastF16()
	m.dropDead()
	if err := m.loadWeights(); err != nil {
		return nil, fmt.Errorf("engine: load %q: %w", g.Name, err)
	}
	return m, nil
}

// fusePadConv folds a Pad into the Conv that alone reads it when the Pad
// adds zeros on the spatial dimensions only (constant mode, value 0,
// non-negative pads, none on N or C) and the Conv pads explicitly (no
// auto_pad): the Conv's pads grow by the Pad's and the padded tensor is
// never built (exported TensorFlow and Keras models pad so).
func (m *Model) fusePadConv() {
	cons := m.consumers()
	prod := map[string]int{}
	for i := range m.nodes {
		for _, o := range m.nodes[i].Outputs {
			prod[o] = i
		}
	}
	for ci := range m.nodes {
		cv := &m.nodes[ci]
		if cv.Op != "Conv" || len(cv.Inputs) < 2 || cons[cv.Inputs[0]] != 1 {
			continue
		}
		if ap := cv.AttrString("auto_pad", "NOTSET"); ap != "NOTSET" && ap != "" {
			continue
		}
		pi, ok := prod[cv.Inputs[0]]
		w := m.consts[cv.Inputs[1]]
		if !ok || w == nil || len(w.Shape) < 3 {
			continue
		}
		pn := &m.nodes[pi]
		if pn.Op != "Pad" || (pn.Domain != "" && pn.Domain != "ai.onnx") || len(pn.Inputs) < 1 {
			continue
		}
		ins := make([]*Tensor, len(pn.Inputs))
		known := true
		for i, in := range pn.Inputs {
			if i > 0 && in != "" {
				ins[i] = m.consts[in]
				known = known && ins[i] != nil // else pads or value computed at run time
			}
		}
		r := len(w.Shape)
		mode, begin, end, value, err := padArgs(&ev{n: pn, opset: m.opset, ins: ins}, r)
		if !known || err != nil || mode != "constant" || value != 0 || begin[0] != 0 || begin[1] != 0 || end[0] != 0 || end[1] != 0 {
			continue
		}
		pads := cv.AttrInts("pads", make([]int64, 2*(r-2)))
		if len(pads) != 2*(r-2) {
			continue
		}
		fused := make([]int64, len(pads))
		ok = true
		for d := 0; d < r-2; d++ {
			if begin[2+d] < 0 || end[2+d] < 0 {
				ok = false
			}
			fused[d], fused[r-2+d] = pads[d]+begin[2+d], pads[r-2+d]+end[2+d]
		}
		if !ok {
			continue
		}
		attrs := []graph.Attr{{Name: "pads", Kind: graph.AttrInts, Ints: fused}}
		for _, a := range cv.Attrs {
			if a.Name != "pads" && a.Name != "auto_pad" {
				attrs = append(attrs, a)
			}
		}
		cv.Attrs = attrs
		cv.Inputs = append([]string{pn.Inputs[0]}, cv.Inputs[1:]...) // the Pad, unread, is dropped
	}
}

// castLikeToCast makes CastLike n a Cast to its second input's type when
// the graph declares that type (a graph input or an initializer), so that
// a CastLike to float16 rounds as a Cast does (lowerCastF16). A CastLike
// of an intermediate value stays one: the engine's values carry float32
// for every float type, and that is the type it casts to.
func castLikeToCast(n *graph.Node, g *graph.Graph, inits map[string]*graph.Tensor) {
	like := n.Inputs[1]
	to := graph.DType(0)
	if t := inits[like]; t != nil {
		to = t.DType
	}
	for _, in := range g.Inputs {
		if in.Name == like && in.DType != 0 {
			to = in.DType
		}
	}
	if to != 0 {
		n.Op, n.Inputs = "Cast", n.Inputs[:1]
		n.Attrs = []graph.Attr{{Name: "to", Kind: graph.AttrInt, I: int64(to)}}
	}
}

// lowerCastF16 makes every Cast to FLOAT16 of a float value round it (the
// engine keeps float16 values in float32): the node becomes the ActF16
// activation instead of an alias of its input.
func (m *Model) lowerCastF16() {
	for i := range m.nodes {
		n := &m.nodes[i]
		if n.Op == "Cast" && graph.DType(n.AttrInt("to", 0)) == graph.Float16 {
			n.Op = opCastF16
		}
	}
}

// splitRuntimeClip rewrites a Clip whose min or max is computed at run
// time (not a constant the activation can hold) into Max(x, min) and
// Min(·, max), which run as broadcasting binary kernels:
// min(max(x, lo), hi) is Clip's definition, also when lo > hi (every value
// becomes hi). A Clip with constant bounds is left to the activation.
func (m *Model) splitRuntimeClip() {
	var out []graph.Node
	for _, n := range m.nodes {
		if n.Op != "Clip" || len(n.Inputs) < 2 || m.opset < 11 {
			out = append(out, n)
			continue
		}
		runtime := false // or a constant the activation cannot hold
		for _, in := range n.Inputs[1:] {
			if c, ok := m.consts[in]; in != "" && (!ok || c.Len() != 1) {
				runtime = true
			}
		}
		if !runtime {
			out = append(out, n)
			continue
		}
		x, y := n.Inputs[0], n.Outputs[0]
		lo, hi := n.Inputs[1], ""
		if len(n.Inputs) > 2 {
			hi = n.Inputs[2]
		}
		if lo != "" {
			t := y
			if hi != "" {
				t = y + "#clip_lo"
			}
			out = append(out, graph.Node{Name: n.Name + "#max", Op: "Max", Inputs: []string{x, lo}, Outputs: []string{t}})
			x = t
		}
		if hi != "" {
			out = append(out, graph.Node{Name: n.Name + "#min", Op: "Min", Inputs: []string{x, hi}, Outputs: []string{y}})
		}
	}
	m.nodes = out
}

func allConst(n *graph.Node, consts map[string]*Tensor) bool {
	if n.Op == "Constant" {
		return true
	}
	any := false
	for _, in := range n.Inputs {
		if in == "" {
			continue
		}
		if _, ok := consts[in]; !ok {
			return false
		}
		any = true
	}
	return any || n.Op == "ConstantOfShape" || n.Op == "Range"
}

// consumers counts the readers of each value (graph outputs count as one).
func (m *Model) consumers() map[string]int {
	c := map[string]int{}
	for i := range m.nodes {
		for _, in := range m.nodes[i].Inputs {
			if in != "" {
				c[in]++
			}
		}
	}
	for _, o := range m.outputs {
		c[o.Name] += 1 << 20 // never fused away
	}
	return c
}

// foldBatchNorm folds BatchNormalization into a preceding Conv or
// ConvTranspose whose output only it reads: W' = W*s, B' = (B-mean)*s+beta
// with s = gamma/sqrt(var+eps).
func (m *Model) foldBatchNorm() error {
	cons := m.consumers()
	prod := map[string]int{}
	for i := range m.nodes {
		for _, o := range m.nodes[i].Outputs {
			prod[o] = i
		}
	}
	drop := map[int]bool{}
	for i := range m.nodes {
		bn := &m.nodes[i]
		if bn.Op != "BatchNormalization" || len(bn.Inputs) < 5 {
			continue
		}
		if len(bn.Outputs) > 1 {
			extra := false
			for _, o := range bn.Outputs[1:] {
				extra = extra || o != ""
			}
			if extra {
				continue
			}
		}
		pi, ok := prod[bn.Inputs[0]]
		if !ok || drop[pi] || cons[bn.Inputs[0]] != 1 {
			continue
		}
		cv := &m.nodes[pi]
		if cv.Op != "Conv" && cv.Op != "ConvTranspose" {
			continue
		}
		var p [4]*Tensor
		okp := true
		for j := range p {
			p[j] = m.consts[bn.Inputs[j+1]]
			okp = okp && p[j] != nil && p[j].IsFloat()
		}
		w := m.consts[cv.Inputs[1]]
		if !okp || w == nil || !w.IsFloat() || len(w.Shape) < 3 {
			continue
		}
		var b *Tensor
		if len(cv.Inputs) > 2 && cv.Inputs[2] != "" {
			b = m.consts[cv.Inputs[2]]
			if b == nil || !b.IsFloat() {
				continue
			}
		}
		G := cv.AttrInt("group", 1)
		var M int64
		if cv.Op == "Conv" {
			M = w.Shape[0]
		} else {
			M = w.Shape[1] * G
		}
		for j := range p {
			if p[j].Len() != M {
				return fmt.Errorf("BatchNormalization %q: %d channels, convolution %q has %d", bn.Name, p[j].Len(), cv.Name, M)
			}
		}
		eps := float64(bn.AttrFloat("epsilon", 1e-5))
		s := make([]float64, M)
		nb := NewFloat([]int64{M}, nil)
		for c := int64(0); c < M; c++ {
			s[c] = float64(p[0].F[c]) / math.Sqrt(float64(p[3].F[c])+eps)
			bv := 0.0
			if b != nil {
				bv = float64(b.F[c])
			}
			nb.F[c] = float32((bv-float64(p[2].F[c]))*s[c] + float64(p[1].F[c]))
		}
		nw := NewFloat(w.Shape, nil)
		per := numel(w.Shape[2:])
		if cv.Op == "Conv" {
			inner := numel(w.Shape[1:])
			for j := range nw.F {
				nw.F[j] = float32(float64(w.F[j]) * s[int64(j)/inner])
			}
		} else {
			Mg := w.Shape[1]
			Cg := w.Shape[0] / G
			for j := range nw.F {
				ic := int64(j) / (Mg * per)
				oc := (ic/Cg)*Mg + int64(j)/per%Mg
				nw.F[j] = float32(float64(w.F[j]) * s[oc])
			}
		}
		wn, bname := cv.Name+"#W_bn", cv.Name+"#B_bn"
		for m.consts[wn] != nil || m.consts[bname] != nil {
			wn, bname = wn+"'", bname+"'"
		}
		m.consts[wn], m.consts[bname] = nw, nb
		ins := []string{cv.Inputs[0], wn, bname}
		cv.Inputs = ins
		cv.Outputs = []string{bn.Outputs[0]}
		drop[i] = true
		m.FoldedBN++
	}
	if len(drop) > 0 {
		kept := m.nodes[:0]
		for i := range m.nodes {
			if !drop[i] {
				kept = append(kept, m.nodes[i])
			}
		}
		m.nodes = kept
	}
	return nil
}

// scalarConst returns the value of a one-element float constant.
func (m *Model) scalarConst(name string) (float64, bool) {
	t := m.consts[name]
	if t == nil || t.Len() != 1 || !t.known() {
		return 0, false
	}
	return t.at(0), true
}

// fuseGelu rewrites GELU as exporters spell it through Erf,
// x * 0.5 * (1 + erf(x / sqrt 2)) in its usual orders, into one Gelu node,
// which then fuses into the preceding GEMM's epilogue.
func (m *Model) fuseGelu() {
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
	near := func(v, want float64) bool { return math.Abs(v-want) < 1e-4*math.Max(1, math.Abs(want)) }
	// other returns the input of binary node n that is not v
	other := func(n *graph.Node, v string) string {
		if len(n.Inputs) != 2 {
			return ""
		}
		if n.Inputs[0] == v {
			return n.Inputs[1]
		}
		if n.Inputs[1] == v {
			return n.Inputs[0]
		}
		return ""
	}
	single := func(v string) (int, bool) {
		if cons[v] != 1 || len(readers[v]) != 1 {
			return 0, false
		}
		return readers[v][0], true
	}
	drop := map[int]bool{}
	for ei := range m.nodes {
		erf := &m.nodes[ei]
		if erf.Op != "Erf" || drop[ei] {
			continue
		}
		di, ok := prod[erf.Inputs[0]]
		if !ok || cons[erf.Inputs[0]] != 1 {
			continue
		}
		dn := &m.nodes[di]
		if len(dn.Inputs) != 2 {
			continue
		}
		x := dn.Inputs[0]
		c, ok := m.scalarConst(dn.Inputs[1])
		switch {
		case dn.Op == "Div" && ok && near(c, math.Sqrt2):
		case dn.Op == "Mul" && ok && near(c, 1/math.Sqrt2):
		case dn.Op == "Mul":
			if c2, ok2 := m.scalarConst(dn.Inputs[0]); ok2 && near(c2, 1/math.Sqrt2) {
				x = dn.Inputs[1]
				break
			}
			continue
		default:
			continue
		}
		ai, ok := single(erf.Outputs[0])
		if !ok || m.nodes[ai].Op != "Add" {
			continue
		}
		an := &m.nodes[ai]
		if one, ok := m.scalarConst(other(an, erf.Outputs[0])); !ok || one != 1 {
			continue
		}
		// x * a * 0.5 in any grouping: collect the product chain from a
		mi, ok := single(an.Outputs[0])
		if !ok || m.nodes[mi].Op != "Mul" {
			continue
		}
		mn := &m.nodes[mi]
		o := other(mn, an.Outputs[0])
		var final int
		var chain []int
		switch {
		case o == x: // Mul(x, a) then Mul(., 0.5)
			fi, ok := single(mn.Outputs[0])
			if !ok || m.nodes[fi].Op != "Mul" {
				continue
			}
			if h, ok := m.scalarConst(other(&m.nodes[fi], mn.Outputs[0])); !ok || h != 0.5 {
				continue
			}
			final, chain = fi, []int{mi}
		default:
			if h, ok := m.scalarConst(o); ok && h == 0.5 { // Mul(a, 0.5) then Mul(x, .)
				fi, ok := single(mn.Outputs[0])
				if !ok || m.nodes[fi].Op != "Mul" || other(&m.nodes[fi], mn.Outputs[0]) != x {
					continue
				}
				final, chain = fi, []int{mi}
				break
			}
			// Mul(Mul(x, 0.5), a)
			pi, ok := prod[o]
			if !ok || cons[o] != 1 || m.nodes[pi].Op != "Mul" || other(&m.nodes[pi], x) == "" {
				continue
			}
			if h, ok := m.scalarConst(other(&m.nodes[pi], x)); !ok || h != 0.5 {
				continue
			}
			final, chain = mi, []int{pi}
		}
		fn := &m.nodes[final]
		out := fn.Outputs[0]
		*fn = graph.Node{Name: erf.Name + "#gelu", Op: "Gelu", Inputs: []string{x}, Outputs: []string{out}}
		for _, i := range append(chain, di, ei, ai) {
			drop[i] = true
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

// dropDead removes nodes none of whose outputs is read.
func (m *Model) dropDead() {
	live := map[string]bool{}
	for _, o := range m.outputs {
		live[o.Name] = true
	}
	keep := make([]bool, len(m.nodes))
	for i := len(m.nodes) - 1; i >= 0; i-- {
		n := &m.nodes[i]
		for _, o := range n.Outputs {
			if live[o] {
				keep[i] = true
			}
		}
		if keep[i] {
			for _, in := range n.Inputs {
				if in != "" {
					live[in] = true
				}
			}
		}
	}
	kept := m.nodes[:0]
	for i := range m.nodes {
		if keep[i] {
			kept = append(kept, m.nodes[i])
		}
	}
	m.nodes = kept
	for name := range m.consts {
		if !live[name] {
			delete(m.consts, name)
		}
	}
}

// loadWeights copies every float constant the remaining nodes (or the
// outputs) read into one arena, 16-float aligned.
func (m *Model) loadWeights() error {
	if !m.opts.NoWinograd {
		m.addWinogradWeights()
	}
	m.packQuantWeights()
	if !m.opts.NoPanels {
		m.addPanelWeights()
	}
	var names []string
	for name, t := range m.consts {
		// a float weight kept only in a packed form has no data
		if _, pack := m.panelSrc[name]; t.IsFloat() && (t.F != nil || pack) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	m.wOff = map[string]int64{}
	var total int64
	for _, name := range names {
		m.wOff[name] = total
		total += (m.consts[name].Len() + 15) &^ 15
	}
	if total == 0 {
		total = 16
	}
	if err := m.checkMemory("its weights", 4*total); err != nil {
		return err
	}
	alloc := m.opts.Alloc
	if alloc == nil {
		alloc = func(n int) ([]float32, error) { return make([]float32, n), nil }
	}
	w, err := alloc(int(total))
	if err != nil {
		return fmt.Errorf("weights (%d floats): %w", total, err)
	}
	if int64(len(w)) < total {
		return fmt.Errorf("weights: allocator gave %d floats, want %d", len(w), total)
	}
	for _, name := range names {
		t := m.consts[name]
		off := m.wOff[name]
		n := t.Len()
		if job, ok := m.panelSrc[name]; ok {
			job.pack(w[off : off+n])
		} else {
			copy(w[off:off+n], t.F)
		}
		// keep the constant, backed by the arena (the original may go)
		m.consts[name] = &Tensor{DType: graph.Float32, Shape: t.Shape, F: w[off : off+n : off+n]}
	}
	m.weights = w[:total]
	m.panelSrc = nil
	return nil
}

// winogradSuffix names the Winograd-domain copy of a 3x3 weight tensor.
const winogradSuffix = "#winograd"

// addWinogradWeights adds, for every convolution whose weights could run
// as Winograd F(2x2, 3x3) (ungrouped 3x3, stride 1, dilation 1, enough
// channels), the transformed weights as a model constant, so they live
// once in the shared weight arena rather than in every batch size's
// program. Whether a convolution actually takes the Winograd path also
// depends on its output size, decided when a program is compiled.
func (m *Model) addWinogradWeights() {
	ones := func(v []int64) bool {
		for _, x := range v {
			if x != 1 {
				return false
			}
		}
		return true
	}
	for i := range m.nodes {
		n := &m.nodes[i]
		if n.Op != "Conv" || len(n.Inputs) < 2 || n.AttrInt("group", 1) != 1 ||
			!ones(n.AttrInts("strides", nil)) || !ones(n.AttrInts("dilations", nil)) {
			continue
		}
		w := m.consts[n.Inputs[1]]
		if w == nil || !w.IsFloat() || len(w.Shape) != 4 || w.Shape[2] != 3 || w.Shape[3] != 3 ||
			w.Shape[0] < 16 || w.Shape[1] < 16 {
			continue
		}
		name := n.Inputs[1] + winogradSuffix
		if _, ok := m.consts[name]; ok {
			continue
		}
		cout, cin := w.Shape[0], w.Shape[1]
		// [16][ceil(cout/32)][cin][32]: see winogradWeights
		m.consts[name] = &Tensor{DType: graph.Float32, Shape: []int64{16, (cout + GemmPanel - 1) / GemmPanel, cin, GemmPanel}, F: winogradWeights(w.F, cout, cin)}
	}
}

// Name is the graph's name.
func (m *Model) Name() string { return m.name }

// Opset is the default-domain operator set version.
func (m *Model) Opset() int64 { return m.opset }

// Inputs are the runtime inputs (graph inputs that are not initializers).
func (m *Model) Inputs() []graph.ValueInfo { return m.inputs }

// Outputs are the graph outputs.
func (m *Model) Outputs() []graph.ValueInfo { return m.outputs }

// Weights is the weight arena every program of the model reads.
func (m *Model) Weights() []float32 { return m.weights }

// WeightBytes is the size of the weight arena.
func (m *Model) WeightBytes() int64 { return int64(len(m.weights)) * 4 }

// NumNodes is the number of nodes left after load-time folding.
func (m *Model) NumNodes() int { return len(m.nodes) }

// Units is the unit count kernels are tiled for.
func (m *Model) Units() int { return m.opts.Units }

// BatchShapes returns the runtime input shapes for a batch size: every
// input's first dimension becomes batch (it must be dynamic or equal batch);
// every other dimension must be fixed.
func (m *Model) BatchShapes(batch int) (map[string][]int64, error) {
	out := map[string][]int64{}
	for _, in := range m.inputs {
		if len(in.Dims) == 0 {
			return nil, fmt.Errorf("input %q is a scalar: no batch dimension", in.Name)
		}
		s := append([]int64{}, in.Dims...)
		if s[0] > 0 && s[0] != int64(batch) {
			return nil, fmt.Errorf("input %q has a fixed first dimension %d, not a batch of %d", in.Name, s[0], batch)
		}
		s[0] = int64(batch)
		for i, d := range s[1:] {
			if d <= 0 {
				return nil, fmt.Errorf("input %q: dimension %d is dynamic; give its size", in.Name, i+1)
			}
		}
		out[in.Name] = s
	}
	return out, nil
}

// BatchDynamic reports whether every input's first dimension is dynamic
// (not fixed in the graph).
func (m *Model) BatchDynamic() bool {
	for _, in := range m.inputs {
		if len(in.Dims) == 0 || in.Dims[0] > 0 {
			return false
		}
	}
	return true
}

package ort

import (
	"context"
	"fmt"
	"runtime"
	"sync"

	ortgo "github.com/yalue/onnxruntime_go"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/graph"
	"sluice/libml/onnx"
)

// Options configures the ort backend.
type Options struct {
	// LibraryPath is the path of libonnxruntime.so; "" means LibraryPath().
	LibraryPath string
	// IntraOpThreads is ONNX Runtime's intra-op thread count per session;
	// 0 takes BackendConfig.Units, and when that is 0 too, ONNX Runtime's
	// default (one per core). Set it to the engine's unit count to compare
	// the two at equal threads.
	IntraOpThreads int
	// NoSpin stops idle intra-op threads from spinning (less CPU burnt
	// between runs, a little more latency).
	NoSpin bool
	// Quiet keeps ONNX Runtime from logging anything short of a fatal
	// error to stderr (errors still come back as Go errors).
	Quiet bool
	// ProfilePrefix, when set, turns on ONNX Runtime's own profiler for
	// every session: each writes a JSON trace (per node, per run) named
	// from this prefix when it is closed. A diagnostic for tools, never
	// set by the product.
	ProfilePrefix string
}

// Backend is the ort backend. Create it with New; it is safe for concurrent
// use once Init has returned.
type Backend struct {
	opts Options

	mu      sync.Mutex
	inited  bool
	threads int
	// open counts open instances and sessions, so Deinit can refuse
	// while any is open.
	open int
}

var _ libml.Backend = (*Backend)(nil)

// New returns an ort backend; call Init before anything else.
func New(opts Options) *Backend {
	return &Backend{opts: opts}
}

// Name is "ort".
func (b *Backend) Name() string { return "ort" }

// Init loads ONNX Runtime. cfg.Units sets the intra-op thread count unless
// Options.IntraOpThreads does; PinUnits is ignored (ONNX Runtime owns its
// threads).
func (b *Backend) Init(ctx context.Context, cfg libml.BackendConfig) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ort: init: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.inited {
		return fmt.Errorf("ort: init: already initialized")
	}
	lib := b.opts.LibraryPath
	if lib == "" {
		var err error
		if lib, err = LibraryPath(); err != nil {
			return err
		}
	}
	if err := acquireEnv(lib); err != nil {
		return err
	}
	b.threads = b.opts.IntraOpThreads
	if b.threads == 0 {
		b.threads = cfg.Units
	}
	if b.threads < 0 {
		b.threads = 0
	}
	b.inited = true
	return nil
}

// Deinit releases ONNX Runtime; every instance must be closed first.
func (b *Backend) Deinit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.inited {
		return fmt.Errorf("ort: deinit: not initialized")
	}
	if b.open > 0 {
		return fmt.Errorf("ort: deinit: %d instances still open", b.open)
	}
	b.inited = false
	return releaseEnv()
}

// Threads is the intra-op thread count sessions are created with (0: ONNX
// Runtime's default).
func (b *Backend) Threads() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.threads
}

func (b *Backend) sessionOptions() (*ortgo.SessionOptions, error) {
	threads := b.Threads()
	so, err := ortgo.NewSessionOptions()
	if err != nil {
		return nil, err
	}
	if threads > 0 {
		err = so.SetIntraOpNumThreads(threads)
	}
	if err == nil {
		err = so.SetInterOpNumThreads(1)
	}
	if err == nil && b.opts.Quiet {
		err = so.SetLogSeverityLevel(ortgo.LoggingLevelFatal)
	}
	if err == nil && b.opts.ProfilePrefix != "" {
		err = so.EnableProfiling(b.opts.ProfilePrefix)
	}
	if err == nil && b.opts.NoSpin {
		err = so.AddSessionConfigEntry("session.intra_op.allow_spinning", "0")
	}
	if err != nil {
		so.Destroy()
		return nil, err
	}
	return so, nil
}

// addOpen counts an instance or session in (d > 0, which fails when the
// backend is not initialized) or out.
func (b *Backend) addOpen(d int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if d > 0 && !b.inited {
		return fmt.Errorf("ort: backend not initialized")
	}
	b.open += d
	return nil
}

// ModelOptions tune how LoadONNX maps a model onto libml's one-input,
// one-output instances.
type ModelOptions struct {
	// Input names the model input fed with the request data; "" means the
	// model's only input.
	Input string
	// Output names the model output returned; "" means the first output.
	Output string
	// InputShape fixes the per-request input shape (batch dimension
	// excluded) of a model whose input dimensions are dynamic.
	InputShape []int64
}

// LoadModelBytes loads an ONNX file's bytes (libml.ModelBytesLoader);
// inputShape fixes a dynamic per-request input shape.
func (b *Backend) LoadModelBytes(ctx context.Context, name string, data []byte, inputShape []int64) (libml.Instance, error) {
	return b.LoadONNX(ctx, name, data, ModelOptions{InputShape: inputShape})
}

var _ libml.ModelBytesLoader = (*Backend)(nil)

// LoadModel encodes g as ONNX and loads it into ONNX Runtime. Its only
// input must have fixed dimensions apart from the batch dimension.
func (b *Backend) LoadModel(ctx context.Context, name string, g *graph.Graph) (libml.Instance, error) {
	data, err := onnx.Encode(g)
	if err != nil {
		return nil, fmt.Errorf("ort: model %q: %w", name, err)
	}
	return b.LoadONNX(ctx, name, data, ModelOptions{})
}

// model is what instances of one loaded model share: the session (and so
// the weights) and the request shapes.
type model struct {
	name            string
	sess            *ortgo.DynamicAdvancedSession
	inType, outType graph.DType
	// inShape and outShape are per request, batch dimension excluded.
	inShape, outShape []int64
	inSize, outSize   int
	// batched: the batch dimension is dynamic, one Run per batch.
	// leadOne: the model has a fixed leading dimension of 1, one Run per
	// request. Neither: the whole input is one request, one Run each.
	batched, leadOne bool
	// leadOut: the output's leading dimension of 1 (leadOne models) is
	// left out of outShape.
	leadOut bool

	mu   sync.Mutex
	refs int
}

// LoadONNX loads a serialized ONNX model (any operators ONNX Runtime
// runs, control flow included) and returns its first instance.
//
// The batch dimension: when the input's leading dimension is dynamic,
// InferBatch runs a whole batch at once; otherwise it runs one request at a
// time. Float32, int64, int32, uint8 and int8 inputs and outputs are supported; integer
// ones are converted from and to the float32 request data.
func (b *Backend) LoadONNX(ctx context.Context, name string, data []byte, opts ModelOptions) (libml.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ort: model %q: %w", name, err)
	}
	if err := b.addOpen(1); err != nil {
		return nil, err
	}
	m, err := b.loadModel(name, data, opts)
	if err != nil {
		b.addOpen(-1)
		return nil, fmt.Errorf("ort: model %q: %w", name, err)
	}
	m.refs = 1
	return &Instance{b: b, m: m, maxBatch: 1}, nil
}

func (b *Backend) loadModel(name string, data []byte, opts ModelOptions) (*model, error) {
	inputs, outputs, err := onnx.DecodeSignature(data)
	if err != nil {
		return nil, err
	}
	in, err := pick(inputs, opts.Input, "input")
	if err != nil {
		return nil, err
	}
	out, err := pick(outputs, opts.Output, "output")
	if err != nil {
		return nil, err
	}
	if len(inputs) != 1 {
		return nil, fmt.Errorf("%d inputs (%s): a libml instance feeds exactly one", len(inputs), names(inputs))
	}
	m := &model{name: name, inType: in.DType, outType: out.DType}
	for _, vi := range []graph.ValueInfo{in, out} {
		switch vi.DType {
		case graph.Float32, graph.Int64, graph.Int32, graph.Uint8, graph.Int8:
		default:
			return nil, fmt.Errorf("%q: element type %s is not supported (float32, int64, int32, uint8, int8)", vi.Name, vi.DType)
		}
	}
	if in.Dims == nil {
		return nil, fmt.Errorf("input %q has no shape", in.Name)
	}
	dims := append([]int64(nil), in.Dims...)
	var per []int64
	switch {
	case len(dims) > 0 && dims[0] < 0:
		m.batched, per = true, dims[1:]
	case len(dims) > 0 && dims[0] == 1:
		m.leadOne, per = true, dims[1:]
	default:
		per = dims
	}
	if opts.InputShape != nil {
		if len(opts.InputShape) != len(per) {
			return nil, fmt.Errorf("input %q: shape %v given for dims %v (batch dimension excluded)", in.Name, opts.InputShape, per)
		}
		for i, d := range opts.InputShape {
			if d <= 0 || (per[i] >= 0 && per[i] != d) {
				return nil, fmt.Errorf("input %q: shape %v does not fit dims %v", in.Name, opts.InputShape, in.Dims)
			}
		}
		per = append([]int64(nil), opts.InputShape...)
	}
	for _, d := range per {
		if d < 0 {
			return nil, fmt.Errorf("input %q has dynamic dimensions %v: set ModelOptions.InputShape (or fix the graph's input dims)", in.Name, in.Dims)
		}
	}
	if len(in.Dims) == 0 {
		return nil, fmt.Errorf("input %q is a scalar: not supported (onnxruntime_go needs rank ≥ 1)", in.Name)
	}
	m.inShape = per
	m.inSize = int(libml.Elems(per))

	so, err := b.sessionOptions()
	if err != nil {
		return nil, err
	}
	defer so.Destroy()
	m.sess, err = ortgo.NewDynamicAdvancedSessionWithONNXData(data, []string{in.Name}, []string{out.Name}, so)
	if err != nil {
		return nil, fmt.Errorf("create session: %w", err)
	}

	// The per-request output shape: from the model when it is static,
	// else from one run at batch 1 on zeros.
	outDims := out.Dims
	static := outDims != nil
	for i, d := range outDims {
		if d < 0 && !(i == 0 && m.batched) {
			static = false
		}
	}
	if !static {
		outDims, err = m.probe()
		if err != nil {
			m.sess.Destroy()
			return nil, fmt.Errorf("probe output shape: %w", err)
		}
	}
	if len(outDims) == 0 {
		m.sess.Destroy()
		return nil, fmt.Errorf("output %q is a scalar: not supported (onnxruntime_go needs rank ≥ 1)", out.Name)
	}
	switch {
	case m.batched:
		if len(outDims) == 0 || (outDims[0] >= 0 && outDims[0] != 1) {
			m.sess.Destroy()
			return nil, fmt.Errorf("output %q has shape %v at batch 1: its leading dimension is not the batch", out.Name, outDims)
		}
		m.outShape = outDims[1:]
	case m.leadOne && len(outDims) > 0 && outDims[0] == 1:
		m.outShape, m.leadOut = outDims[1:], true
	default:
		m.outShape = outDims
	}
	m.outShape = append([]int64{}, m.outShape...)
	m.outSize = int(libml.Elems(m.outShape))
	return m, nil
}

func pick(vis []graph.ValueInfo, name, what string) (graph.ValueInfo, error) {
	if len(vis) == 0 {
		return graph.ValueInfo{}, fmt.Errorf("model has no %ss", what)
	}
	if name == "" {
		return vis[0], nil
	}
	for _, vi := range vis {
		if vi.Name == name {
			return vi, nil
		}
	}
	return graph.ValueInfo{}, fmt.Errorf("no %s %q (have %s)", what, name, names(vis))
}

func names(vis []graph.ValueInfo) string {
	s := ""
	for i, vi := range vis {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%q", vi.Name)
	}
	return s
}

// runShape is the input shape of one Run over batch requests.
func (m *model) runShape(batch int) []int64 {
	switch {
	case m.batched:
		return append([]int64{int64(batch)}, m.inShape...)
	case m.leadOne:
		return append([]int64{1}, m.inShape...)
	}
	return append([]int64{}, m.inShape...)
}

// outRunShapeFor is the output shape of one Run over batch requests.
func (m *model) outRunShapeFor(batch int) []int64 {
	switch {
	case m.batched:
		return append([]int64{int64(batch)}, m.outShape...)
	case m.leadOut:
		return append([]int64{1}, m.outShape...)
	}
	return append([]int64{}, m.outShape...)
}

func (m *model) probe() ([]int64, error) {
	shape := m.runShape(1)
	in := &graph.Tensor{DType: m.inType, Dims: shape}
	if m.inType == graph.Float32 {
		in.F32 = make([]float32, libml.Elems(shape))
	} else {
		in.I64 = make([]int64, libml.Elems(shape))
	}
	v, err := newValue(in, m.inType)
	if err != nil {
		return nil, err
	}
	defer v.Destroy()
	outs := []ortgo.Value{nil}
	if err := m.sess.Run([]ortgo.Value{v}, outs); err != nil {
		return nil, err
	}
	defer outs[0].Destroy()
	return []int64(outs[0].GetShape()), nil
}

// Instance is one instance of a model loaded into ONNX Runtime. Instances
// of one model share its session and weights; each has its own scratch
// buffers, so one instance must not run two batches at once.
type Instance struct {
	b        *Backend
	m        *model
	maxBatch int
	closed   bool
	// Scratch for integer-typed inputs and outputs (nil for float32).
	inInts, outInts intBuf
	// in is the batch input InferInput gathers requests into (the input
	// tensor ONNX Runtime reads), ing its gatherer.
	in  []float32
	ing cpu.Ingester
}

var _ libml.Instance = (*Instance)(nil)

// Model is the name the model was loaded under.
func (i *Instance) Model() string { return i.m.name }

// InputShape is the per-request input shape (batch excluded).
func (i *Instance) InputShape() []int64 { return append([]int64{}, i.m.inShape...) }

// OutputShape is the per-request output shape (batch excluded).
func (i *Instance) OutputShape() []int64 { return append([]int64{}, i.m.outShape...) }

// InputSize is the per-request input element count.
func (i *Instance) InputSize() int { return i.m.inSize }

// OutputSize is the per-request output element count.
func (i *Instance) OutputSize() int { return i.m.outSize }

// Batched reports whether the model takes a whole batch in one run
// (dynamic batch dimension) rather than one run per request.
func (i *Instance) Batched() bool { return i.m.batched }

// Close releases the instance; the session goes with the model's last
// instance.
func (i *Instance) Close() error {
	if i.closed {
		return fmt.Errorf("ort: model %q: instance already closed", i.m.name)
	}
	i.closed = true
	i.m.mu.Lock()
	i.m.refs--
	last := i.m.refs == 0
	i.m.mu.Unlock()
	var err error
	if last {
		if e := i.m.sess.Destroy(); e != nil {
			err = fmt.Errorf("ort: model %q: destroy session: %w", i.m.name, e)
		}
	}
	i.b.addOpen(-1)
	return err
}

func (b *Backend) instance(inst libml.Instance) (*Instance, error) {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return nil, fmt.Errorf("ort: instance %T does not belong to this backend", inst)
	}
	if i.closed {
		return nil, fmt.Errorf("ort: model %q: instance is closed", i.m.name)
	}
	return i, nil
}

// LinkModel makes another instance of base's model sharing its session
// and weights.
func (b *Backend) LinkModel(ctx context.Context, base libml.Instance) (libml.Instance, error) {
	i, err := b.instance(base)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ort: model %q: link: %w", i.m.name, err)
	}
	if err := b.addOpen(1); err != nil {
		return nil, err
	}
	i.m.mu.Lock()
	i.m.refs++
	i.m.mu.Unlock()
	return &Instance{b: b, m: i.m, maxBatch: 1}, nil
}

// ConfigureBatch sets the largest batch inst will run.
func (b *Backend) ConfigureBatch(inst libml.Instance, maxBatch int) error {
	i, err := b.instance(inst)
	if err != nil {
		return err
	}
	if maxBatch < 1 {
		return fmt.Errorf("ort: model %q: max batch %d", i.m.name, maxBatch)
	}
	i.maxBatch = maxBatch
	n := maxBatch
	if !i.m.batched {
		n = 1
	}
	i.in = make([]float32, maxBatch*i.m.inSize)
	i.inInts = newIntBuf(i.m.inType, n*i.m.inSize)
	i.outInts = newIntBuf(i.m.outType, n*i.m.outSize)
	return nil
}

// InferBatch runs batch requests: in holds them back to back (InputSize
// each), out receives the results (OutputSize each). Cancelling ctx stops
// a run in progress.
func (b *Backend) InferBatch(ctx context.Context, inst libml.Instance, batch int, in, out []float32) error {
	i, err := b.instance(inst)
	if err != nil {
		return err
	}
	m := i.m
	if batch < 1 || batch > i.maxBatch {
		return fmt.Errorf("ort: model %q: batch %d outside 1..%d (ConfigureBatch sets the limit)", m.name, batch, i.maxBatch)
	}
	if len(in) < batch*m.inSize || len(out) < batch*m.outSize {
		return fmt.Errorf("ort: model %q: batch %d needs %d inputs and %d outputs, got %d and %d",
			m.name, batch, batch*m.inSize, batch*m.outSize, len(in), len(out))
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("ort: model %q: %w", m.name, err)
	}
	ro, err := ortgo.NewRunOptions()
	if err != nil {
		return fmt.Errorf("ort: model %q: run options: %w", m.name, err)
	}
	defer ro.Destroy()
	stop := context.AfterFunc(ctx, func() { ro.Terminate() })
	defer stop()

	if m.batched {
		err = i.run(ro, batch, in[:batch*m.inSize], out[:batch*m.outSize])
	} else {
		for r := 0; r < batch && err == nil; r++ {
			err = i.run(ro, 1, in[r*m.inSize:(r+1)*m.inSize], out[r*m.outSize:(r+1)*m.outSize])
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("ort: model %q: %w", m.name, ctx.Err())
		}
		return fmt.Errorf("ort: model %q: %w", m.name, err)
	}
	return nil
}

// InferInput runs one batch whose input is still the requests' payload:
// it is gathered and converted in C, in one pass, into the instance's
// input tensor (one copy per request), given back (in.Gathered), and the
// batch runs as InferBatch's does.
func (b *Backend) InferInput(ctx context.Context, inst libml.Instance, in *libml.Input, out []float32) error {
	i, err := b.instance(inst)
	if err != nil {
		return err
	}
	n := in.N()
	if n < 1 || n > i.maxBatch {
		return fmt.Errorf("ort: model %q: batch %d outside 1..%d (ConfigureBatch sets the limit)", i.m.name, n, i.maxBatch)
	}
	if err := in.Check(n, i.m.inSize); err != nil {
		return fmt.Errorf("ort: model %q: %w", i.m.name, err)
	}
	if err := i.ing.Ingest(i.in[:n*i.m.inSize], in, 0, n); err != nil {
		return fmt.Errorf("ort: model %q: %w", i.m.name, err)
	}
	in.Copies = 1
	in.Gather()
	return b.InferBatch(ctx, inst, n, i.in[:n*i.m.inSize], out)
}

// run executes one ONNX Runtime call over n requests (n > 1 only when the
// batch dimension is dynamic).
func (i *Instance) run(ro *ortgo.RunOptions, n int, in, out []float32) error {
	m := i.m
	inShape := ortgo.Shape(m.runShape(n))
	outShape := ortgo.Shape(m.outRunShapeFor(n))
	var inV, outV ortgo.Value
	var err error
	if i.inInts == nil {
		inV, err = ortgo.NewTensor(inShape, in)
	} else {
		inV, err = i.inInts.tensor(inShape, in)
	}
	if err != nil {
		return fmt.Errorf("input tensor: %w", err)
	}
	defer inV.Destroy()
	if i.outInts == nil {
		outV, err = ortgo.NewTensor(outShape, out)
	} else {
		outV, err = i.outInts.tensor(outShape, nil)
	}
	if err != nil {
		return fmt.Errorf("output tensor: %w", err)
	}
	defer outV.Destroy()
	if err := m.sess.RunWithOptions([]ortgo.Value{inV}, []ortgo.Value{outV}, ro); err != nil {
		return err
	}
	if i.outInts != nil {
		i.outInts.read(out)
	}
	runtime.KeepAlive(in)
	runtime.KeepAlive(out)
	return nil
}

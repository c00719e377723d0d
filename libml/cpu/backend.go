// Package cpu is libml's "cpu" backend: models compiled by libml/engine run
// as C kernels (native/cpu) on a pool of pinned worker threads, GEMMs
// through native/cpu's own deterministic GEMM core (the same bits whatever
// the tiling, batch size or instruction set).
//
// Every instance owns a stream (preemption flag, execution index, kernel
// queue) and an activation arena; the weights are loaded once per model and
// shared by every instance made with LinkModel. InferBatch launches the
// whole kernel sequence of the batch's plan on the instance's stream in one
// cgo call and waits for it.
package cpu

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
	ncpu "sluice/native/cpu"
)

// Backend is the cpu backend. Make it with New or OnDevice; it is safe
// for concurrent use (one InferBatch at a time per instance).
type Backend struct {
	mu        sync.Mutex
	inline    Inline
	shared    *Device // OnDevice's device (nil: Init starts one of its own)
	dev       *Device // the device in use (nil before Init)
	pool      *ncpu.Pool
	units     int
	memLimit  int64 // BackendConfig.ModelMemoryLimit
	instances int
	models    int
}

var _ libml.Backend = (*Backend)(nil)

// New returns an uninitialized backend that starts units of its own at
// Init.
func New() *Backend { return &Backend{} }

// OnDevice returns an uninitialized backend that runs on d's units,
// shared with d's other users (Init's Units and PinUnits are then
// ignored; Deinit leaves d running).
func OnDevice(d *Device) *Backend { return &Backend{shared: d} }

// Inline says where an instance's batches run (SetInline).
type Inline int32

const (
	// InlineAuto measures each batch size's first runs both ways and
	// keeps the faster: on the units, or on the calling thread.
	InlineAuto Inline = iota
	// InlineNever always runs on the units.
	InlineNever
	// InlineAlways always runs on the calling thread.
	InlineAlways
)

// SetInline sets where instances run their batches: on the units (the
// stream, split into blocks over them), or on the calling thread, block
// by block in the same order, when the program is so small that waking
// the units and waiting for them costs more than its work (a few-layer
// MLP at batch 1). The output is the same bit for bit either way. A batch
// run on the calling thread runs outside the instance's unit share
// (SetUnits). The default, InlineAuto, decides per batch size from that
// size's first runs.
func (b *Backend) SetInline(m Inline) {
	b.mu.Lock()
	b.inline = m
	b.mu.Unlock()
}

func (b *Backend) inlineMode() Inline {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inline
}

// Name is "cpu".
func (b *Backend) Name() string { return "cpu" }

// Init starts cfg.Units worker threads (all CPUs when 0), or joins the
// shared device of OnDevice.
func (b *Backend) Init(ctx context.Context, cfg libml.BackendConfig) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pool != nil {
		return errors.New("cpu: Init: already initialized")
	}
	d := b.shared
	if d == nil {
		var err error
		if d, err = NewDevice(cfg.Units, cfg.PinUnits); err != nil {
			return fmt.Errorf("cpu: Init: %w", err)
		}
	}
	if err := d.Acquire(); err != nil {
		return fmt.Errorf("cpu: Init: %w", err)
	}
	b.dev, b.pool, b.units = d, d.Pool(), d.Units()
	b.memLimit = cfg.ModelMemoryLimit
	return nil
}

// Deinit stops the workers. Every instance must be closed first.
func (b *Backend) Deinit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pool == nil {
		return errors.New("cpu: Deinit: not initialized")
	}
	if b.instances > 0 {
		return fmt.Errorf("cpu: Deinit: %d instances still open", b.instances)
	}
	b.dev.Release(b)
	var err error
	if b.shared == nil {
		err = b.dev.Close()
	}
	b.dev, b.pool = nil, nil
	return err
}

// Units is the number of worker threads.
func (b *Backend) Units() int { return b.units }

func (b *Backend) ready() error {
	if b.pool == nil {
		return errors.New("cpu: backend not initialized (call Init)")
	}
	return nil
}

// model is a loaded model, shared by its instances.
type model struct {
	name     string
	eng      *engine.Model
	wptr     unsafe.Pointer
	wbytes   int
	batched  bool
	inShape  []int64 // per request
	outShape []int64
	mu       sync.Mutex
	progs    map[int]*program
	refs     int
	closed   bool
}

// program is a compiled program plus its C-side constants.
type program struct {
	p      *engine.Program
	cptr   unsafe.Pointer
	cbytes int
	aux    []unsafe.Pointer
	auxN   []int
}

func (pr *program) free() {
	ncpu.Free(pr.cptr, pr.cbytes)
	for i, a := range pr.aux {
		ncpu.Free(a, pr.auxN[i])
	}
	pr.cptr, pr.aux = nil, nil
}

// LoadModel compiles g and loads its weights into C memory; it returns the
// model's first instance.
func (b *Backend) LoadModel(ctx context.Context, name string, g *graph.Graph) (libml.Instance, error) {
	b.mu.Lock()
	err := b.ready()
	units, limit := b.units, b.memLimit
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m, err := loadModel(name, g, units, limit)
	if err != nil {
		return nil, fmt.Errorf("cpu: LoadModel %q: %w", name, err)
	}
	inst, err := b.newInstance(m)
	if err != nil {
		m.release()
		return nil, fmt.Errorf("cpu: LoadModel %q: %w", name, err)
	}
	return inst, nil
}

// LoadEngine loads g with the engine for the cpu device's kernels: tiled
// for units, its weights in C memory (kernels keep pointers to them:
// ncpu.Free(wptr, wbytes) once the model is done with), with the fusions
// these kernels want (engine.Options.DepthwiseVectorWidth). noInPlace is
// engine.Options.NoInPlace. On an error nothing stays allocated.
func LoadEngine(g *graph.Graph, units int, noInPlace bool, memoryLimit int64) (em *engine.Model, wptr unsafe.Pointer, wbytes int, err error) {
	alloc := func(n int) ([]float32, error) {
		p, err := ncpu.Alloc(n * 4)
		if err != nil {
			return nil, err
		}
		wptr, wbytes = p, n*4
		return unsafe.Slice((*float32)(p), n), nil
	}
	em, err = engine.Load(g, engine.Options{Units: units, Alloc: alloc, NoInPlace: noInPlace, MemoryLimit: memoryLimit,
		DepthwiseVectorWidth: ncpu.DepthwiseVectorWidth(), NoConvRows: ncpu.QGemmAMX()})
	if err != nil {
		ncpu.Free(wptr, wbytes)
		return nil, nil, 0, err
	}
	return em, wptr, wbytes, nil
}

func loadModel(name string, g *graph.Graph, units int, memoryLimit int64) (*model, error) {
	m := &model{name: name, progs: map[int]*program{}}
	em, wptr, wbytes, err := LoadEngine(g, units, false, memoryLimit)
	if err != nil {
		return nil, err
	}
	m.wptr, m.wbytes = wptr, wbytes
	m.eng = em
	m.batched = em.BatchDynamic()
	in, out := em.Inputs(), em.Outputs()
	m.inShape = libml.PerRequestShape(in[0].Dims)
	m.outShape = libml.PerRequestShape(out[0].Dims)
	if m.batched && len(in) == 1 && len(out) == 1 {
		// resolve the per-request output shape by compiling for batch 1
		p, err := m.program(1)
		if err != nil {
			m.release()
			return nil, err
		}
		m.outShape = append([]int64{}, p.p.Outputs[0].Shape[1:]...)
	} else if !m.batched && len(in) == 1 && len(out) == 1 {
		p, err := m.program(0)
		if err != nil {
			m.release()
			return nil, err
		}
		m.outShape = libml.PerRequestShape(p.p.Outputs[0].Shape)
	}
	return m, nil
}

// program returns the model's program for a batch size (0: the declared
// shapes of a model without a dynamic batch dimension), compiling it once.
func (m *model) program(batch int) (*program, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.progs[batch]; ok {
		return p, nil
	}
	var ep *engine.Program
	var err error
	if batch == 0 {
		shapes := map[string][]int64{}
		for _, in := range m.eng.Inputs() {
			shapes[in.Name] = in.Dims
		}
		ep, err = m.eng.Compile(shapes)
	} else {
		ep, err = m.eng.CompileBatch(batch)
	}
	if err != nil {
		return nil, err
	}
	pr, err := newProgram(ep)
	if err != nil {
		return nil, err
	}
	m.progs[batch] = pr
	return pr, nil
}

// newProgram copies a program's constants and gather indices to C memory.
func newProgram(ep *engine.Program) (*program, error) {
	pr := &program{p: ep}
	var err error
	if len(ep.Consts) > 0 {
		pr.cbytes = len(ep.Consts) * 4
		if pr.cptr, err = ncpu.Alloc(pr.cbytes); err != nil {
			return nil, err
		}
		copy(unsafe.Slice((*float32)(pr.cptr), len(ep.Consts)), ep.Consts)
	}
	pr.aux = make([]unsafe.Pointer, len(ep.Kernels))
	pr.auxN = make([]int, len(ep.Kernels))
	for i := range ep.Kernels {
		if a := ep.Kernels[i].Aux; len(a) > 0 {
			pr.auxN[i] = len(a) * 8
			if pr.aux[i], err = ncpu.Alloc(pr.auxN[i]); err != nil {
				pr.free()
				return nil, err
			}
			copy(unsafe.Slice((*int64)(pr.aux[i]), len(a)), a)
		}
	}
	return pr, nil
}

func (m *model) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.progs {
		p.free()
	}
	m.progs = nil
	ncpu.Free(m.wptr, m.wbytes)
	m.wptr = nil
	m.closed = true
}

// LinkModel makes another instance of base's model sharing its weights and
// compiled programs. It allocates a stream only; activations are allocated
// by ConfigureBatch.
func (b *Backend) LinkModel(ctx context.Context, base libml.Instance) (libml.Instance, error) {
	bi, ok := base.(*Instance)
	if !ok || bi.b != b {
		return nil, errors.New("cpu: LinkModel: instance is not from this backend")
	}
	bi.mu.Lock()
	closed := bi.closed
	bi.mu.Unlock()
	if closed {
		return nil, errors.New("cpu: LinkModel: base instance is closed")
	}
	inst, err := b.newInstance(bi.m)
	if err != nil {
		return nil, fmt.Errorf("cpu: LinkModel %q: %w", bi.m.name, err)
	}
	return inst, nil
}

// ConfigureBatch prepares inst for batches of 1..maxBatch: plans are
// compiled (once per model), the activation arena is sized for the largest
// and every batch size's kernels are materialized.
func (b *Backend) ConfigureBatch(inst libml.Instance, maxBatch int) error {
	in, ok := inst.(*Instance)
	if !ok || in.b != b {
		return errors.New("cpu: ConfigureBatch: instance is not from this backend")
	}
	if err := in.configure(maxBatch); err != nil {
		return fmt.Errorf("cpu: ConfigureBatch %q: %w", in.m.name, err)
	}
	return nil
}

// InferBatch runs one batch: in holds batch inputs back to back, out
// receives batch outputs.
func (b *Backend) InferBatch(ctx context.Context, inst libml.Instance, batch int, in, out []float32) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cpu: InferBatch: instance is not from this backend")
	}
	return i.InferBatch(ctx, batch, in, out)
}

// InferInput runs one batch whose input is still the requests' payload
// (see Instance.InferInput).
func (b *Backend) InferInput(ctx context.Context, inst libml.Instance, in *libml.Input, out []float32) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cpu: InferInput: instance is not from this backend")
	}
	return i.InferInput(ctx, in, out)
}

// RunGraph compiles g for the shapes of the given inputs and runs it once:
// a convenience for conformance tests. Float inputs run as runtime tensors;
// integer inputs are baked in as constants. It returns every graph output.
func (b *Backend) RunGraph(ctx context.Context, g *graph.Graph, inputs map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	b.mu.Lock()
	err := b.ready()
	units, pool := b.units, b.pool
	if err == nil {
		b.instances++ // keeps Deinit off the pool while this runs
	}
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	defer func() {
		b.mu.Lock()
		b.instances--
		b.mu.Unlock()
	}()
	gg := *g
	gg.Initializers = append([]*graph.Tensor{}, g.Initializers...)
	shapes := map[string][]int64{}
	floats := map[string][]float32{}
	var ins []graph.ValueInfo
	for _, vi := range g.Inputs {
		t, ok := inputs[vi.Name]
		if g.Initializer(vi.Name) != nil {
			if ok {
				return nil, fmt.Errorf("cpu: RunGraph: input %q is an initializer", vi.Name)
			}
			continue
		}
		if !ok {
			return nil, fmt.Errorf("cpu: RunGraph: no value for input %q", vi.Name)
		}
		et, err := engine.FromGraph(t)
		if err != nil {
			return nil, fmt.Errorf("cpu: RunGraph: input %q: %w", vi.Name, err)
		}
		if et.IsFloat() {
			vi.Dims = append([]int64{}, et.Shape...)
			vi.DType = graph.Float32
			ins = append(ins, vi)
			shapes[vi.Name] = et.Shape
			floats[vi.Name] = et.F
		} else {
			c := et.ToGraph(vi.Name)
			gg.Initializers = append(gg.Initializers, c)
		}
	}
	gg.Inputs = ins
	if len(ins) == 0 {
		return nil, errors.New("cpu: RunGraph: the graph has no float32 input to run")
	}
	m := &model{name: g.Name, progs: map[int]*program{}}
	em, wptr, wbytes, err := LoadEngine(&gg, units, false, 0)
	if err != nil {
		return nil, fmt.Errorf("cpu: RunGraph: %w", err)
	}
	m.wptr, m.wbytes = wptr, wbytes
	m.eng = em
	defer m.release()
	ep, err := em.Compile(shapes)
	if err != nil {
		return nil, fmt.Errorf("cpu: RunGraph: %w", err)
	}
	pr, err := newProgram(ep)
	if err != nil {
		return nil, fmt.Errorf("cpu: RunGraph: %w", err)
	}
	m.progs[0] = pr
	arenaBytes := int(ep.ArenaFloats) * 4
	arena, err := ncpu.Alloc(arenaBytes)
	if err != nil {
		return nil, err
	}
	defer ncpu.Free(arena, arenaBytes)
	ks, err := materialize(pr, m, arena, units)
	if err != nil {
		return nil, err
	}
	defer ks.Free()
	st, err := pool.NewStream(1024)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	for _, bnd := range ep.Inputs {
		copy(arenaSlice(arena, bnd.Off, bnd.Size()), floats[bnd.Name])
	}
	if err := runAll(ctx, st, ks, ep, 0, false); err != nil {
		return nil, fmt.Errorf("cpu: RunGraph: %w", err)
	}
	res := map[string]*graph.Tensor{}
	for _, bnd := range ep.Outputs {
		data := append([]float32{}, arenaSlice(arena, bnd.Off, bnd.Size())...)
		res[bnd.Name] = &graph.Tensor{Name: bnd.Name, DType: graph.Float32, Dims: append([]int64{}, bnd.Shape...), F32: data}
	}
	return res, nil
}

func arenaSlice(base unsafe.Pointer, off, n int64) []float32 {
	return unsafe.Slice((*float32)(unsafe.Add(base, off*4)), n)
}

// Materialize fills C kernel descriptors for program ep over an arena:
// weights, consts and aux (one entry per kernel, nil for none) are the
// C memory of the model's weights, the program's constants and its
// kernels' auxiliary tables; units is the tiling. The scheduler
// (libml/sched) builds its kernels through it too.
func Materialize(ep *engine.Program, weights, consts unsafe.Pointer, aux []unsafe.Pointer, arena unsafe.Pointer, units int) (*ncpu.Kernels, error) {
	ks, err := ncpu.NewKernels(len(ep.Kernels))
	if err != nil {
		return nil, err
	}
	ptr := func(r engine.Ref) unsafe.Pointer {
		switch r.Space {
		case engine.SpaceArena:
			return unsafe.Add(arena, r.Off*4)
		case engine.SpaceWeights:
			return unsafe.Add(weights, r.Off*4)
		case engine.SpaceConsts:
			return unsafe.Add(consts, r.Off*4)
		}
		return nil
	}
	for i := range ep.Kernels {
		k := &ep.Kernels[i]
		d := ncpu.Desc{Op: int32(k.Op), Flags: k.Flags, Out: ptr(k.Out), Aux: aux[i], P: k.P, F: k.F}
		for j := range k.In {
			d.In[j] = ptr(k.In[j])
		}
		if err := ks.Set(i, &d, units); err != nil {
			ks.Free()
			return nil, fmt.Errorf("kernel %d (%s %s): %w", i, k.Ops, k.Name, err)
		}
	}
	return ks, nil
}

// materialize fills C kernel descriptors for program pr of model m.
func materialize(pr *program, m *model, arena unsafe.Pointer, units int) (*ncpu.Kernels, error) {
	return Materialize(pr.p, m.wptr, pr.cptr, pr.aux, arena, units)
}

// runAll runs kernels from start to the end, restoring after preemptions
// from the interrupted kernel's idempotent group entry, until done or ctx
// ends.
func runAll(ctx context.Context, st *ncpu.Stream, ks *ncpu.Kernels, ep *engine.Program, mask uint64, inline bool) error {
	var stop func() bool
	if ctx.Done() != nil {
		stop = context.AfterFunc(ctx, st.Preempt)
		defer stop()
	}
	start := 0
	for {
		st.Restore()
		st.ResetIndex()
		if err := ctx.Err(); err != nil {
			return err
		}
		var s ncpu.Status
		var err error
		if inline {
			s, err = st.RunInline(ks, start)
		} else {
			s, err = st.Run(ks, start, mask)
		}
		if err != nil {
			return err
		}
		if s == ncpu.Done {
			return nil
		}
		if err := ctx.Err(); err != nil {
			st.Restore()
			return err
		}
		idx := int(st.ExecIndex())
		if idx < start {
			idx = start // evicted before any block of the restart ran
		}
		start = ep.IdemEntry[idx]
	}
}

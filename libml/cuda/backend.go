package cuda

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"sluice/libml"
	"sluice/libml/engine"
	"sluice/libml/graph"
)

// Backend is libml's "cuda" backend (ARCHITECTURE.md §4): models compiled
// by libml/engine, exactly as for the cpu backend, run as the embedded
// CUDA kernels, one launch per engine kernel (Plan, Pack). Make it with
// NewBackend; it is safe for concurrent use (one run at a time per
// instance).
//
// Init opens the driver with dlopen("libcuda.so.1"): without a driver it
// returns an error wrapping ErrNoDriver (and logs so once per process
// through Options.Logf), and the appliance runs on the cpu backend.
//
// Device memory: a model's weights (and each compiled program's small
// constants) are uploaded once and shared by every instance made with
// LinkModel; an instance owns its activation arena, its stream state
// (preemption flag, execution index) and its stream.
//
// Execution: InferBatch copies the batch in, pushes the program's kernels
// through the instance's virtual host queue, at most Options.Window of
// them outstanding on the device at once, copies the outputs back and
// waits. Preemption (Instance.Preempt, or ctx's cancellation) resets the
// host queue, sets the stream's flag in device memory and waits for the
// window to drain: queued kernels exit in their prologue and running
// blocks at their next in-loop poll. A preempted run restarts from the
// idempotent group of the last kernel that started, as on the CPU (REEF
// §4.4); a cancelled one returns ctx's error.
//
// Spatial shares: Instance.SetSMs binds an instance to a green context of
// its own with a partition of the SMs; a shadow IF is LinkModel (same
// weights) plus SetSMs.
type Backend struct {
	opts Options

	mu        sync.Mutex
	dev       gpuCtx
	units     int
	share     int
	memLimit  int64 // BackendConfig.ModelMemoryLimit, device memory
	instances int
	regions   []*Region
	// slots are the device's SMs in partition-sized slots: how many
	// partitions use each (partition)
	slots smSlots

	// ctl is the control stream preemptions write flags on; ones holds
	// the flag value they copy.
	ctlMu     sync.Mutex
	ctl       gpuStream
	ones      pinned
	flagWaits atomic.Int64
}

var _ libml.Backend = (*Backend)(nil)

// DefaultWindow is the device window of a stream: kernels outstanding on
// the device queue at once (REEF §4.3). The fewer, the faster a reset.
const DefaultWindow = 4

// ctlPriority is the control stream's priority (clamped by the driver to
// the device's highest).
const ctlPriority = -10

// Options configure the cuda backend.
type Options struct {
	// Device is the GPU ordinal (default 0).
	Device int
	// Window is the device window of every stream (0: DefaultWindow).
	Window int
	// Logf, when set, is told once per process why the GPU backend is
	// unavailable.
	Logf func(format string, args ...any)
	// Emulate runs the backend on the kernel emulator instead of a GPU:
	// the same kernels (native/cuda, compiled as C++), plans, streams,
	// preemption, padding and batch gather, executed block by block on
	// the CPU. It is for tests and demos of the CUDA path on machines
	// without a GPU, not for speed. EmuSMs is the emulated SM count
	// (default DefaultEmuSMs).
	Emulate bool
	EmuSMs  int

	// open replaces the driver: tests run the backend on the kernel
	// emulator or on the fake driver.
	open func() (gpuCtx, error)
}

// NewBackend returns an uninitialized cuda backend.
func NewBackend(opts Options) *Backend {
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	return &Backend{opts: opts}
}

// Name is "cuda".
func (b *Backend) Name() string { return "cuda" }

// Init opens the driver and device (its primary context), loads the
// kernels and creates the control stream. cfg.Units, when between 1 and
// the SM count, is the SM partition every new instance gets (a green
// context each); 0 gives instances the whole device. cfg.PinUnits is
// ignored.
func (b *Backend) Init(ctx context.Context, cfg libml.BackendConfig) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("cuda: Init: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev != nil {
		return errors.New("cuda: Init: already initialized")
	}
	open := b.opts.open
	switch {
	case open != nil:
	case b.opts.Emulate:
		open = func() (gpuCtx, error) { return openEmulator(b.opts.EmuSMs) }
	default:
		open = func() (gpuCtx, error) { return openDriver("", b.opts.Device) }
	}
	dev, err := open()
	if err != nil {
		if errors.Is(err, ErrNoDriver) && b.opts.Logf != nil {
			Available(b.opts.Logf)
		}
		return fmt.Errorf("cuda: Init: %w", err)
	}
	units, share := dev.SMs(), 0
	if cfg.Units > 0 && cfg.Units < dev.SMs() {
		if !dev.Green() {
			dev.Close()
			return fmt.Errorf("cuda: Init: a share of %d of %d SMs: %w", cfg.Units, dev.SMs(), ErrNoGreen)
		}
		units, share = cfg.Units, cfg.Units
	}
	ctl, err := dev.NewStream(ctlPriority)
	if err != nil {
		dev.Close()
		return fmt.Errorf("cuda: Init: control stream: %w", err)
	}
	ones, err := dev.HostAlloc(8)
	if err != nil {
		ctl.Close()
		dev.Close()
		return fmt.Errorf("cuda: Init: %w", err)
	}
	ones.Put(StateFlag, []byte{1, 0, 0, 0})
	b.dev, b.units, b.share, b.ctl, b.ones = dev, units, share, ctl, ones
	b.memLimit = cfg.ModelMemoryLimit
	b.slots.mu.Lock()
	b.slots.gran, b.slots.use = 0, nil // probed on the first partition
	b.slots.mu.Unlock()
	return nil
}

// Deinit unregisters the host regions and closes the device. Every
// instance must be closed first.
func (b *Backend) Deinit() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return errors.New("cuda: Deinit: not initialized")
	}
	if b.instances > 0 {
		return fmt.Errorf("cuda: Deinit: %d instances still open", b.instances)
	}
	var errs []error
	for _, r := range b.regions {
		errs = append(errs, b.dev.UnregisterHost(r.host))
	}
	b.regions = nil
	errs = append(errs, b.ctl.Close(), b.ones.Free(), b.dev.Close())
	b.dev, b.ctl, b.ones = nil, nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda: Deinit: %w", err)
	}
	return nil
}

// Units is the SM count models are tiled for: the device's, or the
// per-instance share given to Init.
func (b *Backend) Units() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.units
}

// SMs is the device's SM count (0 before Init).
func (b *Backend) SMs() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.dev == nil {
		return 0
	}
	return b.dev.SMs()
}

// Green reports whether instances can be bound to SM partitions.
func (b *Backend) Green() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dev != nil && b.dev.Green()
}

// Window is the device window of the backend's streams.
func (b *Backend) Window() int { return b.opts.Window }

func (b *Backend) ready() error {
	if b.dev == nil {
		return errors.New("cuda: backend not initialized (call Init)")
	}
	return nil
}

// setFlag sets the preemption flag of the stream state at device address
// state, on the control stream, and returns once it is in device memory.
// The copy engine does it: a memset kernel could wait for SMs that the
// preempted blocks hold until they see the flag.
func (b *Backend) setFlag(state uint64) error { return b.setFlags([]uint64{state}) }

// setFlags sets the preemption flags of the instance states on the
// control stream, all written before one wait for it.
func (b *Backend) setFlags(states []uint64) error {
	if len(states) == 0 {
		return nil
	}
	b.ctlMu.Lock()
	defer b.ctlMu.Unlock()
	for _, st := range states {
		if err := b.ctl.WriteAsync(st+StateFlag, b.ones, StateFlag, 4); err != nil {
			return fmt.Errorf("cuda: preempt: %w", err)
		}
	}
	b.flagWaits.Add(1)
	if err := b.ctl.Sync(); err != nil {
		return fmt.Errorf("cuda: preempt: %w", err)
	}
	return nil
}

// FlagWaits is how many times preemptions waited for the control stream
// that writes their flags (one per Preempt, one per PreemptWith).
func (b *Backend) FlagWaits() int64 { return b.flagWaits.Load() }

// model is a loaded model: its weights in device memory and its compiled
// programs, shared by its instances.
type model struct {
	name     string
	dev      gpuCtx
	eng      *engine.Model
	w        uint64
	wbytes   int
	batched  bool
	inShape  []int64
	outShape []int64

	mu     sync.Mutex
	progs  map[int]*program
	refs   int
	closed bool
}

// program is a compiled program with its constants and gather indices in
// device memory.
type program struct {
	p      *engine.Program
	consts uint64
	aux    []uint64
	bytes  int
	// prof is the kernel profile padded runs use (SetKernelProfile;
	// guarded by the model's mu).
	prof *padProf
}

// LoadModel compiles g (engine options as the cpu backend's, tiled for
// the backend's SMs), uploads its weights once and returns the model's
// first instance.
func (b *Backend) LoadModel(ctx context.Context, name string, g *graph.Graph) (libml.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cuda: LoadModel %q: %w", name, err)
	}
	b.mu.Lock()
	err := b.ready()
	dev, units, limit := b.dev, b.units, b.memLimit
	b.mu.Unlock()
	if err != nil {
		return nil, err
	}
	m, err := loadModel(name, g, dev, units, limit)
	if err != nil {
		return nil, fmt.Errorf("cuda: LoadModel %q: %w", name, err)
	}
	inst, err := b.newInstance(m)
	if err != nil {
		m.release()
		return nil, fmt.Errorf("cuda: LoadModel %q: %w", name, err)
	}
	return inst, nil
}

func loadModel(name string, g *graph.Graph, dev gpuCtx, units int, memoryLimit int64) (*model, error) {
	// The CUDA kernels have no Winograd variant of SK_OP_CONV.
	em, err := engine.Load(g, engine.Options{Units: units, NoWinograd: true, NoPanels: true, NoPointwiseDW: true, NoByteIntegers: true, NoConvRows: true, DetMaxOrder: detMax,
		MemoryLimit: memoryLimit})
	if err != nil {
		return nil, err
	}
	m := &model{name: name, dev: dev, eng: em, progs: map[int]*program{}, batched: em.BatchDynamic()}
	ws := em.Weights()
	m.wbytes = 4 * len(ws)
	if m.w, err = dev.Alloc(m.wbytes); err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	if err := dev.Write(m.w, f32view(ws)); err != nil {
		dev.Free(m.w)
		return nil, fmt.Errorf("weights: %w", err)
	}
	in, out := em.Inputs(), em.Outputs()
	if len(in) == 0 || len(out) == 0 {
		m.release()
		return nil, errors.New("the model has no runtime input or no output")
	}
	m.inShape = libml.PerRequestShape(in[0].Dims)
	m.outShape = libml.PerRequestShape(out[0].Dims)
	if len(in) == 1 && len(out) == 1 {
		// resolve the per-request output shape by compiling once
		key := 0
		if m.batched {
			key = 1
		}
		p, err := m.program(key)
		if err != nil {
			m.release()
			return nil, err
		}
		if m.batched {
			m.outShape = append([]int64{}, p.p.Outputs[0].Shape[1:]...)
		} else {
			m.outShape = libml.PerRequestShape(p.p.Outputs[0].Shape)
		}
	}
	return m, nil
}

// program returns the model's program for a batch size (0: the declared
// shapes of a model without a dynamic batch dimension), compiling it and
// uploading its constants once.
func (m *model) program(batch int) (*program, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil, errors.New("model is closed")
	}
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
	pr := &program{p: ep, aux: make([]uint64, len(ep.Kernels))}
	if err := pr.upload(m.dev); err != nil {
		pr.free(m.dev)
		return nil, fmt.Errorf("batch %d: %w", batch, err)
	}
	m.progs[batch] = pr
	return pr, nil
}

// upload copies the program's constants and gather indices to the device.
func (pr *program) upload(dev gpuCtx) error {
	ep := pr.p
	var err error
	if len(ep.Consts) > 0 {
		if pr.consts, err = dev.Alloc(4 * len(ep.Consts)); err != nil {
			return err
		}
		pr.bytes += 4 * len(ep.Consts)
		if err := dev.Write(pr.consts, f32view(ep.Consts)); err != nil {
			return err
		}
	}
	for i := range ep.Kernels {
		a := ep.Kernels[i].Aux
		if len(a) == 0 {
			continue
		}
		if pr.aux[i], err = dev.Alloc(8 * len(a)); err != nil {
			return err
		}
		pr.bytes += 8 * len(a)
		if err := dev.Write(pr.aux[i], i64view(a)); err != nil {
			return err
		}
	}
	return nil
}

func (pr *program) free(dev gpuCtx) {
	if pr.consts != 0 {
		dev.Free(pr.consts)
	}
	for _, a := range pr.aux {
		if a != 0 {
			dev.Free(a)
		}
	}
	pr.consts, pr.aux = 0, nil
}

// deviceBytes is the device memory the model owns: weights and program
// constants.
func (m *model) deviceBytes() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := int64(m.wbytes)
	for _, p := range m.progs {
		n += int64(p.bytes)
	}
	return n
}

func (m *model) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range m.progs {
		p.free(m.dev)
	}
	m.progs = nil
	if m.w != 0 {
		m.dev.Free(m.w)
		m.w = 0
	}
	m.closed = true
}

// LinkModel makes another instance of base's model, attached to the same
// device weights (GSLICE §3.3.3): it adds a stream state and a stream;
// its activation arena comes with ConfigureBatch. A shadow IF is a linked
// instance bound to a new SM partition (Instance.SetSMs).
func (b *Backend) LinkModel(ctx context.Context, base libml.Instance) (libml.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("cuda: LinkModel: %w", err)
	}
	bi, ok := base.(*Instance)
	if !ok || bi.b != b {
		return nil, errors.New("cuda: LinkModel: instance is not from this backend")
	}
	bi.mu.Lock()
	closed := bi.closed
	bi.mu.Unlock()
	if closed {
		return nil, errors.New("cuda: LinkModel: base instance is closed")
	}
	inst, err := b.newInstance(bi.m)
	if err != nil {
		return nil, fmt.Errorf("cuda: LinkModel %q: %w", bi.m.name, err)
	}
	return inst, nil
}

// ConfigureBatch prepares inst for batches of 1..maxBatch: programs are
// compiled (once per model), the arena is sized for the largest and every
// kernel's launch (grid, packed parameters) is planned.
func (b *Backend) ConfigureBatch(inst libml.Instance, maxBatch int) error {
	in, ok := inst.(*Instance)
	if !ok || in.b != b {
		return errors.New("cuda: ConfigureBatch: instance is not from this backend")
	}
	if err := in.configure(maxBatch); err != nil {
		return fmt.Errorf("cuda: ConfigureBatch %q: %w", in.m.name, err)
	}
	return nil
}

// InferBatch runs one batch: in holds batch inputs back to back, out
// receives batch outputs.
func (b *Backend) InferBatch(ctx context.Context, inst libml.Instance, batch int, in, out []float32) error {
	i, ok := inst.(*Instance)
	if !ok || i.b != b {
		return errors.New("cuda: InferBatch: instance is not from this backend")
	}
	return i.InferBatch(ctx, batch, in, out)
}

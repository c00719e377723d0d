package cpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
	"unsafe"

	"sluice/libml"
	"sluice/libml/engine"
	ncpu "sluice/native/cpu"
)

// streamQueue is the queue capacity of an instance's stream: sk_run waits
// for space when a plan is longer.
const streamQueue = 1024

// Instance is one instance of a model: a stream, an activation arena and
// the kernels of each configured batch size. The weights are the model's.
type Instance struct {
	b      *Backend
	m      *model
	stream *ncpu.Stream

	mu       sync.Mutex
	closed   bool
	maxBatch int
	arena    unsafe.Pointer
	arenaN   int // bytes
	plans    map[int]*plan
	mask     uint64
	// ing gathers requests' payloads into the arena (InferInput).
	ing Ingester
}

// plan is a program materialized over this instance's arena.
type plan struct {
	pr *program
	ks *ncpu.Kernels
	// where its runs go (InlineAuto): decided once inlineTrials runs each
	// way are timed, at once for a program slower than inlineMaxNs on
	// the units
	decided, inline bool
	warm            bool // the first run (cold: page faults) is not timed
	nPool, nInline  int
	tPool, tInline  [inlineTrials]int64
}

// inlineTrials is how many runs each way InlineAuto times: that many on
// the units, then that many inline, each way in a row as it would run
// once decided (interleaved runs find the units still awake from the run
// before); the medians decide. A program whose first inlineEarly timed
// runs on the units all take inlineMaxNs or more runs there (waking them
// costs microseconds: only programs of tens of microseconds can gain; one
// slow run is not enough, a unit may have lost its core).
const (
	inlineTrials = 8
	inlineEarly  = 3 // units runs all of inlineMaxNs or more: decided
	inlineMaxNs  = 200_000
)

// pick says where p's next run goes and whether it is a timed trial.
func (p *plan) pick(m Inline) (inline, trial bool) {
	switch {
	case m == InlineNever:
		return false, false
	case m == InlineAlways:
		return true, false
	case p.decided:
		return p.inline, false
	}
	return p.nPool == inlineTrials, true
}

// record adds a trial's time and decides once there are enough.
func (p *plan) record(inline bool, ns int64) {
	if !p.warm {
		p.warm = true
		return
	}
	if inline {
		p.tInline[p.nInline] = ns
		p.nInline++
	} else {
		p.tPool[p.nPool] = ns
		p.nPool++
	}
	switch {
	case !inline && p.nPool == inlineEarly && slices.Min(p.tPool[:inlineEarly]) >= inlineMaxNs:
		p.decided, p.inline = true, false
	case p.nPool == inlineTrials && p.nInline == inlineTrials:
		p.decided, p.inline = true, median(p.tInline[:]) < median(p.tPool[:])

	}
}

// median of a few durations (sorts them).
func median(ts []int64) int64 {
	slices.Sort(ts)
	return ts[len(ts)/2]
}

// run runs p's program once (runAll), where p.pick says, timing it while
// InlineAuto has not decided.
func (i *Instance) run(ctx context.Context, p *plan) error {
	inline, trial := p.pick(i.b.inlineMode())
	var t0 time.Time
	if trial {
		t0 = time.Now()
	}
	err := runAll(ctx, i.stream, p.ks, p.pr.p, i.mask, inline)
	if trial && err == nil {
		p.record(inline, time.Since(t0).Nanoseconds())
	}
	return err
}

// RunsInline reports whether batches of size batch run on the calling
// thread (SetInline; under InlineAuto, false until decided).
func (i *Instance) RunsInline(batch int) bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return false
	}
	inline, trial := p.pick(i.b.inlineMode())
	return inline && !trial
}

var _ libml.Instance = (*Instance)(nil)

func (b *Backend) newInstance(m *model) (*Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(); err != nil {
		return nil, err
	}
	st, err := b.pool.NewStream(streamQueue)
	if err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.refs++
	m.mu.Unlock()
	b.instances++
	return &Instance{b: b, m: m, stream: st, plans: map[int]*plan{}}, nil
}

// Model is the name the model was loaded under.
func (i *Instance) Model() string { return i.m.name }

// InputShape is the per-request input shape.
func (i *Instance) InputShape() []int64 { return append([]int64{}, i.m.inShape...) }

// OutputShape is the per-request output shape.
func (i *Instance) OutputShape() []int64 { return append([]int64{}, i.m.outShape...) }

// InputSize is the per-request input element count.
func (i *Instance) InputSize() int { return int(libml.Elems(i.m.inShape)) }

// OutputSize is the per-request output element count.
func (i *Instance) OutputSize() int { return int(libml.Elems(i.m.outShape)) }

// Batched reports whether the model has a dynamic batch dimension; models
// without one run a batch as one plan execution per request.
func (i *Instance) Batched() bool { return i.m.batched }

// WeightBytes is the size of the model's shared weights.
func (i *Instance) WeightBytes() int64 { return int64(i.m.wbytes) }

// Bytes is the memory this instance owns: the activation arena, the kernel
// descriptors of its plans and its stream's queue. Weights and compiled
// programs belong to the model.
func (i *Instance) Bytes() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	n := int64(i.arenaN) + streamQueue*40 + int64(unsafe.Sizeof(*i))
	for _, p := range i.plans {
		n += int64(p.ks.Len() * ncpu.KernelBytes)
	}
	return n
}

// ArenaBytes is the size of the activation arena.
func (i *Instance) ArenaBytes() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return int64(i.arenaN)
}

// Close frees the instance's buffers; the weights go with the model's last
// instance.
func (i *Instance) Close() error {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return errors.New("cpu: instance already closed")
	}
	i.closed = true
	i.freePlans()
	i.stream.Close()
	i.mu.Unlock()
	m := i.m
	m.mu.Lock()
	m.refs--
	last := m.refs == 0
	m.mu.Unlock()
	if last {
		m.release()
	}
	i.b.mu.Lock()
	i.b.instances--
	i.b.mu.Unlock()
	return nil
}

func (i *Instance) freePlans() {
	for _, p := range i.plans {
		p.ks.Free()
	}
	i.plans = map[int]*plan{}
	ncpu.Free(i.arena, i.arenaN)
	i.arena, i.arenaN = nil, 0
}

// batchKeys are the program keys a configured instance needs.
func (i *Instance) batchKeys(maxBatch int) []int {
	if !i.m.batched {
		return []int{0}
	}
	keys := make([]int, maxBatch)
	for b := range keys {
		keys[b] = b + 1
	}
	return keys
}

func (i *Instance) configure(maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("max batch %d < 1", maxBatch)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return errors.New("instance is closed")
	}
	keys := i.batchKeys(maxBatch)
	progs := make([]*program, len(keys))
	var arena int64
	for j, k := range keys {
		p, err := i.m.program(k)
		if err != nil {
			return err
		}
		progs[j] = p
		arena = max(arena, p.p.ArenaFloats)
	}
	i.freePlans()
	ab := int(arena) * 4
	a, err := ncpu.Alloc(ab)
	if err != nil {
		return err
	}
	i.arena, i.arenaN = a, ab
	for j, k := range keys {
		ks, err := materialize(progs[j], i.m, a, i.b.units)
		if err != nil {
			i.freePlans()
			return err
		}
		i.plans[k] = &plan{pr: progs[j], ks: ks}
	}
	i.maxBatch = maxBatch
	return nil
}

// MaxBatch is the configured largest batch (0 before ConfigureBatch).
func (i *Instance) MaxBatch() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.maxBatch
}

// SetUnits restricts the instance's kernels to the units in mask (0 = all).
func (i *Instance) SetUnits(mask uint64) {
	i.mu.Lock()
	i.mask = mask
	i.mu.Unlock()
}

// Preempt sets the preemption flag of the instance's stream: a running
// InferBatch stops its kernels within a block and restores from the
// interrupted kernel's idempotent group (REEF §4). The scheduler drives the
// lower-level Run instead.
func (i *Instance) Preempt() { i.stream.Preempt() }

func (i *Instance) planFor(batch int) (*plan, error) {
	if i.closed {
		return nil, errors.New("instance is closed")
	}
	if i.maxBatch == 0 {
		return nil, errors.New("ConfigureBatch was not called")
	}
	if batch < 1 || batch > i.maxBatch {
		return nil, fmt.Errorf("batch %d outside 1..%d", batch, i.maxBatch)
	}
	key := batch
	if !i.m.batched {
		key = 0
	}
	return i.plans[key], nil
}

// InferBatch runs one batch (see libml.Backend.InferBatch).
func (i *Instance) InferBatch(ctx context.Context, batch int, in, out []float32) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return fmt.Errorf("cpu: InferBatch %q: %w", i.m.name, err)
	}
	ep := p.pr.p
	if len(ep.Inputs) != 1 || len(ep.Outputs) != 1 {
		return fmt.Errorf("cpu: InferBatch %q: the model has %d inputs and %d outputs; InferBatch needs one of each (use RunGraph)",
			i.m.name, len(ep.Inputs), len(ep.Outputs))
	}
	isz, osz := i.InputSize(), i.OutputSize()
	if len(in) < batch*isz || len(out) < batch*osz {
		return fmt.Errorf("cpu: InferBatch %q: batch %d needs %d inputs and %d outputs, got %d and %d",
			i.m.name, batch, batch*isz, batch*osz, len(in), len(out))
	}
	ib, ob := ep.Inputs[0], ep.Outputs[0]
	if !i.m.batched {
		for r := 0; r < batch; r++ {
			copy(arenaSlice(i.arena, ib.Off, ib.Size()), in[r*isz:(r+1)*isz])
			if err := i.run(ctx, p); err != nil {
				return fmt.Errorf("cpu: InferBatch %q: %w", i.m.name, err)
			}
			copy(out[r*osz:(r+1)*osz], arenaSlice(i.arena, ob.Off, ob.Size()))
		}
		return nil
	}
	copy(arenaSlice(i.arena, ib.Off, ib.Size()), in[:batch*isz])
	if err := i.run(ctx, p); err != nil {
		return fmt.Errorf("cpu: InferBatch %q: %w", i.m.name, err)
	}
	copy(out[:batch*osz], arenaSlice(i.arena, ob.Off, ob.Size()))
	return nil
}

// InferInput runs one batch whose input is the requests' payload (see
// libml.Backend.InferInput): the payload is gathered and converted in C
// straight into the arena's input tensor (one copy per request), given
// back (in.Gathered) before the kernels run, and the outputs are copied
// into out.
func (i *Instance) InferInput(ctx context.Context, in *libml.Input, out []float32) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	batch := in.N()
	p, err := i.planFor(batch)
	if err != nil {
		return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
	}
	ep := p.pr.p
	if len(ep.Inputs) != 1 || len(ep.Outputs) != 1 {
		return fmt.Errorf("cpu: InferInput %q: the model has %d inputs and %d outputs; InferInput needs one of each",
			i.m.name, len(ep.Inputs), len(ep.Outputs))
	}
	isz, osz := i.InputSize(), i.OutputSize()
	if err := in.Check(batch, isz); err != nil {
		return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
	}
	if len(out) < batch*osz {
		return fmt.Errorf("cpu: InferInput %q: batch %d needs %d outputs, got %d", i.m.name, batch, batch*osz, len(out))
	}
	ib, ob := ep.Inputs[0], ep.Outputs[0]
	dst := arenaSlice(i.arena, ib.Off, ib.Size())
	in.Copies = 1
	if !i.m.batched {
		// one plan execution per request: each request is gathered into
		// the arena right before its run
		for r := 0; r < batch; r++ {
			if err := i.ing.Ingest(dst, in, r, r+1); err != nil {
				return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
			}
			if r == batch-1 {
				in.Gather()
			}
			if err := i.run(ctx, p); err != nil {
				return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
			}
			copy(out[r*osz:(r+1)*osz], arenaSlice(i.arena, ob.Off, ob.Size()))
		}
		return nil
	}
	if err := i.ing.Ingest(dst, in, 0, batch); err != nil {
		return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
	}
	in.Gather()
	if err := i.run(ctx, p); err != nil {
		return fmt.Errorf("cpu: InferInput %q: %w", i.m.name, err)
	}
	copy(out[:batch*osz], arenaSlice(i.arena, ob.Off, ob.Size()))
	return nil
}

// Program returns the compiled program used for a batch size.
func (i *Instance) Program(batch int) (*engine.Program, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	return p.pr.p, nil
}

// KernelInfo is a kernel's metadata for profilers and schedulers.
type KernelInfo struct {
	Index int
	// Name is the ONNX node, Ops the operators fused into the kernel, Op
	// the kernel operation.
	Name, Ops, Op string
	// Grid is the number of blocks, MaxUnits the units it can keep busy.
	Grid, MaxUnits int
	// Idempotent is false for in-place kernels; IdemEntry is where a run
	// interrupted in this kernel restarts.
	Idempotent bool
	IdemEntry  int
	// ScratchBytes is the per-unit scratch a block needs.
	ScratchBytes int64
	// Flops is the kernel's arithmetic (engine.Kernel.Flops; 0 for
	// kernels that do none worth counting).
	Flops float64
	// BlockNs is the mean measured block time, WallNs the mean kernel time
	// (zero until Profile ran).
	BlockNs, WallNs float64
}

// Kernels returns the metadata of the kernels of a batch size's plan, with
// the times measured by the last Profile.
func (i *Instance) Kernels(batch int) ([]KernelInfo, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	ep := p.pr.p
	out := make([]KernelInfo, len(ep.Kernels))
	for j := range ep.Kernels {
		k := &ep.Kernels[j]
		inf := p.ks.Info(j)
		ki := KernelInfo{Index: j, Name: k.Name, Ops: k.Ops, Op: k.Op.String(),
			Grid: int(inf.Grid), MaxUnits: int(min(inf.Grid, int64(i.b.units))),
			Idempotent: k.Idempotent(), IdemEntry: ep.IdemEntry[j], ScratchBytes: inf.Scratch * 4, Flops: k.Flops()}
		if inf.Blocks > 0 {
			ki.BlockNs = float64(inf.BlockNs) / float64(inf.Blocks)
		}
		if inf.Runs > 0 {
			ki.WallNs = float64(inf.WallNs) / float64(inf.Runs)
		}
		out[j] = ki
	}
	return out, nil
}

// Profile runs a batch runs times with block timing on (inputs as they are
// in the arena) and returns the kernels' metadata with measured times.
func (i *Instance) Profile(ctx context.Context, batch, runs int) ([]KernelInfo, error) {
	i.mu.Lock()
	p, err := i.planFor(batch)
	if err != nil {
		i.mu.Unlock()
		return nil, err
	}
	p.ks.ResetStats()
	i.stream.SetProfile(true)
	for r := 0; r < runs && err == nil; r++ {
		err = runAll(ctx, i.stream, p.ks, p.pr.p, i.mask, false)
	}
	i.stream.SetProfile(false)
	i.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return i.Kernels(batch)
}

// Run is the scheduler's entry: it runs kernels start.. of a batch's plan
// on the instance's stream (inputs must already be in place, see Input) and
// reports whether the run was preempted; if so, resume is the kernel to
// restart from (the interrupted kernel's idempotent group entry).
func (i *Instance) Run(batch, start int) (preempted bool, resume int, err error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return false, 0, err
	}
	ep := p.pr.p
	if start < 0 || start > len(ep.Kernels) {
		return false, 0, fmt.Errorf("start %d outside 0..%d", start, len(ep.Kernels))
	}
	i.stream.Restore()
	i.stream.ResetIndex()
	s, err := i.stream.Run(p.ks, start, i.mask)
	if err != nil || s == ncpu.Done {
		return false, 0, err
	}
	idx := int(i.stream.ExecIndex())
	if idx < start {
		idx = start
	}
	i.stream.Restore()
	return true, ep.IdemEntry[idx], nil
}

// PreemptAt arms the stream to preempt itself when a unit claims block blk
// of kernel k (tests; k < 0 disarms).
func (i *Instance) PreemptAt(k int, blk int64) { i.stream.PreemptAt(int64(k), blk) }

// Input returns the arena slice the batch's first input is read from (for
// gathering requests in place); valid until the next ConfigureBatch.
func (i *Instance) Input(batch int) ([]float32, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	b := p.pr.p.Inputs[0]
	return arenaSlice(i.arena, b.Off, b.Size()), nil
}

// Output returns the arena slice holding the batch's first output.
func (i *Instance) Output(batch int) ([]float32, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	b := p.pr.p.Outputs[0]
	return arenaSlice(i.arena, b.Off, b.Size()), nil
}

// Stream is the instance's stream (preemption flag, execution index,
// queue), for a scheduler that launches kernels one at a time with
// ncpu.Stream.Launch on unit masks of its choosing. It must not be used
// while InferBatch or Run runs on the instance.
func (i *Instance) Stream() *ncpu.Stream { return i.stream }

// KernelArray returns the materialized kernels of a batch size's plan (with
// Program(batch), their metadata) for per-kernel launches on Stream.
func (i *Instance) KernelArray(batch int) (*ncpu.Kernels, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	return p.ks, nil
}

// Units is the number of compute units of the backend.
func (i *Instance) Units() int { return i.b.units }

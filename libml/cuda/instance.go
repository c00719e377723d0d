package cuda

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"sluice/libml"
	"sluice/libml/cpu"
	"sluice/libml/engine"
)

// Instance is one instance of a model on the cuda backend: an activation
// arena, a stream state (preemption flag, execution index) and a stream
// in device memory of its own, the model's weights shared.
type Instance struct {
	b *Backend
	m *model

	mu       sync.Mutex // one run, gather or reconfiguration at a time
	closed   bool
	maxBatch int
	arena    uint64
	arenaN   int
	state    uint64
	plans    map[int]*kplan
	ln       *lane
	// prio is the priority of the instance's stream (SetPriority; 0 is
	// the default, lower numbers are higher priorities).
	prio int
	// stage is pinned host memory: the state template and read-back,
	// then the batch's inputs and outputs.
	stage  pinned
	stageN int
	inOff  int
	outOff int
	// desc holds the batch gather's fragment descriptors (encoded in
	// descEnc first); gathered is the batch size whose input a gather has
	// queued (0: none).
	desc     pinned
	descN    int
	descEnc  []byte
	gathered int
	// InferInput: the batch's fragments for the device gather, or the
	// host input the host gatherer writes (instance_input.go)
	inFrags []Frag
	hostIn  []float32
	ing     cpu.Ingester

	// preemption: pmu orders Preempt against the start and end of a run
	pmu     sync.Mutex
	running bool
	req     atomic.Bool
	// flagClear is set while the state's preemption flag is known to be
	// 0 in device memory: a padded launch that carries the instance's
	// job need not clear it (a run that ends unpreempted, or a padded
	// launch that cleared it, sets it; Preempt and a block lost in a
	// padded launch clear it)
	flagClear atomic.Bool

	stats instStats
	// pad holds the control blocks of the instance's padded launches
	// (RunSegmentPadded), made on first use; padRun is its padded run,
	// reused segment after segment
	pad    *padBufs
	padRun padRun
}

// Offsets in the staging buffer: the template a run writes into the
// stream state (flag clear, execution index -1), and where the state is
// read back to.
const (
	stageReset = 0
	stageState = 16
	stageData  = 32
)

// lane is where an instance's kernels run: a context (the backend's
// device, or a green-context partition the instance owns), a stream in it
// and the events of the stream's device window.
type lane struct {
	ctx gpuCtx
	own bool
	s   gpuStream
	ev  []gpuEvent
}

func newLane(ctx gpuCtx, own bool, window, prio int) (*lane, error) {
	l := &lane{ctx: ctx, own: own}
	var err error
	if l.s, err = ctx.NewStream(prio); err != nil {
		return nil, err
	}
	for k := 0; k < window; k++ {
		e, err := ctx.NewEvent()
		if err != nil {
			l.close()
			return nil, err
		}
		l.ev = append(l.ev, e)
	}
	return l, nil
}

func (l *lane) close() error {
	var errs []error
	for _, e := range l.ev {
		errs = append(errs, e.Close())
	}
	if l.s != nil {
		errs = append(errs, l.s.Close())
	}
	if l.own {
		errs = append(errs, l.ctx.Close())
	}
	l.ev, l.s = nil, nil
	return errors.Join(errs...)
}

// kplan is a program's kernels planned over this instance's memory:
// launches in their default version (0), and vers[k], for a kernel with
// several versions, every version of kernel k (vers[k][0] is
// launches[k]); nil for a kernel with one.
type kplan struct {
	pr       *program
	launches []launchRec
	vers     [][]launchRec
}

// launch is kernel k's launch in version v (0: launches[k]); nil when the
// kernel has no such version.
func (p *kplan) launch(k, v int) *launchRec {
	if v == 0 {
		return &p.launches[k]
	}
	if v < 0 || v >= len(p.vers[k]) {
		return nil
	}
	return &p.vers[k][v]
}

// inPlan reports whether a run of kernels [at.Kernel, to) from resume
// point at fits the plan: at.Block > 0 continues a kernel before to in a
// version the plan has, from a block inside that version's grid, and a
// run from block 0 is in version 0.
func (p *kplan) inPlan(at ResumePoint, to int) bool {
	if at.Kernel < 0 || to < at.Kernel || to > len(p.launches) || at.Block < 0 {
		return false
	}
	if at.Block == 0 {
		return at.Version == 0
	}
	l := p.launch(at.Kernel, at.Version)
	return at.Kernel < to && l != nil && at.Block <= l.grid
}

// launchRec is one kernel launch: grid 0 for a kernel with nothing to
// launch.
type launchRec struct {
	kernel string
	grid   int
	params []byte
}

var _ libml.Instance = (*Instance)(nil)

func (b *Backend) newInstance(m *model) (*Instance, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.ready(); err != nil {
		return nil, err
	}
	i := &Instance{b: b, m: m, plans: map[int]*kplan{}}
	var err error
	if i.state, err = b.dev.Alloc(StateSize); err != nil {
		return nil, fmt.Errorf("stream state: %w", err)
	}
	fresh, _ := EncodeState(0, 0)
	if err := b.dev.Write(i.state, fresh); err != nil {
		b.dev.Free(i.state)
		return nil, fmt.Errorf("stream state: %w", err)
	}
	ctx, own := b.dev, false
	if b.share > 0 {
		if ctx, err = b.partition(b.share, nil); err != nil {
			b.dev.Free(i.state)
			return nil, fmt.Errorf("SM share: %w", err)
		}
		own = true
	}
	if i.ln, err = newLane(ctx, own, b.opts.Window, 0); err != nil {
		if own {
			ctx.Close()
		}
		b.dev.Free(i.state)
		return nil, err
	}
	m.mu.Lock()
	m.refs++
	m.mu.Unlock()
	b.instances++
	return i, nil
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
// without one run a batch as one program execution per request.
func (i *Instance) Batched() bool { return i.m.batched }

// WeightBytes is the size of the model's shared weights in device memory.
func (i *Instance) WeightBytes() int64 { return int64(i.m.wbytes) }

// ModelDeviceBytes is the device memory of the model, shared by its
// instances: weights and the compiled programs' constants.
func (i *Instance) ModelDeviceBytes() int64 { return i.m.deviceBytes() }

// DeviceBytes is the device memory this instance owns: its activation
// arena and its stream state. Weights belong to the model.
func (i *Instance) DeviceBytes() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return int64(i.arenaN) + StateSize
}

// ArenaBytes is the size of the activation arena.
func (i *Instance) ArenaBytes() int64 {
	i.mu.Lock()
	defer i.mu.Unlock()
	return int64(i.arenaN)
}

// SMs is the SM count the instance's kernels run on: its partition's, or
// the whole device's.
func (i *Instance) SMs() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.ln == nil {
		return 0
	}
	return i.ln.ctx.SMs()
}

// SetSMs binds the instance to a green context of its own with a
// partition of at least sms SMs (the driver rounds up to its granularity:
// SMs tells what it got); sms 0 returns it to the whole device. The
// instance keeps its memory (partitions share the device's), so a shadow
// IF is LinkModel plus SetSMs, ready once its kernels are loaded. Errors
// wrap ErrNoGreen when the driver has no green contexts.
func (i *Instance) SetSMs(sms int) error {
	if sms < 0 {
		return fmt.Errorf("cuda: SetSMs(%d)", sms)
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.closed {
		return errors.New("cuda: SetSMs: instance is closed")
	}
	ctx, own := i.b.dev, false
	if sms > 0 {
		var err error
		if ctx, err = i.b.partition(sms, i.ln.ctx); err != nil {
			return fmt.Errorf("cuda: SetSMs(%d): %w", sms, err)
		}
		own = true
	}
	ln, err := newLane(ctx, own, i.b.opts.Window, i.prio)
	if err != nil {
		if own {
			ctx.Close()
		}
		return fmt.Errorf("cuda: SetSMs(%d): %w", sms, err)
	}
	old := i.ln
	if err := old.s.Sync(); err != nil {
		ln.close()
		return fmt.Errorf("cuda: SetSMs(%d): %w", sms, err)
	}
	i.ln = ln
	i.gathered = 0 // a queued gather ran on the old stream: gather again
	if err := old.close(); err != nil {
		return fmt.Errorf("cuda: SetSMs(%d): closing the old stream: %w", sms, err)
	}
	return nil
}

// Close frees the instance's device memory and stream; the weights go
// with the model's last instance.
func (i *Instance) Close() error {
	i.mu.Lock()
	if i.closed {
		i.mu.Unlock()
		return errors.New("cuda: instance already closed")
	}
	i.closed = true
	dev := i.b.dev
	var errs []error
	if i.ln != nil {
		errs = append(errs, i.ln.s.Sync(), i.ln.close())
	}
	i.freeArena()
	if i.desc != nil {
		errs = append(errs, i.desc.Free())
		i.desc = nil
	}
	errs = append(errs, i.freePad(), dev.Free(i.state))
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
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cuda: Close: %w", err)
	}
	return nil
}

func (i *Instance) freeArena() {
	i.plans = map[int]*kplan{}
	if i.arena != 0 {
		i.b.dev.Free(i.arena)
		i.arena, i.arenaN = 0, 0
	}
	if i.stage != nil {
		i.stage.Free()
		i.stage, i.stageN = nil, 0
	}
	i.maxBatch, i.gathered = 0, 0
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
	// a queued gather may still write the arena it is about to free
	if err := i.ln.s.Sync(); err != nil {
		return err
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
	i.freeArena()
	dev := i.b.dev
	var err error
	i.arenaN = int(arena) * 4
	if i.arena, err = dev.Alloc(i.arenaN); err != nil {
		i.arenaN = 0
		return fmt.Errorf("activation arena of %d bytes: %w", arena*4, err)
	}
	isz, osz := i.InputSize(), i.OutputSize()
	i.inOff = stageData
	i.outOff = i.inOff + 4*maxBatch*isz
	i.stageN = i.outOff + 4*maxBatch*osz
	if i.stage, err = dev.HostAlloc(i.stageN); err != nil {
		i.freeArena()
		return fmt.Errorf("staging buffer: %w", err)
	}
	reset, _ := EncodeState(0, 0)
	i.stage.Put(stageReset, reset[:16])
	for j, k := range keys {
		p, err := i.materialize(progs[j])
		if err != nil {
			i.freeArena()
			return err
		}
		i.plans[k] = p
	}
	i.maxBatch = maxBatch
	return nil
}

// materialize plans every kernel of pr over this instance's arena and
// stream state: grid, tiling and the packed parameters of its launch.
func (i *Instance) materialize(pr *program) (*kplan, error) {
	ep := pr.p
	addr := func(r engine.Ref) uint64 {
		switch r.Space {
		case engine.SpaceArena:
			return i.arena + 4*uint64(r.Off)
		case engine.SpaceWeights:
			return i.m.w + 4*uint64(r.Off)
		case engine.SpaceConsts:
			return pr.consts + 4*uint64(r.Off)
		}
		return 0
	}
	p := &kplan{pr: pr, launches: make([]launchRec, len(ep.Kernels)), vers: make([][]launchRec, len(ep.Kernels))}
	for k := range ep.Kernels {
		kk := &ep.Kernels[k]
		if kk.Op == engine.OpNop {
			continue
		}
		a := Args{Out: addr(kk.Out), Aux: pr.aux[k], P: kk.P, F: kk.F}
		for j := range kk.In {
			a.In[j] = addr(kk.In[j])
		}
		base := a
		l, err := Plan(Op(kk.Op), &a)
		if err != nil {
			return nil, fmt.Errorf("kernel %d (%s %s): %w", k, kk.Ops, kk.Name, err)
		}
		p.launches[k] = launchRec{kernel: l.Kernel, grid: l.Grid, params: Pack(i.state, int64(k), &a)}
		if nv := Versions(Op(kk.Op)); nv > 1 {
			p.vers[k] = make([]launchRec, nv)
			p.vers[k][0] = p.launches[k]
			for v := 1; v < nv; v++ {
				av := base
				lv, err := PlanVersion(Op(kk.Op), &av, v)
				if err != nil {
					return nil, fmt.Errorf("kernel %d (%s %s) version %d: %w", k, kk.Ops, kk.Name, v, err)
				}
				p.vers[k][v] = launchRec{kernel: lv.Kernel, grid: lv.Grid, params: Pack(i.state, int64(k), &av)}
			}
		}
	}
	return p, nil
}

// MaxBatch is the configured largest batch (0 before ConfigureBatch).
func (i *Instance) MaxBatch() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.maxBatch
}

func (i *Instance) planFor(batch int) (*kplan, error) {
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

// singleIO checks that the program has one input and one output.
func (i *Instance) singleIO(ep *engine.Program) error {
	if len(ep.Inputs) != 1 || len(ep.Outputs) != 1 {
		return fmt.Errorf("the model has %d inputs and %d outputs; InferBatch needs one of each",
			len(ep.Inputs), len(ep.Outputs))
	}
	return nil
}

// InferBatch runs one batch (see libml.Backend.InferBatch): the inputs
// are copied to the arena, the program runs on the instance's stream
// (preempted runs restore; ctx's cancellation preempts and returns its
// error) and the outputs are copied back.
func (i *Instance) InferBatch(ctx context.Context, batch int, in, out []float32) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	if err := i.inferBatch(ctx, batch, in, out); err != nil {
		return fmt.Errorf("cuda: InferBatch %q: %w", i.m.name, err)
	}
	return nil
}

func (i *Instance) inferBatch(ctx context.Context, batch int, in, out []float32) error {
	p, err := i.planFor(batch)
	if err != nil {
		return err
	}
	ep := p.pr.p
	if err := i.singleIO(ep); err != nil {
		return err
	}
	isz, osz := i.InputSize(), i.OutputSize()
	if len(in) < batch*isz || len(out) < batch*osz {
		return fmt.Errorf("batch %d needs %d inputs and %d outputs, got %d and %d",
			batch, batch*isz, batch*osz, len(in), len(out))
	}
	i.gathered = 0
	ib, ob := ep.Inputs[0], ep.Outputs[0]
	i.stage.Put(i.inOff, f32view(in[:batch*isz]))
	reqs, per := 1, batch
	if !i.m.batched {
		reqs, per = batch, 1
	}
	for r := 0; r < reqs; r++ {
		n := 4 * per * isz
		if err := i.ln.s.WriteAsync(i.arena+4*uint64(ib.Off), i.stage, i.inOff+r*n, n); err != nil {
			return err
		}
		if err := i.runAll(ctx, p, &readBack{off: i.outOff + r*4*per*osz, src: ob.Off, n: 4 * per * osz}); err != nil {
			return err
		}
	}
	i.stage.Get(i.outOff, f32view(out[:batch*osz]))
	return nil
}

// readBack is an output copy queued after a run's last kernel: n bytes
// from arena element off src into the staging buffer at off.
type readBack struct {
	off int
	src int64
	n   int
}

// runAll runs a plan from its first kernel to the end, restoring after
// preemptions from the interrupted kernel's idempotent group, until done
// or ctx ends (then it returns ctx's error).
func (i *Instance) runAll(ctx context.Context, p *kplan, out *readBack) error {
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { i.Preempt() })
		defer stop()
	}
	start := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		preempted, resume, err := i.run(p, ResumePoint{Kernel: start}, out, nil)
		if err != nil {
			return err
		}
		if !preempted {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		start = resume
	}
}

// run runs kernels at.. of p once (kernel at.Kernel from its block
// at.Block: a job that dynamic kernel padding advanced) through the
// virtual host queue: the stream state is reset, then kernels are
// launched in order (each through pad when pad is set and picks BE
// blocks for it, see RunSegmentPadded), at most
// the window outstanding on the device (the host waits on the event of
// the kernel Window launches back). A preemption request stops the
// launches (the host queue's reset, O(1)); the stream then drains (queued
// kernels exit in their prologue, running blocks at their next poll) and
// the state is read back. The run was preempted when the flag is set or
// kernels were left unlaunched; resume is then the first kernel of the
// idempotent group of the last kernel that started (REEF §4.4).
func (i *Instance) run(p *kplan, at ResumePoint, out *readBack, pad *padRun) (preempted bool, resume int, err error) {
	preempted, exec, err := i.runTo(p, at, len(p.launches), out, pad, false)
	if err != nil || !preempted {
		return false, 0, err
	}
	return true, i.resumeAt(p, at.Kernel, exec), nil
}

// resumeAt is where a run from kernel start that was preempted after
// kernel exec started restarts: the first kernel of exec's minimal
// idempotent group (REEF §4.4), counted in the instance's stats.
func (i *Instance) resumeAt(p *kplan, start, exec int) int {
	n := len(p.launches)
	idx := min(exec, n-1)
	if idx < start {
		idx = min(start, n-1) // no kernel of this run started
	}
	resume := p.pr.p.IdemEntry[idx]
	i.stats.preemptions.Add(1)
	i.stats.lastResume.Store(int64(resume))
	return resume
}

// runTo is run's body for kernels [at.Kernel, to): it reports whether
// the run was preempted and the execution index of the last kernel that
// started (-1: none). armed says that Arm has marked the run as running
// already, so a preemption requested since then stops it before its
// first launch.
func (i *Instance) runTo(p *kplan, at ResumePoint, to int, out *readBack, pad *padRun, armed bool) (preempted bool, exec int, err error) {
	ln, start := i.ln, at.Kernel
	i.pmu.Lock()
	if !armed || !i.running {
		i.running = true
		i.req.Store(false)
	}
	i.pmu.Unlock()
	defer func() {
		i.pmu.Lock()
		i.running = false
		i.pmu.Unlock()
	}()
	i.stats.runs.Add(1)
	if err := ln.s.WriteAsync(i.state, i.stage, stageReset, 16); err != nil {
		return false, 0, err
	}
	w := len(ln.ev)
	next, q := start, 0
	for ; next < to; next++ {
		if i.req.Load() {
			break
		}
		l := &p.launches[next]
		params, grid := l.params, l.grid
		if next == start && at.Block > 0 {
			// a kernel padding started: it finishes in its version
			l = p.launch(next, at.Version)
			if at.Block >= l.grid {
				continue // padding ran it all
			}
			params, grid = rebase(l.params, at.Block), l.grid-at.Block
		}
		if grid == 0 {
			continue
		}
		ev := ln.ev[q%w]
		if q >= w {
			// the window is full: wait for the kernel w launches back
			if err := ev.Sync(); err != nil {
				return false, 0, err
			}
			if i.req.Load() {
				break
			}
		}
		padded := false
		if pad != nil {
			if padded, err = pad.launch(i, p, next, params, grid, q); err != nil {
				return false, 0, fmt.Errorf("kernel %d: padded launch: %w", next, err)
			}
		}
		if !padded {
			if err := ln.s.Launch(l.kernel, grid, params); err != nil {
				return false, 0, fmt.Errorf("kernel %d: %w", next, err)
			}
		}
		if err := ev.Record(ln.s); err != nil {
			return false, 0, err
		}
		q++
	}
	i.stats.launches.Add(int64(q))
	n := len(p.launches)
	if out != nil && next == n {
		if err := ln.s.ReadAsync(i.stage, out.off, i.arena+4*uint64(out.src), out.n); err != nil {
			return false, 0, err
		}
	}
	if err := ln.s.ReadAsync(i.stage, stageState, i.state, 16); err != nil {
		return false, 0, err
	}
	if err := ln.s.Sync(); err != nil {
		return false, 0, err
	}
	if pad != nil {
		pad.finish()
	}
	var st [16]byte
	i.stage.Get(stageState, st[:])
	flag := int32(binary.LittleEndian.Uint32(st[StateFlag:]))
	// a Preempt under way finishes its flag write before this returns;
	// one requested during the run may have set the flag after the state
	// was read back
	i.pmu.Lock()
	i.running = false
	i.flagClear.Store(flag == 0 && !i.req.Load())
	i.pmu.Unlock()
	exec = int(int64(binary.LittleEndian.Uint64(st[StateExec:])))
	if next == to && (flag == 0 || to == start) {
		return false, exec, nil
	}
	return true, exec, nil
}

// Preempt preempts the instance's running program, if any: the host
// queue stops, the stream's flag is set in device memory (Preempt returns
// once it is there) and the launched kernels die within a block or an
// in-loop poll. InferBatch then restores from the interrupted kernel's
// idempotent group; Run reports where to resume. Without a run under way
// it does nothing.
func (i *Instance) Preempt() error {
	i.pmu.Lock()
	defer i.pmu.Unlock()
	if !i.running || i.req.Load() {
		return nil
	}
	i.req.Store(true)
	i.flagClear.Store(false)
	return i.b.setFlag(i.state)
}

// PreemptWith preempts the instance's run and those of others
// (libml.PreemptBatcher): the flags of all of them on this backend are
// written before one wait for the control stream, so preempting n
// streams costs one round trip to the device, not n; others of another
// backend are preempted one by one. Each instance's lock is held until its
// flag is there, as Preempt holds it (in the order of the instances'
// state addresses: two callers cannot deadlock).
func (i *Instance) PreemptWith(others []libml.SegmentInstance) error {
	mine := make([]*Instance, 0, 1+len(others))
	mine = append(mine, i)
	var errs []error
	for _, o := range others {
		if ci, ok := o.(*Instance); ok && ci.b == i.b {
			if ci != i && !slices.Contains(mine, ci) {
				mine = append(mine, ci)
			}
			continue
		}
		if o != nil {
			errs = append(errs, o.Preempt())
		}
	}
	slices.SortFunc(mine, func(a, b *Instance) int { return cmp.Compare(a.state, b.state) })
	states := make([]uint64, 0, len(mine))
	for _, ci := range mine {
		ci.pmu.Lock()
		defer ci.pmu.Unlock()
		if !ci.running || ci.req.Load() {
			continue
		}
		ci.req.Store(true)
		ci.flagClear.Store(false)
		states = append(states, ci.state)
	}
	errs = append(errs, i.b.setFlags(states))
	return errors.Join(errs...)
}

// instStats are an instance's counters (Stats reads them).
type instStats struct {
	runs, launches, preemptions, lastResume atomic.Int64
	// padding (RunSegmentPadded): PadStats' fields
	padKernels, padPadded, padBEKernels, padBEBlocks, padBEVersioned, padCostly, padFlagClears atomic.Int64
}

// addPad adds a padded segment's padding to the counters.
func (s *instStats) addPad(st *PadStats) {
	s.padKernels.Add(st.Kernels)
	s.padPadded.Add(st.Padded)
	s.padBEKernels.Add(st.BEKernels)
	s.padBEBlocks.Add(st.BEBlocks)
	s.padBEVersioned.Add(st.BEVersioned)
	s.padCostly.Add(st.Costly)
	s.padFlagClears.Add(st.FlagClears)
}

// Stats are an instance's execution counters.
type Stats struct {
	// Runs counts program executions (restores included), Launches the
	// kernels launched, Preemptions the runs preempted.
	Runs, Launches, Preemptions int64
	// LastResume is the kernel the last preempted run restarts from.
	LastResume int
	// Pad is what padding did in the instance's padded segments
	// (RunSegmentPadded), summed.
	Pad PadStats
}

// Stats returns the instance's counters.
func (i *Instance) Stats() Stats {
	return Stats{Runs: i.stats.runs.Load(), Launches: i.stats.launches.Load(),
		Preemptions: i.stats.preemptions.Load(), LastResume: int(i.stats.lastResume.Load()),
		Pad: PadStats{Kernels: i.stats.padKernels.Load(), Padded: i.stats.padPadded.Load(),
			BEKernels: i.stats.padBEKernels.Load(), BEBlocks: i.stats.padBEBlocks.Load(),
			BEVersioned: i.stats.padBEVersioned.Load(), Costly: i.stats.padCostly.Load(),
			FlagClears: i.stats.padFlagClears.Load()}}
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

// Launches returns the kernel launches of a batch size's plan, one per
// engine kernel (Grid 0: nothing to launch).
func (i *Instance) Launches(batch int) ([]Launch, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	p, err := i.planFor(batch)
	if err != nil {
		return nil, err
	}
	out := make([]Launch, len(p.launches))
	for k, l := range p.launches {
		out[k] = Launch{Kernel: l.kernel, Grid: l.grid}
	}
	return out, nil
}

// ResumePoint is where a job's next run starts: kernel Kernel, from its
// block Block (blocks before it have run: dynamic kernel padding ran
// them inside another instance's padded launches, see RunSegmentPadded).
// Version is the version (PlanVersion) whose blocks those were: a kernel
// padding started in a version is finished in that version, since the
// versions' blocks tile the output differently. It is 0 when Block is 0.
// It is the segment contract's type (libml.ResumePoint).
type ResumePoint = libml.ResumePoint
